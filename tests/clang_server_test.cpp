// kiln's compile servers (compiler/c/clang_server.h) against the clang executable they stand
// in for: the same objects byte for byte, the same diagnostics, refused where they would not be
// the same compiler, and a server that dies costs one clang process, never a failed compile.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>

#include <unistd.h>

#include "compiler/c/clang_server.h"
#include "compiler/c/toolchain.h"
#include "compiler/compile.h"
#include "compiler/subprocess.h"
#include "ops/builders.h"
#include "tests/helpers.h"
#include "util/fs.h"
#include "util/strings.h"

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

ClangServers* servers_or_skip(const Toolchain& tc) {
  ClangServers* in = tc.servers();
#ifdef KILN_TEST_CLANG_SERVER
  // Built with clang's development files: the server must stand in for the toolchain's clang.
  EXPECT_NE(in, nullptr) << "no compile server for " << tc.version();
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

TEST(ClangServer, ObjectsAndWarningsMatchTheCompilerProcessByteForByte) {
  const Toolchain& tc = Toolchain::get();
  ClangServers* in = servers_or_skip(tc);
  if (!in) GTEST_SKIP() << "kiln was built without clang's development files";
  const fs::path dir = testing::temp_dir("clang_server_same");
  write_file_atomic(dir / "k.c", kSource);
  ProcessResult p = run_process(compile_argv(tc, dir / "k.c", dir / "process.o"));
  ASSERT_EQ(p.exit_code, 0) << p.err;
  std::optional<ProcessResult> i = in->compile(compile_argv(tc, dir / "k.c", dir / "inproc.o"));
  ASSERT_TRUE(i.has_value());
  ASSERT_EQ(i->exit_code, 0) << i->err;
  const std::string a = read_file(dir / "process.o"), b = read_file(dir / "inproc.o");
  ASSERT_FALSE(a.empty());
  EXPECT_EQ(a, b) << "the server's object differs from clang's";
  EXPECT_NE(p.err.find("unused variable 'unused'"), std::string::npos) << p.err;
  EXPECT_EQ(i->err, p.err);
}

TEST(ClangServer, ErrorsReadAsTheProcessWritesThemAndLeaveNoObject) {
  const Toolchain& tc = Toolchain::get();
  ClangServers* in = servers_or_skip(tc);
  if (!in) GTEST_SKIP() << "kiln was built without clang's development files";
  const fs::path dir = testing::temp_dir("clang_server_error");
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

TEST(ClangServer, AKilledServerCostsOneClangProcessAndTheNextCompileStartsAnother) {
  const Toolchain& tc = Toolchain::get();
  ClangServers* in = servers_or_skip(tc);
  if (!in) GTEST_SKIP() << "kiln was built without clang's development files";
  const fs::path dir = testing::temp_dir("clang_server_killed");
  write_file_atomic(dir / "k.c", kSource);
  ASSERT_TRUE(in->compile(compile_argv(tc, dir / "k.c", dir / "a.o")).has_value());
  // This process's idle servers are killed behind kiln's back (an OOM killer, a pkill).
  const std::string pids = run_process({"pgrep", "-P", std::to_string(::getpid())}).out;
  ASSERT_FALSE(pids.empty());
  for (const auto& pid : split_lines(pids)) run_process({"kill", "-9", pid});
  const int before = in->started();
  // Through the toolchain, as a kernel compiles: the dead server is noticed, the unit goes to
  // a clang process, and the compile succeeds.
  CompileOutcome o = tc.compile_object(dir / "k.c", dir / "b.o", {});
  EXPECT_TRUE(o.ok) << o.log;
  EXPECT_EQ(read_file(dir / "b.o"), read_file(dir / "a.o"));
  // The next compile starts a fresh server, which holds none of this process's descriptors
  // but its socket (an inherited pipe end would keep the pipe open as long as it lives).
  int pipe_fds[2];
  ASSERT_EQ(::pipe(pipe_fds), 0);  // without O_CLOEXEC, as an embedding program might
  std::optional<ProcessResult> again = in->compile(compile_argv(tc, dir / "k.c", dir / "c.o"));
  ASSERT_TRUE(again.has_value());
  EXPECT_EQ(again->exit_code, 0) << again->err;
  EXPECT_GT(in->started(), before);
  const std::vector<std::string> fresh =
      split_lines(run_process({"pgrep", "-P", std::to_string(::getpid())}).out);
  ASSERT_FALSE(fresh.empty());
  for (const auto& pid : fresh) {
    std::vector<std::string> fds;
    for (const auto& e : fs::directory_iterator("/proc/" + pid + "/fd"))
      fds.push_back(e.path().filename().string());
    std::sort(fds.begin(), fds.end());
    EXPECT_EQ(fds, (std::vector<std::string>{"0", "1", "2"})) << "server " << pid;
  }
  ::close(pipe_fds[0]);
  ::close(pipe_fds[1]);
}

TEST(ClangServer, AModelsKernelsCompileOnServersAndTheReportSaysSo) {
  const Toolchain& tc = Toolchain::get();
  ClangServers* in = servers_or_skip(tc);
  if (!in) GTEST_SKIP() << "kiln was built without clang's development files";
  Graph g("served");
  Var x = input(g, "x", DType::kFloat32, {kDynamic, 64});
  g.set_outputs({relu(exp(x) + x), softmax(x, 1)});
  CompileOptions options;
  options.cache_dir = testing::temp_dir("clang_server_model");  // empty: every kernel compiles
  Function f = compile(g, options);
  const KernelReport& k = f.info().kernels;
  ASSERT_GT(k.compiled, 0);
  EXPECT_EQ(k.served, k.compiled);
  const Tensor t = Tensor::from_doubles(DType::kFloat32, {1, 64}, std::vector<double>(64, -0.5));
  EXPECT_NEAR(f({t})[0].load(0), std::max(0.0, std::exp(-0.5) - 0.5), 1e-6);
}

TEST(ClangServer, UnwritableObjectIsACompileErrorNamingThePath) {
  const Toolchain& tc = Toolchain::get();
  ClangServers* in = servers_or_skip(tc);
  if (!in) GTEST_SKIP() << "kiln was built without clang's development files";
  const fs::path dir = testing::temp_dir("clang_server_unwritable");
  write_file_atomic(dir / "k.c", kSource);
  const fs::path obj = dir / "missing-dir" / "k.o";
  std::optional<ProcessResult> i = in->compile(compile_argv(tc, dir / "k.c", obj));
  ASSERT_TRUE(i.has_value());
  EXPECT_EQ(i->exit_code, 1);
  EXPECT_NE(i->err.find(obj.string()), std::string::npos) << i->err;
}

TEST(ClangServer, RefusedForAnotherClangVersionOrWhenTurnedOff) {
  const Toolchain& tc = Toolchain::get();
  const std::string exe = find_program(tc.cc());
  // A plugin is used only with the clang it was built against: the objects must be the same.
  EXPECT_EQ(ClangServers::find(exe, "clang version 0.0.1 (not this one)"), nullptr);
  EXPECT_EQ(ClangServers::find(exe, ""), nullptr);
  // A wrapper that prints the same version is not that clang (the tests' wrapper counts and
  // delays compiles, which must then happen).
  EXPECT_EQ(ClangServers::find(KILN_TEST_CC_WRAPPER, tc.version()), nullptr);
  ::setenv("KILN_CLANG_SERVER", "0", 1);
  ClangServers* off = ClangServers::find(exe, tc.version());
  ::unsetenv("KILN_CLANG_SERVER");
  EXPECT_EQ(off, nullptr);
  EXPECT_EQ(ClangServers::find(exe, tc.version()), tc.servers());
}

TEST(ClangServer, AProgramThatIsNoServerIsRefusedWithAWarningAndWithoutHanging) {
  const Toolchain& tc = Toolchain::get();
  // Another spelling of the compiler's path: a lookup of its own (lookups are remembered).
  const fs::path exe = find_program(tc.cc());
  std::string spelled = (exe.parent_path() / "." / exe.filename()).string();
  // cat never says hello (it waits for input, as kiln waits for it): refused after the
  // hello limit, where a compile without one hung (the ctest timeout ends it). yes writes
  // nonsense forever; echo a line and exits; the last names no program at all.
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"/bin/cat", "did not answer as a kiln-clang-server"},
      {"/usr/bin/yes", "did not answer as a kiln-clang-server"},
      {"/bin/echo", "did not answer as a kiln-clang-server"},
      {"/nonexistent/kiln-clang-server", "does not exist or is not executable"}};
  for (const auto& [program, why] : cases) {
    ::setenv("KILN_CLANG_SERVER", program.c_str(), 1);
    ::testing::internal::CaptureStderr();
    ClangServers* s = ClangServers::find(spelled, tc.version());
    const std::string err = ::testing::internal::GetCapturedStderr();
    ::unsetenv("KILN_CLANG_SERVER");
    EXPECT_EQ(s, nullptr) << program;
    // The variable, the program and the reason, and what happens instead.
    EXPECT_NE(err.find("KILN_CLANG_SERVER: '" + program + "' " + why), std::string::npos) << err;
    EXPECT_NE(err.find("kernels compile in clang processes"), std::string::npos) << err;
    // Each refused lookup is remembered: ask through a new spelling next time.
    spelled = (fs::path(spelled).parent_path() / "." / exe.filename()).string();
  }
  // No child is left running.
  EXPECT_EQ(run_process({"pgrep", "-P", std::to_string(::getpid()), "-x", "cat"}).out, "");
  EXPECT_EQ(run_process({"pgrep", "-P", std::to_string(::getpid()), "-x", "yes"}).out, "");
}

TEST(ClangServer, DriverCommandsItCannotTakeAreLeftToTheProcess) {
  const Toolchain& tc = Toolchain::get();
  ClangServers* in = servers_or_skip(tc);
  if (!in) GTEST_SKIP() << "kiln was built without clang's development files";
  const fs::path dir = testing::temp_dir("clang_server_link");
  write_file_atomic(dir / "k.c", kSource);
  // Compile and link: two jobs, which only the driver process runs.
  EXPECT_FALSE(in->compile({tc.cc(), "-shared", "-fPIC", (dir / "k.c").string(), "-o",
                            (dir / "k.so").string()})
                   .has_value());
  EXPECT_FALSE(fs::exists(dir / "k.so"));
}

}  // namespace
}  // namespace kiln
