// kiln's in-process C compiler (compiler/c/inprocess_cc.h) against the clang executable it
// stands in for: the same objects byte for byte, the same diagnostics, and refused where it
// would not be the same compiler.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>

#include "compiler/c/inprocess_cc.h"
#include "compiler/c/toolchain.h"
#include "compiler/subprocess.h"
#include "tests/helpers.h"
#include "util/fs.h"

namespace kiln {
namespace {

namespace fs = std::filesystem;

// A vector loop, a math call and a warning: enough for the optimiser and the backend to differ
// if the invocation did.
constexpr const char* kSource = R"(#include <math.h>
#include <stdint.h>
void kernel(float *restrict y, const float *restrict x, int64_t n) {
  int unused;
  for (int64_t i = 0; i < n; ++i) y[i] = x[i] > 0 ? x[i] : expm1f(x[i]);
}
)";

constexpr const char* kBroken = R"(int f(int x) {
  return x + undefined_symbol_xyz;
}
)";

const InProcessCc* in_process_or_skip(const Toolchain& tc) {
  const InProcessCc* in = tc.in_process();
#ifdef KILN_TEST_CLANG_PLUGIN
  // Built with clang's development files: the plugin must be found for the toolchain's clang.
  EXPECT_NE(in, nullptr) << "no in-process compiler for " << tc.version();
#endif
  return in;
}

// The command line Toolchain::compile_object runs.
std::vector<std::string> compile_argv(const Toolchain& tc, const fs::path& src,
                                      const fs::path& obj) {
  std::vector<std::string> argv{tc.cc()};
  for (const auto& f : tc.flags()) {
    if (f != "-shared") argv.push_back(f);
  }
  argv.insert(argv.end(), {"-c", src.string(), "-o", obj.string()});
  return argv;
}

TEST(InProcessCc, ObjectsAndWarningsMatchTheCompilerProcessByteForByte) {
  const Toolchain& tc = Toolchain::get();
  const InProcessCc* in = in_process_or_skip(tc);
  if (!in) GTEST_SKIP() << "kiln was built without clang's development files";
  const fs::path dir = testing::temp_dir("inprocess_cc_same");
  write_file_atomic(dir / "k.c", kSource);
  ProcessResult p = run_process(compile_argv(tc, dir / "k.c", dir / "process.o"));
  ASSERT_EQ(p.exit_code, 0) << p.err;
  std::optional<ProcessResult> i = in->compile(compile_argv(tc, dir / "k.c", dir / "inproc.o"));
  ASSERT_TRUE(i.has_value());
  ASSERT_EQ(i->exit_code, 0) << i->err;
  const std::string a = read_file(dir / "process.o"), b = read_file(dir / "inproc.o");
  ASSERT_FALSE(a.empty());
  EXPECT_EQ(a, b) << "the in-process object differs from clang's";
  EXPECT_NE(p.err.find("unused variable 'unused'"), std::string::npos) << p.err;
  EXPECT_EQ(i->err, p.err);
}

TEST(InProcessCc, ErrorsReadAsTheProcessWritesThemAndLeaveNoObject) {
  const Toolchain& tc = Toolchain::get();
  const InProcessCc* in = in_process_or_skip(tc);
  if (!in) GTEST_SKIP() << "kiln was built without clang's development files";
  const fs::path dir = testing::temp_dir("inprocess_cc_error");
  write_file_atomic(dir / "bad.c", kBroken);
  ProcessResult p = run_process(compile_argv(tc, dir / "bad.c", dir / "process.o"));
  std::optional<ProcessResult> i = in->compile(compile_argv(tc, dir / "bad.c", dir / "inproc.o"));
  ASSERT_TRUE(i.has_value());
  EXPECT_NE(p.exit_code, 0);
  EXPECT_EQ(i->exit_code, 1);
  // file:line:col: error: ... — the form kiln maps back to a node's fragment line.
  EXPECT_NE(i->err.find((dir / "bad.c").string() + ":2:14: error: use of undeclared identifier "
                                                   "'undefined_symbol_xyz'"),
            std::string::npos)
      << i->err;
  EXPECT_EQ(i->err, p.err);
  EXPECT_FALSE(fs::exists(dir / "inproc.o"));
}

TEST(InProcessCc, UnwritableObjectIsACompileErrorNamingThePath) {
  const Toolchain& tc = Toolchain::get();
  const InProcessCc* in = in_process_or_skip(tc);
  if (!in) GTEST_SKIP() << "kiln was built without clang's development files";
  const fs::path dir = testing::temp_dir("inprocess_cc_unwritable");
  write_file_atomic(dir / "k.c", kSource);
  const fs::path obj = dir / "missing-dir" / "k.o";
  std::optional<ProcessResult> i = in->compile(compile_argv(tc, dir / "k.c", obj));
  ASSERT_TRUE(i.has_value());
  EXPECT_EQ(i->exit_code, 1);
  EXPECT_NE(i->err.find(obj.string()), std::string::npos) << i->err;
}

TEST(InProcessCc, RefusedForAnotherClangVersionOrWhenTurnedOff) {
  const Toolchain& tc = Toolchain::get();
  const std::string exe = find_program(tc.cc());
  // A plugin is used only with the clang it was built against: the objects must be the same.
  EXPECT_EQ(InProcessCc::find(exe, "clang version 0.0.1 (not this one)"), nullptr);
  EXPECT_EQ(InProcessCc::find(exe, ""), nullptr);
  // A wrapper that prints the same version is not that clang (the tests' wrapper counts and
  // delays compiles, which must then happen).
  EXPECT_EQ(InProcessCc::find(KILN_TEST_CC_WRAPPER, tc.version()), nullptr);
  ::setenv("KILN_INPROCESS_CC", "0", 1);
  const InProcessCc* off = InProcessCc::find(exe, tc.version());
  ::unsetenv("KILN_INPROCESS_CC");
  EXPECT_EQ(off, nullptr);
  EXPECT_EQ(InProcessCc::find(exe, tc.version()), tc.in_process());
}

TEST(InProcessCc, DriverCommandsItCannotTakeAreLeftToTheProcess) {
  const Toolchain& tc = Toolchain::get();
  const InProcessCc* in = in_process_or_skip(tc);
  if (!in) GTEST_SKIP() << "kiln was built without clang's development files";
  const fs::path dir = testing::temp_dir("inprocess_cc_link");
  write_file_atomic(dir / "k.c", kSource);
  // Compile and link: two jobs, which only the driver process runs.
  EXPECT_FALSE(in->compile({tc.cc(), "-shared", "-fPIC", (dir / "k.c").string(), "-o",
                            (dir / "k.so").string()})
                   .has_value());
  EXPECT_FALSE(fs::exists(dir / "k.so"));
}

}  // namespace
}  // namespace kiln
