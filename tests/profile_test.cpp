// The per-step profiler: FLOP counts against hand-computed values, bytes moved, run and
// thread accounting, nothing recorded while it is off, and `kiln run --profile`.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <random>
#include <regex>
#include <sstream>

#include "compiler/compile.h"
#include "helpers.h"
#include "ops/builders.h"
#include "runtime/exec/profile_table.h"
#include "util/fs.h"

namespace kiln {
namespace {

using Ints = std::vector<int64_t>;

// The profiled step whose label names `op` (each appears once in these graphs).
const StepTime& step_of(const std::vector<StepTime>& steps, const std::string& op) {
  for (const StepTime& s : steps) {
    if (s.label.find("(" + op + ")") != std::string::npos) return s;
  }
  throw std::runtime_error("no step for " + op);
}

TEST(Profile, FlopCountsAndBytesMatchHandComputedValues) {
  std::mt19937 rng(1);
  Graph g("profile_flops");
  Var a = input(g, "a", DType::kFloat32, {2, 3, 5});
  Var b = input(g, "b", DType::kFloat32, {5, 7});
  Var at = input(g, "at", DType::kFloat32, {5, 3});
  Var x = input(g, "x", DType::kFloat32, {1, 4, 9, 9});
  Var w = input(g, "w", DType::kFloat32, {6, 2, 3, 3});
  g.set_outputs(
      {matmul(a, b).var(), gemm(at, b, 1.0, true, false).var(),
       kiln::apply("conv", {x, w}, {{"group", int64_t{2}}, {"strides", Ints{2, 2}}}).var(),
       exp(b).var()});
  CompileOptions o;
  o.passes = "none";  // one step per op
  Function f = compile(g, o);
  std::vector<Tensor> in;
  for (const Variable* v : g.inputs())
    in.push_back(testing::random_tensor(DType::kFloat32, v->type.dims, rng));
  EXPECT_TRUE(f.profile().empty()) << "off by default";
  f.set_profiling(true);
  f(in);
  f(in);
  const auto steps = f.profile();
  ASSERT_EQ(steps.size(), 4u);
  // matmul (2,3,5)x(5,7): 2 * 2*3*7 outputs * K=5; gemm A^T (3,5)... (3,7) * K=5;
  // conv: out (1,6,4,4), each 2 * (4/2 channels) * 3*3 taps.
  EXPECT_EQ(step_of(steps, "matmul").flops, 2.0 * 42 * 5);
  EXPECT_EQ(step_of(steps, "gemm").flops, 2.0 * 21 * 5);
  EXPECT_EQ(step_of(steps, "conv").flops, 2.0 * 96 * 2 * 9);
  EXPECT_EQ(step_of(steps, "exp").flops, 0) << "elementwise ops do not count";
  EXPECT_EQ(step_of(steps, "matmul").bytes, 4.0 * (30 + 35 + 42));
  EXPECT_EQ(step_of(steps, "conv").bytes, 4.0 * (324 + 108 + 96));
  for (const StepTime& s : steps) {
    EXPECT_EQ(s.calls, 2) << s.label;
    EXPECT_GT(s.total_ns, 0) << s.label;
  }
  // The trace: one event per step call (nothing here is large enough to split), each step
  // twice, inside the runs.
  const auto events = f.trace();
  ASSERT_EQ(events.size(), 8u);
  std::vector<int> seen(4, 0);
  for (const TraceEvent& e : events) {
    ASSERT_GE(e.step, 0);
    ASSERT_LT(e.step, 4);
    ++seen[static_cast<size_t>(e.step)];
    EXPECT_EQ(e.parts, 1);
    EXPECT_LE(0, e.start_ns);
    EXPECT_LE(e.start_ns, e.end_ns);
  }
  EXPECT_EQ(seen, std::vector<int>(4, 2));
  const RunProfile r = f.run_profile();
  EXPECT_EQ(r.runs, 2);
  int64_t in_steps = 0;
  for (const StepTime& s : steps) in_steps += s.total_ns;
  EXPECT_LE(in_steps, r.wall_ns) << "steps of a chain run inside the run's wall time";
  ASSERT_FALSE(r.thread_busy_ns.empty());
  for (int64_t busy : r.thread_busy_ns) EXPECT_LE(busy, r.wall_ns);
  f.set_profiling(false);
  EXPECT_TRUE(f.profile().empty());
  EXPECT_EQ(f.run_profile().runs, 0);
}

// An epilogue-fused GEMM counts its base product; a second switch-on starts from zero.
TEST(Profile, FusedStepsCountTheirBaseOpAndSwitchingOnClears) {
  std::mt19937 rng(2);
  Graph g("profile_fused");
  Var x = input(g, "x", DType::kFloat32, {8, 16});
  Var w = input(g, "w", DType::kFloat32, {16, 32});
  Var bias = input(g, "bias", DType::kFloat32, {32});
  g.set_outputs({relu(matmul(x, w) + bias).var()});
  Function f = compile(g);
  std::vector<Tensor> in;
  for (const Variable* v : g.inputs())
    in.push_back(testing::random_tensor(DType::kFloat32, v->type.dims, rng));
  f.set_profiling(true);
  f(in);
  auto steps = f.profile();
  ASSERT_EQ(steps.size(), 1u) << "matmul, add and relu fuse into one step";
  EXPECT_EQ(steps[0].flops, 2.0 * 8 * 32 * 16);
  f.set_profiling(true);
  EXPECT_EQ(f.profile()[0].calls, 0);
  EXPECT_EQ(f.run_profile().runs, 0);
  const std::string table = format_profile(f.profile(), f.run_profile());
  EXPECT_NE(table.find("profile: 0 runs"), std::string::npos) << table;
}

// The engine's own cost: every thunk call of the profiled runs counted, the time with no
// thunk running within the runs' wall time, and the table's engine line.
TEST(Profile, EngineCostCountsCallsAndIdleTime) {
  std::mt19937 rng(4);
  Graph g("profile_engine");
  Var x = input(g, "x", DType::kFloat32, {64, 64});
  Var w = input(g, "w", DType::kFloat32, {64, 64});
  g.set_outputs({softmax(matmul(relu(matmul(x, w)), w), -1).var()});
  Function f = compile(g);
  const std::vector<Tensor> in{testing::random_tensor(DType::kFloat32, {64, 64}, rng),
                               testing::random_tensor(DType::kFloat32, {64, 64}, rng)};
  f(in);
  f.set_profiling(true);
  for (int r = 0; r < 5; ++r) f(in);
  int64_t calls = 0;
  for (const StepTime& s : f.profile()) calls += s.calls;
  const RunProfile runs = f.run_profile();
  ASSERT_EQ(runs.runs, 5);
  EXPECT_EQ(runs.steps, calls);
  EXPECT_EQ(runs.steps % 5, 0);
  EXPECT_GE(runs.steps, 10) << "at least two steps per run";
  ASSERT_GE(runs.idle_ns, 0);
  EXPECT_LT(runs.idle_ns, runs.wall_ns) << "thunks ran for some of the wall time";
  // Idle is what no thread covered: at most what the busiest thread left.
  ASSERT_FALSE(runs.thread_busy_ns.empty());
  EXPECT_LE(runs.idle_ns, runs.wall_ns - runs.thread_busy_ns[0]);
  const std::string table = format_profile(f.profile(), runs);
  EXPECT_NE(table.find("engine: " + std::to_string(runs.steps / 5) + ".0 thunk calls per run"),
            std::string::npos)
      << table;
  EXPECT_NE(table.find("with no thunk running"), std::string::npos) << table;
  // Moves of a worker off its caller's core show only when there were some.
  RunProfile moved = runs;
  moved.core_moves = 0;
  EXPECT_EQ(format_profile(f.profile(), moved).find("caller's core"), std::string::npos);
  moved.core_moves = 3;
  EXPECT_NE(format_profile(f.profile(), moved).find(", 3 moves of a worker off its caller's core"),
            std::string::npos)
      << format_profile(f.profile(), moved);
}

// A step split across workers leaves one event per part, each part once per run, and the
// JSON trace holds every event under its step's label.
TEST(Profile, SplitPartsAreTracedPerThread) {
  std::mt19937 rng(3);
  Graph g("profile_split");
  Var x = input(g, "x", DType::kFloat32, {1024, 1024});
  g.set_outputs({exp(x).var()});
  Function f = compile(g);
  const Tensor xs = testing::random_tensor(DType::kFloat32, {1024, 1024}, rng);
  f({xs});
  f.set_profiling(true);
  for (int r = 0; r < 3; ++r) f({xs});
  const auto events = f.trace();
  ASSERT_FALSE(events.empty());
  const int parts = events[0].parts;
  ASSERT_GT(parts, 1) << "a 1M-element exp splits";
  ASSERT_EQ(events.size(), static_cast<size_t>(3 * parts));
  std::vector<int> count(static_cast<size_t>(parts), 0);
  for (const TraceEvent& e : events) {
    EXPECT_EQ(e.parts, parts);
    ++count.at(static_cast<size_t>(e.part));
  }
  EXPECT_EQ(count, std::vector<int>(static_cast<size_t>(parts), 3));
  const auto doc = nlohmann::json::parse(f.trace_json());
  ASSERT_EQ(doc.at("traceEvents").size(), events.size());
  for (const auto& e : doc.at("traceEvents")) {
    EXPECT_EQ(e.at("ph"), "X");
    EXPECT_EQ(e.at("name"), f.profile().at(0).label);
    EXPECT_GE(e.at("dur").get<double>(), 0.0);
  }
}

TEST(Profile, TheCliPrintsEveryStepSlowestFirst) {
  const std::string dir = std::string(KILN_EXAMPLES_DIR) + "/mlp";
  auto r = testing::kiln_env(
      {}, {"run", dir + "/mlp.json", "--input", "x=" + dir + "/input.npy", "--output-dir",
           testing::temp_dir("profile-out"), "--profile", "--repeat", "7"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("profile: 7 runs"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("threads busy in thunks"), std::string::npos) << r.out;
  // Rows: ms/run, share, parts, MB moved, GFLOP/s (or -), then the step's label.
  static const std::regex row(
      R"(^\s*([0-9.]+)\s+([0-9.]+)%\s+[0-9.]+\s+[0-9.]+\s+(\S+)\s+(node .*)$)");
  std::vector<double> ms;
  double share = 0;
  std::string labels;
  std::istringstream lines(r.out);
  for (std::string line; std::getline(lines, line);) {
    std::smatch m;
    if (!std::regex_match(line, m, row)) continue;
    ms.push_back(std::stod(m[1]));
    share += std::stod(m[2]);
    labels += m[4].str() + "\n";
    if (m[4].str().find("'fc1'") != std::string::npos) {
      EXPECT_NE(m[3], "-") << "fc1 counts FLOPs";
    }
    if (m[4].str().find("'probs'") != std::string::npos) {
      EXPECT_EQ(m[3], "-") << line;
    }
  }
  ASSERT_EQ(ms.size(), 4u) << r.out;
  EXPECT_TRUE(std::is_sorted(ms.rbegin(), ms.rend())) << r.out;
  EXPECT_NEAR(share, 100.0, 0.5) << r.out;
  for (const char* name : {"'fc1'", "'fc2'", "'fc3'", "'probs'"}) {
    EXPECT_NE(labels.find(name), std::string::npos) << name << "\n" << r.out;
  }
  const std::string trace = testing::temp_dir("profile-trace") + "/t.json";
  auto traced = testing::kiln_env(
      {}, {"run", dir + "/mlp.json", "--input", "x=" + dir + "/input.npy", "--output-dir",
           testing::temp_dir("profile-out3"), "--profile", "--repeat", "2", "--trace", trace});
  ASSERT_EQ(traced.exit_code, 0) << traced.err;
  const auto doc = nlohmann::json::parse(read_file(trace));
  EXPECT_GE(doc.at("traceEvents").size(), 8u) << "4 steps, 2 runs";
  auto untimed =
      testing::kiln_env({}, {"run", dir + "/mlp.json", "--input", "x=" + dir + "/input.npy",
                             "--output-dir", testing::temp_dir("profile-out4"), "--trace", trace});
  EXPECT_EQ(untimed.exit_code, 2);
  EXPECT_NE(untimed.err.find("--trace FILE needs --profile"), std::string::npos) << untimed.err;
  auto bad = testing::kiln_env(
      {}, {"run", dir + "/mlp.json", "--input", "x=" + dir + "/input.npy", "--output-dir",
           testing::temp_dir("profile-out2"), "--profile", "--repeat", "0"});
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_NE(bad.err.find("--repeat expects a number of runs"), std::string::npos) << bad.err;
}

}  // namespace
}  // namespace kiln
