// The `kiln` command end to end: exit codes, help, compile, run and source.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <pty.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <map>
#include <regex>
#include <set>
#include <thread>

#include "compiler/subprocess.h"
#include "runtime/io/npy.h"
#include "runtime/io/safetensors.h"
#include "tests/helpers.h"
#include "util/fs.h"
#include "util/strings.h"

namespace kiln {
namespace {

const std::string kKiln = KILN_BINARY;
const std::string kExamples = KILN_EXAMPLES_DIR;

ProcessResult kiln(std::vector<std::string> args) {
  args.insert(args.begin(), kKiln);
  return run_process(args);
}

TEST(Cli, HelpForEveryCommand) {
  auto r = kiln({"--help"});
  EXPECT_EQ(r.exit_code, 0);
  for (const char* word : {"compile", "run", "source", "cache", "exit codes", "KILN_CACHE_DIR",
                           "KILN_CACHE_MAX_SIZE", "-v"}) {
    EXPECT_NE(r.out.find(word), std::string::npos) << word;
  }
  for (const char* cmd : {"compile", "run", "source", "cache", "export", "report"}) {
    auto h = kiln({cmd, "--help"});
    EXPECT_EQ(h.exit_code, 0) << cmd;
    EXPECT_NE(h.out.find(std::string("usage: kiln ") + cmd), std::string::npos) << h.out;
    EXPECT_EQ(kiln({"help", cmd}).out, h.out);
  }
}

TEST(Cli, WrongUsageExitsTwoWithOneLine) {
  for (const auto& args : std::vector<std::vector<std::string>>{
           {},
           {"frobnicate"},
           {"compile"},
           {"run", "m.json"},
           {"compile", "--bogus", "m.json"},
           {"run", "m.json", "--output-dir", "o", "--input", "novalue"},
           {"run", "m.json", "--input"}}) {
    auto r = kiln(args);
    EXPECT_EQ(r.exit_code, 2) << args.size();
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  }
}

// Each command's flags, as its help lists them. A flag of another command is a usage error
// that names the flag and the command, never silently ignored.
TEST(Cli, EveryCommandRefusesFlagsItDoesNotTake) {
  const std::map<std::string, std::vector<std::string>> own{
      {"compile", {"--explain", "--passes", "--device", "--device-io"}},
      {"run",
       {"--input", "--output-dir", "--output-format", "--profile", "--repeat", "--trace",
        "--passes", "--device", "--device-io"}},
      {"source", {"--graph", "--passes", "--device", "--device-io"}},
      {"export", {"--output-dir", "--name", "--weights", "--passes"}},
      {"report", {"--output", "--input", "--repeat", "--passes", "--device", "--device-io"}},
      {"grad", {"--input", "--output-dir", "--wrt", "--passes", "--device", "--device-io"}},
      {"cache", {"--max-size", "--max-age", "--out"}},
      {"ops", {}},
      {"help", {}},
  };
  std::set<std::string> every;
  for (const auto& [cmd, flags] : own) every.insert(flags.begin(), flags.end());
  const std::string model = kExamples + "/mlp/mlp.json";
  for (const auto& [cmd, flags] : own) {
    const std::string help = kiln({cmd, "--help"}).out;
    for (const auto& flag : flags) EXPECT_NE(help.find(flag + " "), std::string::npos) << cmd << flag;
    for (const auto& flag : every) {
      if (std::find(flags.begin(), flags.end(), flag) != flags.end()) continue;
      auto r = kiln({cmd, flag, "x", model});
      EXPECT_EQ(r.exit_code, 2) << cmd << " " << flag << ": " << r.err;
      EXPECT_NE(r.err.find("kiln " + cmd + " does not take " + flag), std::string::npos) << r.err;
      EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
      // --flag=value is the same flag.
      EXPECT_EQ(kiln({cmd, flag + "=x", model}).exit_code, 2) << cmd << " " << flag;
    }
  }
  // The example that used to exit 0 with five flags ignored.
  auto r = kiln({"compile", "--wrt", "foo", "--profile", "--trace", "X", "--graph", "--name", "bar",
                 model});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("kiln compile does not take --wrt (kiln grad does"), std::string::npos)
      << r.err;
  // A flag no command takes, a command's flag before the command, a value given to a switch,
  // a value flag given twice, and each cache flag outside its subcommand.
  for (const auto& [args, says] : std::vector<std::pair<std::vector<std::string>, std::string>>{
           {{"compile", "--bogus", model}, "kiln compile: unknown option '--bogus'"},
           {{"--device", "cpu", "compile", model}, "option '--device' goes after the command"},
           {{"compile", "--explain=yes", model}, "--explain takes no value"},
           {{"compile", "--passes", "none", "--passes=-cse", model}, "--passes given twice"},
           {{"run", model, "-o", "d", "--repeat", "3"}, "--repeat N needs --profile"},
           {{"cache", "ls", "--max-age", "1d"}, "--max-age belongs to 'kiln cache gc'"},
           {{"cache", "gc", "--out", "d"}, "--out belongs to 'kiln cache keygen'"},
           {{"help", "compile", "extra"}, "kiln help: unexpected argument 'extra'"},
           // A bad value is wrong usage before the model is even read.
           {{"compile", "--device", "tpu", "absent.json"}, "--device expects cpu|cuda"}}) {
    auto bad = kiln(args);
    EXPECT_EQ(bad.exit_code, 2) << says;
    EXPECT_NE(bad.err.find(says), std::string::npos) << bad.err;
  }
  // A bad --passes spec is named before the model is read.
  auto early = kiln({"source", "--passes", "-nope", "absent.json"});
  EXPECT_EQ(early.exit_code, 1);
  EXPECT_NE(early.err.find("unknown pass 'nope'"), std::string::npos) << early.err;
  // Global flags go before or after the command.
  EXPECT_EQ(kiln({"-v", "ops"}).exit_code, 0);
  EXPECT_EQ(kiln({"ops", "-v"}).exit_code, 0);
}

// `kiln --help` names every command and every model format kiln reads.
TEST(Cli, MainHelpIsTrue) {
  const std::string help = kiln({"--help"}).out;
  for (const char* cmd : {"compile", "run", "source", "export", "report", "cache", "grad", "ops"})
    EXPECT_NE(help.find(std::string("\n  ") + cmd + " "), std::string::npos) << cmd;
  for (const char* format : {".onnx", ".json", ".safetensors", ".npy"})
    EXPECT_NE(help.find(format), std::string::npos) << format;
  EXPECT_EQ(kiln({"help"}).out, help);
}

// kiln source as a person reads it: each prelude is one line naming it and its length
// (--preludes prints the exact text the compiler gets, those lines in place of the stubs),
// and the model's first kernel starts within the first 40 lines, under the banners of the
// nodes that run it.
TEST(Cli, SourceShowsPreludesAsStubsAndKernelsUnderTheirNodes) {
  const std::string model = kExamples + "/mlp/mlp.json";
  auto shown = kiln({"source", model});
  auto full = kiln({"source", "--preludes", model});
  ASSERT_EQ(shown.exit_code, 0) << shown.err;
  ASSERT_EQ(full.exit_code, 0) << full.err;
  const std::vector<std::string> short_lines = split_lines(shown.out);
  const std::vector<std::string> long_lines = split_lines(full.out);
  size_t stubbed = 0, stubs = 0;
  const std::regex stub(R"re(^/\* #include "([a-z_.]+)": ([0-9]+) lines; kiln source --preludes prints them \*/$)re");
  for (const auto& l : short_lines) {
    std::smatch m;
    if (!std::regex_match(l, m, stub)) continue;
    ++stubs;
    stubbed += std::stoul(m[2]);
    EXPECT_NE(full.out.find(m[1].str()), std::string::npos) << m[1];
  }
  EXPECT_GE(stubs, 4u) << shown.out.substr(0, 2000);  // the ABI header and three preludes
  EXPECT_EQ(long_lines.size(), short_lines.size() - stubs + stubbed);
  size_t first_kernel = 0;
  while (first_kernel < short_lines.size() &&
         short_lines[first_kernel].find("int kiln_k_") == std::string::npos) {
    ++first_kernel;
  }
  EXPECT_LT(first_kernel, 40u) << shown.out.substr(0, 3000);
  // Its banner names each node (op and props, operands, result type, the user's name).
  const std::string head = shown.out.substr(0, shown.out.find("int kiln_k_"));
  for (const char* want : {"run by 2 nodes:", " *   node 0: with_epilogue{", "(x, w1.packed, b1) -> h1",
                           "[float32 (?, 256)]  'fc1'", " *   node 1: "}) {
    EXPECT_NE(head.find(want), std::string::npos) << want << " in\n" << head;
  }
  EXPECT_EQ(shown.out.find("(void)kp;"), std::string::npos);
  EXPECT_NE(shown.out.find("KILN_UNUSED(state_, ctx, in, out, kp);"), std::string::npos);
}

// Golden text (as TVM tests its generated code): `kiln source` of small graphs, keys masked,
// pinned line for line. KILN_UPDATE_GOLDEN=1 rewrites the files after a deliberate change.
TEST(Golden, SourceOfSmallGraphsKeepsItsLayout) {
  const std::filesystem::path dir = KILN_GOLDEN_DIR;
  const bool update = std::getenv("KILN_UPDATE_GOLDEN") != nullptr;
  int checked = 0;
  for (const char* name : {"bias_relu", "row_softmax", "conv_pool"}) {
    auto r = kiln({"source", (dir / (std::string(name) + ".json")).string()});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    const std::string got = std::regex_replace(r.out, std::regex("[0-9a-f]{64}"), "<key>");
    const std::filesystem::path golden = dir / (std::string(name) + ".c");
    if (update) write_file_atomic(golden, got);
    const std::string want = read_file(golden);
    if (got == want) {
      ++checked;
      continue;
    }
    const auto a = split_lines(got), b = split_lines(want);
    size_t i = 0;
    while (i < a.size() && i < b.size() && a[i] == b[i]) ++i;
    ADD_FAILURE() << golden << " differs from kiln source at line " << i + 1 << ":\n  got:  "
                  << (i < a.size() ? a[i] : "<end>") << "\n  want: " << (i < b.size() ? b[i] : "<end>")
                  << "\n(KILN_UPDATE_GOLDEN=1 rewrites it after a deliberate change)";
  }
  EXPECT_EQ(checked, 3);
}

// kiln report: -o is required; inputs are all or none (a partial set names what is
// missing); a page is written either way.
TEST(Cli, ReportWritesOnePageAndChecksItsInputs) {
  const std::string model = kExamples + "/onnx/resblock/model.onnx";
  const std::string out = testing::temp_dir("cli-report") + "/r.html";
  auto none = kiln({"report", model});
  EXPECT_EQ(none.exit_code, 2);
  EXPECT_NE(none.err.find("-o FILE.html is required"), std::string::npos) << none.err;
  auto bad = kiln({"report", model, "-o", out, "--input", "nope=x.npy"});
  EXPECT_EQ(bad.exit_code, 1);
  EXPECT_NE(bad.err.find("unknown input 'nope'"), std::string::npos) << bad.err;
  auto plain = kiln({"report", model, "-o", out});
  ASSERT_EQ(plain.exit_code, 0) << plain.err;
  EXPECT_NE(plain.out.find("no profile"), std::string::npos) << plain.out;
  const std::string page = read_file(out);
  EXPECT_EQ(page.rfind("<!DOCTYPE html>", 0), 0u);
  EXPECT_NE(page.find("\"profile\":null"), std::string::npos);
  auto full = kiln({"report", model, "-o", out, "--input",
                    "x=" + kExamples + "/onnx/resblock/x.npy", "--repeat", "2"});
  ASSERT_EQ(full.exit_code, 0) << full.err;
  EXPECT_NE(read_file(out).find("\"runs\":2"), std::string::npos);
}

// Runs kiln with its stdin, stdout and stderr on a pseudo-terminal (as a person at a terminal
// runs it); returns what the terminal showed, and the exit status in `status`. `shown(text)`
// is called with everything shown so far as it arrives.
std::string on_terminal(const std::vector<std::string>& args, const std::vector<std::string>& env,
                        int& status, const std::function<void(const std::string&)>& shown = {}) {
  int master = -1;
  const pid_t pid = ::forkpty(&master, nullptr, nullptr, nullptr);
  if (pid == 0) {
    for (const auto& e : env) ::putenv(const_cast<char*>(e.c_str()));
    std::vector<char*> argv{const_cast<char*>(kKiln.c_str())};
    for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    ::execv(kKiln.c_str(), argv.data());
    ::_exit(127);
  }
  std::string text;
  char buf[4096];
  for (;;) {
    const ssize_t n = ::read(master, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;  // EIO once the child has closed its side
    text.append(buf, static_cast<size_t>(n));
    if (shown) shown(text);
  }
  ::close(master);
  ::waitpid(pid, &status, 0);
  return text;
}

// On a terminal, a compile whose kernels take over a second shows "compiling kernels i/N,
// elapsed" and erases the line when done; a pipe, or KILN_PROGRESS=0, sees none of it. The
// compiler is held (tests/cc_wrapper.sh) until the display has shown, so no timing decides.
TEST(Cli, KernelCompilesShowProgressOnATerminalOnly) {
  const std::string model = kExamples + "/onnx/resblock/model.onnx";
  const std::string dir = testing::temp_dir("cli-progress");
  const std::string hold = dir + "/hold";
  ASSERT_EQ(::mkfifo(hold.c_str(), 0600), 0);
  const auto env = [&](const std::string& tag, bool held) {
    std::vector<std::string> e{"KILN_CACHE_DIR=" + dir + "/cache-" + tag, "KILN_JOBS=1",
                               std::string("KILN_CC=") + KILN_TEST_CC_WRAPPER};
    if (held) e.push_back("KILN_TEST_CC_HOLD=" + hold);
    return e;
  };
  // Lets every held compile go, once released, until the compile is over.
  std::atomic<bool> released{false}, over{false};
  std::thread releaser([&] {
    while (!over) {
      if (!released) {
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
        continue;
      }
      const int fd = ::open(hold.c_str(), O_WRONLY | O_NONBLOCK);  // ENXIO: nobody reading
      if (fd >= 0) {
        (void)!::write(fd, "go\n", 3);
        ::close(fd);
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
  });
  int status = -1;
  const std::string shown =
      on_terminal({"compile", model}, env("tty", true), status, [&](const std::string& text) {
        if (text.find("kiln: compiling kernels ") != std::string::npos) released = true;
      });
  over = true;
  releaser.join();
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << shown;
  const size_t at = shown.find("kiln: compiling kernels ");
  ASSERT_NE(at, std::string::npos) << shown;
  ASSERT_GE(at, 4u);
  EXPECT_EQ(shown.compare(at - 4, 4, "\r\033[K"), 0) << "drawn over a cleared line: " << shown;
  const std::string line = shown.substr(at, shown.find('\r', at) - at);
  int done = -1, total = -1;
  double seconds = -1;
  ASSERT_EQ(std::sscanf(line.c_str(), "kiln: compiling kernels %d/%d, %lf s", &done, &total,
                        &seconds),
            3)
      << line;
  EXPECT_EQ(done, 0);  // the first compile was held
  EXPECT_GE(total, 2);
  EXPECT_GE(seconds, 1.0);  // never before a second has passed
  // Erased before the result is printed.
  const size_t last = shown.rfind("kiln: compiling kernels ");
  const size_t erased = shown.find("\r\033[K", last);
  ASSERT_NE(erased, std::string::npos) << shown;
  EXPECT_NE(shown.find("key ", erased), std::string::npos) << shown;

  // Not drawn when turned off, nor when stderr is a pipe (these compiles are not held).
  auto off = env("off", false);
  off.push_back("KILN_PROGRESS=0");
  const std::string quiet = on_terminal({"compile", model}, off, status);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << quiet;
  EXPECT_EQ(quiet.find("compiling kernels"), std::string::npos) << quiet;
  std::vector<std::string> piped{"/usr/bin/env"};
  for (const auto& e : env("pipe", false)) piped.push_back(e);
  for (const auto& a : {kKiln, std::string("compile"), model}) piped.push_back(a);
  auto r = run_process(piped);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.err.find("compiling kernels"), std::string::npos) << r.err;
  EXPECT_EQ(r.err.find('\r'), std::string::npos) << r.err;
}

TEST(Cli, CompileRunAndSourceTheMlp) {
  std::string model = kExamples + "/mlp/mlp.json";
  auto c = kiln({"compile", "-v", model});
  ASSERT_EQ(c.exit_code, 0) << c.err;
  EXPECT_NE(c.out.find("key "), std::string::npos);
  for (const char* phase : {"load", "key", "codegen", "compile", "module load"}) {
    EXPECT_NE(c.err.find(phase), std::string::npos) << phase << " missing in " << c.err;
  }
  std::string out_dir = testing::temp_dir("cli_run");
  auto r = kiln({"run", "-v", model, "--input", "x=" + kExamples + "/mlp/input.npy", "--output-dir",
                 out_dir});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("run "), std::string::npos);
  Tensor y = read_npy(out_dir + "/y.npy");
  Tensor expected = read_npy(kExamples + "/mlp/expected.npy");
  EXPECT_TRUE(testing::tensors_close(y, expected, 1e-5, 1e-6));
  auto s = kiln({"source", model});
  ASSERT_EQ(s.exit_code, 0);
  // The rewrites pack each wide layer's weight for kiln's GEMM kernel, which adds its bias
  // (the gemm's C) and clamps for its relu as it stores; the 10-wide output layer stays a
  // matmul, on the same kernel, each part packing its own panels of B.
  EXPECT_NE(s.out.find("/* node 0: with_epilogue{base=\"gemm\", base.beta=1.0, base.packed_n=256, "
                       "base.transB=0, base_inputs=3, program=\"relu($0)\"}(x, w1.packed, b1) -> "
                       "h1  [float32 (?, 256)]  'fc1' */"),
            std::string::npos)
      << s.out;
  EXPECT_NE(s.out.find("/* epilogue, in the stores: relu($0) */"), std::string::npos) << s.out;
  EXPECT_NE(s.out.find("/* node 2: with_epilogue{base=\"matmul\""), std::string::npos) << s.out;
  EXPECT_NE(s.out.find("kiln_tile_part(M, N, 6, P"), std::string::npos)
      << "the matmul does not split in tiles of panels";
}

TEST(Cli, BadPassesSpecNamesTheFlagAndThePasses) {
  auto r = kiln({"source", "--passes", "-fuson", kExamples + "/mlp/mlp.json"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("--passes: unknown pass 'fuson'"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("fusion"), std::string::npos) << r.err;
  auto g = kiln({"source", "--graph", "--passes", "none", kExamples + "/mlp/mlp.json"});
  ASSERT_EQ(g.exit_code, 0) << g.err;
  EXPECT_NE(g.out.find(": matmul(x, w1) -> z1"), std::string::npos) << g.out;
}

TEST(Cli, BadInputsAndModelsExitOneWithTheReason) {
  std::string model = kExamples + "/mlp/mlp.json";
  std::string dir = testing::temp_dir("cli_bad");
  write_npy(dir + "/wrong.npy", Tensor::zeros(DType::kFloat32, {2, 100}));
  auto r = kiln({"run", model, "--input", "x=" + dir + "/wrong.npy", "--output-dir", dir});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("input 'x': dimension 1 is 100: expected float32 (?, 784)"),
            std::string::npos)
      << r.err;
  r = kiln({"run", model, "--output-dir", dir});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("missing input 'x': expected float32 (?, 784)"), std::string::npos) << r.err;
  r = kiln({"run", model, "--input", "q=" + dir + "/wrong.npy", "--output-dir", dir});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("unknown input 'q'"), std::string::npos) << r.err;
  write_file_atomic(dir + "/broken.json", "{\"inputs\": [");
  r = kiln({"compile", dir + "/broken.json"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("invalid JSON"), std::string::npos) << r.err;
  r = kiln({"compile", dir + "/absent.json"});
  EXPECT_EQ(r.exit_code, 1);
}

// The MLP with its weights in one .safetensors file (a JSON model's parameters by name and
// by "tensor"), its input from one and its output written to one: the same numbers as .npy.
TEST(Cli, SafetensorsWeightsInputsAndOutputs) {
  std::string dir = testing::temp_dir("cli_safetensors");
  std::vector<std::pair<std::string, Tensor>> weights;
  for (const char* n : {"w1", "b1", "w2", "b2", "w3"}) {
    weights.emplace_back(n, read_npy(kExamples + "/mlp/" + n + ".npy"));
  }
  weights.emplace_back("last_bias", read_npy(kExamples + "/mlp/b3.npy"));
  write_safetensors(dir + "/weights.safetensors", weights);
  std::string json = read_file(kExamples + "/mlp/mlp.json");
  for (const char* n : {"w1", "b1", "w2", "b2", "w3"}) {
    std::string from = std::string("\"") + n + ".npy\"";
    ASSERT_NE(json.find(from), std::string::npos) << n;
    json.replace(json.find(from), from.size(), "\"weights.safetensors\"");
  }
  json.replace(json.find("\"b3.npy\""), 8, "\"weights.safetensors\", \"tensor\": \"last_bias\"");
  write_file_atomic(dir + "/mlp.json", json);
  write_safetensors(dir + "/in.safetensors", {{"x", read_npy(kExamples + "/mlp/input.npy")}});
  Tensor expected = read_npy(kExamples + "/mlp/expected.npy");
  for (const std::string& input : {"x=" + dir + "/in.safetensors", dir + "/in.safetensors"}) {
    auto r = kiln({"run", dir + "/mlp.json", "--input", input, "--output-dir", dir + "/out",
                   "--output-format", "safetensors"});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    Safetensors out = read_safetensors(dir + "/out/outputs.safetensors");
    EXPECT_TRUE(testing::tensors_close(out.at("y", "out"), expected, 1e-5, 1e-6));
  }
  // A file that does not hold the tensor a parameter names, and a truncated one.
  json.replace(json.find("\"last_bias\""), 11, "\"b9\"");
  write_file_atomic(dir + "/bad.json", json);
  auto r = kiln({"compile", dir + "/bad.json"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("parameters[5].file"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("no tensor named 'b9'"), std::string::npos) << r.err;
  std::string bytes = read_file(dir + "/weights.safetensors");
  write_file_atomic(dir + "/weights.safetensors", bytes.substr(0, bytes.size() - 100));
  r = kiln({"compile", dir + "/mlp.json"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("weights.safetensors: byte"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("truncated?"), std::string::npos) << r.err;
  r = kiln({"run", kExamples + "/mlp/mlp.json", "--input", dir + "/in.safetensors", "--output-dir",
            dir, "--output-format", "csv"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("--output-format expects npy or safetensors"), std::string::npos) << r.err;
  // The same input from a file by name and from a whole .safetensors file.
  r = kiln({"run", kExamples + "/mlp/mlp.json", "--input", dir + "/in.safetensors", "--input",
            "x=" + dir + "/in.safetensors", "--output-dir", dir});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("input 'x' given twice"), std::string::npos) << r.err;
  // "tensor" names a tensor of a .safetensors file only.
  std::string npy_json = read_file(kExamples + "/mlp/mlp.json");
  // A model's files are inside its folder: the .npy files go beside the copy.
  for (const auto& e : std::filesystem::directory_iterator(kExamples + "/mlp")) {
    if (e.path().extension() == ".npy")
      std::filesystem::copy_file(e.path(), dir + "/" + e.path().filename().string(),
                                 std::filesystem::copy_options::overwrite_existing);
  }
  npy_json.replace(npy_json.find("b3.npy\""), 7, "b3.npy\", \"tensor\": \"b3\"");
  write_file_atomic(dir + "/npy_tensor.json", npy_json);
  r = kiln({"compile", dir + "/npy_tensor.json"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("parameters[5].tensor: only a .safetensors file holds named tensors"),
            std::string::npos)
      << r.err;
  r = kiln({"export", kExamples + "/mlp/mlp.json"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("kiln export: -o DIR is required"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace kiln
