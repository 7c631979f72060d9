// The generic tier (compiler/generic/) against every op's `perform` on values that break
// kernels (NaN, infinities, -0.0, sizes past the vector width, broadcasts, groups), and
// TieredFunction's switch from it to the compiled module: first call generic on a miss,
// compiled after, compiled from the start on a hit, a failed background compile reported.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <thread>

#include "compiler/compile.h"
#include "compiler/generic/generic_runner.h"
#include "compiler/subprocess.h"
#include "compiler/tiered_function.h"
#include "ops/builders.h"
#include "ops/cop.h"
#include "ops/reference.h"
#include "runtime/io/npy.h"
#include "tests/helpers.h"
#include "util/error.h"
#include "util/fs.h"

namespace kiln {
namespace {

using Ints = std::vector<int64_t>;
using testing::error_of;
using testing::random_tensor;
using testing::tensors_close;

// Uniform values with NaN, infinities and -0.0 planted at fixed places.
Tensor with_specials(const Shape& shape, std::mt19937& rng) {
  Tensor t = random_tensor(DType::kFloat32, shape, rng, -3, 3);
  const double specials[] = {std::nan(""), std::numeric_limits<double>::infinity(),
                             -std::numeric_limits<double>::infinity(), -0.0};
  for (int64_t i = 0; i < t.numel(); i += 7) t.store(i, specials[(i / 7) % 4]);
  return t;
}

void expect_matches_reference(const Graph& g, const std::vector<Tensor>& inputs, double rtol = 1e-5,
                              double atol = 1e-5) {
  GenericRunner runner(std::shared_ptr<const Graph>(std::shared_ptr<const Graph>(), &g));
  const std::vector<Tensor> got = runner.run(inputs);
  const std::vector<Tensor> want = evaluate_reference(g, inputs);
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i)
    EXPECT_TRUE(tensors_close(got[i], want[i], rtol, atol)) << "output " << i;
}

TEST(GenericTier, ConvolutionsMatchPerform) {
  std::mt19937 rng(3);
  Graph g("generic_conv");
  Var x = input(g, "x", DType::kFloat32, {kDynamic, 6, 13, 11});
  Var w = input(g, "w", DType::kFloat32, {4, 3, 3, 2});
  Var b = input(g, "b", DType::kFloat32, {4});
  Var dw = input(g, "dw", DType::kFloat32, {6, 1, 3, 3});
  Var pw = input(g, "pw", DType::kFloat32, {17, 6, 1, 1});
  Var l = input(g, "l", DType::kFloat32, {2, 3, 29});
  Var lw = input(g, "lw", DType::kFloat32, {5, 3, 4});
  g.set_outputs({
      // Groups, strides, dilations and uneven pads through the gathered columns.
      kiln::apply("conv", {x, w, b},
                  {{"group", int64_t{2}},
                   {"strides", Ints{2, 1}},
                   {"dilations", Ints{1, 2}},
                   {"pads", Ints{1, 0, 2, 1}}})
          .var(),
      kiln::apply("conv", {x, dw}, {{"group", int64_t{6}}, {"pads", Ints{1, 1, 1, 1}}}).var(),
      kiln::apply("conv", {x, dw}, {{"group", int64_t{6}}, {"strides", Ints{2, 2}}}).var(),
      kiln::apply("conv", {x, pw}).var(),  // 1x1: the input is the columns
      kiln::apply("conv", {l, lw}, {{"strides", Ints{3}}, {"auto_pad", std::string("SAME_UPPER")}})
          .var(),
  });
  const std::vector<Tensor> inputs{random_tensor(DType::kFloat32, {3, 6, 13, 11}, rng),
                                   random_tensor(DType::kFloat32, {4, 3, 3, 2}, rng),
                                   random_tensor(DType::kFloat32, {4}, rng),
                                   random_tensor(DType::kFloat32, {6, 1, 3, 3}, rng),
                                   random_tensor(DType::kFloat32, {17, 6, 1, 1}, rng),
                                   random_tensor(DType::kFloat32, {2, 3, 29}, rng),
                                   random_tensor(DType::kFloat32, {5, 3, 4}, rng)};
  expect_matches_reference(g, inputs);
  GenericRunner runner(std::shared_ptr<const Graph>(std::shared_ptr<const Graph>(), &g));
  runner.run(inputs);
  EXPECT_EQ(runner.kernel_nodes(), runner.nodes());  // every convolution took a kernel
}

TEST(GenericTier, ProductsMatchPerform) {
  std::mt19937 rng(5);
  Graph g("generic_products");
  Var a = input(g, "a", DType::kFloat32, {2, 1, 5, 7});
  Var b3 = input(g, "b3", DType::kFloat32, {3, 7, 19});
  Var b2 = input(g, "b2", DType::kFloat32, {7, 19});
  Var m = input(g, "m", DType::kFloat32, {7, 5});
  Var n = input(g, "n", DType::kFloat32, {19, 7});
  Var c = input(g, "c", DType::kFloat32, {19});
  g.set_outputs({
      matmul(a, b3).var(),  // batches broadcast both ways
      matmul(a, b2).var(),  // one B: a single product of every row
      gemm(m, n, c, 0.5, -2.0, true, true).var(),
      gemm(m, n, 1.5, true, true).var(),
  });
  const std::vector<Tensor> inputs{random_tensor(DType::kFloat32, {2, 1, 5, 7}, rng),
                                   random_tensor(DType::kFloat32, {3, 7, 19}, rng),
                                   random_tensor(DType::kFloat32, {7, 19}, rng),
                                   random_tensor(DType::kFloat32, {7, 5}, rng),
                                   random_tensor(DType::kFloat32, {19, 7}, rng),
                                   random_tensor(DType::kFloat32, {19}, rng)};
  expect_matches_reference(g, inputs);
  GenericRunner runner(std::shared_ptr<const Graph>(std::shared_ptr<const Graph>(), &g));
  runner.run(inputs);
  EXPECT_EQ(runner.kernel_nodes(), runner.nodes());
}

TEST(GenericTier, ElementwiseSoftmaxAndSumsMatchPerformOnSpecialValues) {
  std::mt19937 rng(7);
  Graph g("generic_elementwise");
  Var x = input(g, "x", DType::kFloat32, {2, 3, 5, 37});
  Var ch = input(g, "ch", DType::kFloat32, {3, 1, 1});
  Var row = input(g, "row", DType::kFloat32, {37});
  g.set_outputs({
      (x + ch).var(),
      (x - row).var(),
      (ch * x).var(),
      (x / row).var(),
      relu(x).var(),
      kiln::apply("sigmoid", {x}).var(),
      kiln::apply("erf", {x}).var(),
      kiln::apply("tanh", {x}).var(),
      kiln::apply("exp", {x}).var(),
      kiln::apply("sqrt", {x}).var(),
      leaky_relu(x, 0.2).var(),  // no kernel of its own: the table's reference
      softmax(x, 3).var(),
      softmax(x, 1).var(),  // along a strided axis
      log_softmax(x, -1).var(),
      kiln::apply("reduce_mean", {x}, {{"axes", Ints{2, 3}}, {"keepdims", int64_t{1}}}).var(),
      kiln::apply("reduce_sum", {x}, {{"axes", Ints{-1}}, {"keepdims", int64_t{0}}}).var(),
      kiln::apply("clip", {x, scalar(g, DType::kFloat32, -0.5), scalar(g, DType::kFloat32, 2)})
          .var(),
      kiln::apply("max_pool", {x},
                  {{"kernel_shape", Ints{3, 3}},
                   {"strides", Ints{2, 2}},
                   {"pads", Ints{1, 1, 1, 1}},
                   {"ceil_mode", int64_t{1}}})
          .var(),
      kiln::apply(
          "average_pool", {x},
          {{"kernel_shape", Ints{2, 3}}, {"strides", Ints{2, 2}}, {"pads", Ints{0, 1, 1, 1}}})
          .var(),
      kiln::apply("average_pool", {x},
                  {{"kernel_shape", Ints{3, 2}},
                   {"pads", Ints{1, 1, 1, 1}},
                   {"count_include_pad", int64_t{1}}})
          .var(),
  });
  Tensor xs = with_specials({2, 3, 5, 37}, rng);
  // A row of -inf only: the softmax of it is NaN in both.
  for (int64_t i = 0; i < 37; ++i) xs.store(37 + i, -std::numeric_limits<double>::infinity());
  const std::vector<Tensor> inputs{xs, random_tensor(DType::kFloat32, {3, 1, 1}, rng),
                                   with_specials({37}, rng)};
  // The transcendental kernels use float libm: within a few ulp of the double reference.
  expect_matches_reference(g, inputs, 1e-5, 1e-6);
  GenericRunner runner(std::shared_ptr<const Graph>(std::shared_ptr<const Graph>(), &g));
  runner.run(inputs);
  EXPECT_EQ(runner.kernel_nodes(), runner.nodes());
}

TEST(GenericTier, OtherDtypesAndOpsRunPerform) {
  std::mt19937 rng(11);
  Graph g("generic_f64");
  Var x = input(g, "x", DType::kFloat64, {2, 3, 9, 9});
  Var w = input(g, "w", DType::kFloat64, {4, 3, 3, 3});
  Var i = input(g, "i", DType::kInt64, {4, 5});
  g.set_outputs({kiln::apply("conv", {x, w}).var(), (i + i).var(),
                 kiln::apply("reduce_max", {x}, {{"axes", Ints{1}}}).var()});
  const std::vector<Tensor> inputs{random_tensor(DType::kFloat64, {2, 3, 9, 9}, rng),
                                   random_tensor(DType::kFloat64, {4, 3, 3, 3}, rng),
                                   random_tensor(DType::kInt64, {4, 5}, rng, -100, 100)};
  expect_matches_reference(g, inputs, 1e-12, 1e-12);
  GenericRunner runner(std::shared_ptr<const Graph>(std::shared_ptr<const Graph>(), &g));
  runner.run(inputs);
  EXPECT_EQ(runner.kernel_nodes(), 0);
}

TEST(GenericTier, BadInputsAreErrorsNamingThem) {
  Graph g("generic_inputs");
  Var x = input(g, "x", DType::kFloat32, {kDynamic, 4});
  g.set_outputs({relu(x).var()});
  GenericRunner runner(std::shared_ptr<const Graph>(std::shared_ptr<const Graph>(), &g));
  EXPECT_NE(error_of([&] {
              runner.run({Tensor::zeros(DType::kFloat32, {2, 5})});
            }).find("input 'x': dimension 1 is 5: expected float32 (?, 4)"),
            std::string::npos);
  EXPECT_NE(error_of([&] {
              runner.run({Tensor::zeros(DType::kFloat64, {2, 4})});
            }).find("input 'x': wrong dtype"),
            std::string::npos);
  EXPECT_NE(error_of([&] { runner.run({}); }).find("expected 1 inputs (x), got 0"),
            std::string::npos);
}

// An op whose C fragment does not compile, while its perform works.
class BrokenCodeOp : public COp {
 public:
  BrokenCodeOp() : COp("generic_broken_op", {}) {}
  std::vector<TensorType> infer_type(const std::vector<TensorType>& in) const override {
    return {in[0]};
  }
  std::vector<Shape> infer_shape(const std::vector<Shape>& in) const override { return {in[0]}; }
  void perform(const std::vector<Tensor>& in, std::vector<Tensor>& out) const override {
    copy_into(in[0], out[0]);
  }
  std::string c_code(const Node&, const CodeNames&, const Sub&) const override {
    return "undefined_symbol_generic += 1;\n";
  }
};

// Doubles its input; its perform first waits for `watched` to have its module, so a generic
// run is still going when the module is ready.
std::atomic<const TieredFunction*> watched{nullptr};
class WaitForModuleOp : public COp {
 public:
  WaitForModuleOp() : COp("generic_wait_op", {}) {}
  std::vector<TensorType> infer_type(const std::vector<TensorType>& in) const override {
    return {in[0]};
  }
  std::vector<Shape> infer_shape(const std::vector<Shape>& in) const override { return {in[0]}; }
  void perform(const std::vector<Tensor>& in, std::vector<Tensor>& out) const override {
    for (int i = 0; i < 60000 && !(watched.load() && watched.load()->ready()); ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    for (int64_t i = 0; i < in[0].numel(); ++i) out[0].store(i, 2 * in[0].load(i));
  }
  std::string c_code(const Node&, const CodeNames& names, const Sub&) const override {
    return "for (int64_t i = 0; i < " + names.inputs[0] + "->shape[0]; ++i) ((float *)" +
           names.outputs[0] + "->data)[i] = 2 * ((const float *)" + names.inputs[0] +
           "->data)[i];\n";
  }
};

// Negates its input in compiled code only: its perform throws, as an op library op without
// reference code does.
class CompiledOnlyOp : public COp {
 public:
  CompiledOnlyOp() : COp("generic_compiled_only_op", {}) {}
  std::vector<TensorType> infer_type(const std::vector<TensorType>& in) const override {
    return {in[0]};
  }
  std::vector<Shape> infer_shape(const std::vector<Shape>& in) const override { return {in[0]}; }
  void perform(const std::vector<Tensor>&, std::vector<Tensor>&) const override {
    throw UnsupportedError("generic_compiled_only_op runs only in compiled modules");
  }
  std::string c_code(const Node&, const CodeNames& names, const Sub&) const override {
    return "for (int64_t i = 0; i < " + names.inputs[0] + "->shape[0]; ++i) ((float *)" +
           names.outputs[0] + "->data)[i] = -((const float *)" + names.inputs[0] +
           "->data)[i];\n";
  }
};

class TieredFunctionTest : public ::testing::Test {
 protected:
  void SetUp() override {
    clear_compile_memo();
    opts_.cache_dir = testing::temp_dir("tiered") + "/cache";
    opts_.generic_start = true;
  }
  static Graph mlp() {
    Graph g("tiered_mlp");
    std::mt19937 rng(13);
    Var x = input(g, "x", DType::kFloat32, {kDynamic, 24});
    Var w = parameter(g, random_tensor(DType::kFloat32, {24, 33}, rng), "w");
    Var b = parameter(g, random_tensor(DType::kFloat32, {33}, rng), "b");
    g.set_outputs({softmax(relu(matmul(x, w) + b)).var()});
    return g;
  }
  CompileOptions opts_;
};

TEST_F(TieredFunctionTest, MissRunsGenericThenTheModule) {
  const Graph g = mlp();
  std::mt19937 rng(17);
  const Tensor x = random_tensor(DType::kFloat32, {5, 24}, rng);
  TieredFunction f(g, opts_);
  EXPECT_TRUE(f.started_generic());
  EXPECT_EQ(f.last_tier(), Tier::kNone);
  // A compile takes tens of milliseconds at least; this call is over long before.
  const std::vector<Tensor> first = f.run({{"x", x}});
  EXPECT_EQ(f.last_tier(), Tier::kGeneric);
  EXPECT_EQ(f.generic_runs(), 1);
  const Function& compiled = f.compiled();
  EXPECT_TRUE(f.ready());
  EXPECT_GT(f.background_ms(), 0);
  EXPECT_EQ(compiled.info().cache, CacheStatus::kMiss);
  const std::vector<Tensor> later = f({x});
  EXPECT_EQ(f.last_tier(), Tier::kCompiled);
  EXPECT_EQ(f.generic_runs(), 1);
  EXPECT_TRUE(tensors_close(first.at(0), later.at(0), 1e-5, 1e-6));
  EXPECT_TRUE(tensors_close(first.at(0), evaluate_reference(g, {x}).at(0), 1e-5, 1e-6));
  EXPECT_NE(error_of([&] { f.run({{"y", x}}); }).find("missing input 'x'"), std::string::npos);
}

TEST_F(TieredFunctionTest, HitStartsCompiledAndOffMeansCompiled) {
  const Graph g = mlp();
  { TieredFunction warm(g, opts_); }  // the destructor waits: the module is stored
  clear_compile_memo();
  TieredFunction hit(g, opts_);
  EXPECT_FALSE(hit.started_generic());
  EXPECT_TRUE(hit.ready());
  EXPECT_EQ(hit.compiled().info().cache, CacheStatus::kHit);
  hit({Tensor::zeros(DType::kFloat32, {1, 24})});
  EXPECT_EQ(hit.last_tier(), Tier::kCompiled);

  CompileOptions off = opts_;
  off.generic_start = false;
  off.cache_dir = testing::temp_dir("tiered_off") + "/cache";
  TieredFunction plain(g, off);
  EXPECT_FALSE(plain.started_generic());
  EXPECT_EQ(plain.compiled().info().cache, CacheStatus::kMiss);
}

TEST_F(TieredFunctionTest, BackgroundCompileErrorIsReported) {
  Graph g("tiered_broken");
  Var x = input(g, "x", DType::kFloat32, {4});
  Variable* y = g.add_node(std::make_shared<BrokenCodeOp>(), {x})->outputs[0];
  g.set_outputs({y});
  TieredFunction f(g, opts_);
  ASSERT_TRUE(f.started_generic());
  const Tensor in = Tensor::from_doubles(DType::kFloat32, {4}, {1, -2, 3, -0.0});
  // The generic tier answers; the module's error comes with the first call after it failed.
  EXPECT_TRUE(tensors_close(f({in}).at(0), in));
  EXPECT_NE(error_of([&] { f.compiled(); }).find("undefined_symbol_generic"), std::string::npos);
  EXPECT_NE(error_of([&] { f({in}); }).find("undefined_symbol_generic"), std::string::npos);
}

// kiln run --generic-start: the first run of a new model takes the generic tier, says so with
// -v, writes the same outputs as the module (checked against PyTorch's), and stores the
// module, which the next run takes.
TEST(GenericTierCli, RunTakesTheGenericTierOnAMissThenTheModule) {
  const std::string ex = std::string(KILN_EXAMPLES_DIR) + "/onnx/mlp";
  const std::string dir = testing::temp_dir("tiered_cli");
  const std::vector<std::string> env{"KILN_CACHE_DIR=" + dir + "/cache"};
  const auto args = [&](const std::string& out) {
    return std::vector<std::string>{"run",
                                    "-v",
                                    "--generic-start",
                                    ex + "/model.onnx",
                                    "--input",
                                    "x=" + ex + "/x.npy",
                                    "-o",
                                    dir + "/" + out};
  };
  const ProcessResult cold = testing::kiln_env(env, args("cold"));
  ASSERT_EQ(cold.exit_code, 0) << cold.err;
  EXPECT_NE(cold.err.find("tier: the run took the generic tier"), std::string::npos) << cold.err;
  const ProcessResult warm = testing::kiln_env(env, args("warm"));
  ASSERT_EQ(warm.exit_code, 0) << warm.err;
  EXPECT_NE(warm.err.find("tier: the run took the compiled module"), std::string::npos) << warm.err;
  const Tensor want = read_npy(ex + "/expected/y.npy");
  EXPECT_TRUE(tensors_close(read_npy(dir + "/cold/y.npy"), want, 1e-4, 1e-5));
  EXPECT_TRUE(tensors_close(read_npy(dir + "/warm/y.npy"), want, 1e-4, 1e-5));
}

// kiln run takes the generic tier on a miss by default; --no-generic-start waits for the
// module, whose outputs every later run repeats bit for bit.
TEST(GenericTierCli, NoGenericStartRunsTheModuleFromTheFirstCall) {
  const std::string ex = std::string(KILN_EXAMPLES_DIR) + "/onnx/mlp";
  const std::string dir = testing::temp_dir("tiered_cli_off");
  const auto args = [&](const std::string& flag, const std::string& out) {
    std::vector<std::string> a{"run", "-v", ex + "/model.onnx", "--input", "x=" + ex + "/x.npy",
                               "-o", dir + "/" + out};
    if (!flag.empty()) a.push_back(flag);
    return a;
  };
  const ProcessResult plain =
      testing::kiln_env({"KILN_CACHE_DIR=" + dir + "/cache_default"}, args("", "default"));
  ASSERT_EQ(plain.exit_code, 0) << plain.err;
  EXPECT_NE(plain.err.find("tier: the run took the generic tier"), std::string::npos)
      << plain.err;
  const std::vector<std::string> env{"KILN_CACHE_DIR=" + dir + "/cache"};
  const ProcessResult off = testing::kiln_env(env, args("--no-generic-start", "off"));
  ASSERT_EQ(off.exit_code, 0) << off.err;
  EXPECT_NE(off.err.find("tier: the run took the compiled module"), std::string::npos) << off.err;
  const ProcessResult hit = testing::kiln_env(env, args("", "hit"));
  ASSERT_EQ(hit.exit_code, 0) << hit.err;
  const Tensor a = read_npy(dir + "/off/y.npy"), b = read_npy(dir + "/hit/y.npy");
  ASSERT_EQ(a.nbytes(), b.nbytes());
  EXPECT_EQ(std::memcmp(a.data(), b.data(), a.nbytes()), 0);
  std::vector<std::string> both = args("--no-generic-start", "both");
  both.push_back("--generic-start");
  const ProcessResult clash = testing::kiln_env(env, both);
  EXPECT_NE(clash.exit_code, 0);
  EXPECT_NE(clash.err.find("--generic-start and --no-generic-start contradict each other"),
            std::string::npos)
      << clash.err;
}

TEST_F(TieredFunctionTest, AGenericRunTheModuleOvertakesIsDropped) {
  Graph g("tiered_overtaken");
  Var x = input(g, "x", DType::kFloat32, {5});
  Var doubled{&g, g.add_node(std::make_shared<WaitForModuleOp>(), {x})->outputs[0]};
  g.set_outputs({relu(doubled).var()});
  TieredFunction f(g, opts_);
  ASSERT_TRUE(f.started_generic());
  watched = &f;
  const Tensor in = Tensor::from_doubles(DType::kFloat32, {5}, {1, -2, 3, -0.5, 4});
  const std::vector<Tensor> out = f({in});
  watched = nullptr;
  EXPECT_EQ(f.last_tier(), Tier::kCompiled);
  EXPECT_EQ(f.overtaken_runs(), 1);
  EXPECT_EQ(f.generic_runs(), 0);
  EXPECT_TRUE(
      tensors_close(out.at(0), Tensor::from_doubles(DType::kFloat32, {5}, {2, 0, 6, 0, 8})));
}

// A generic run that throws leaves the answer to the module: a node without reference code
// gives the module's result, a bad input the module's own diagnostic, word for word.
TEST_F(TieredFunctionTest, AFailedGenericRunLeavesTheAnswerToTheModule) {
  Graph g("tiered_compiled_only");
  Var x = input(g, "x", DType::kFloat32, {4});
  Variable* y = g.add_node(std::make_shared<CompiledOnlyOp>(), {x})->outputs[0];
  g.set_outputs({y});
  TieredFunction f(g, opts_);
  ASSERT_TRUE(f.started_generic());
  const Tensor in = Tensor::from_doubles(DType::kFloat32, {4}, {1, -2, 3, -0.0});
  EXPECT_TRUE(tensors_close(f({in}).at(0),
                            Tensor::from_doubles(DType::kFloat32, {4}, {-1, 2, -3, 0})));
  EXPECT_EQ(f.last_tier(), Tier::kCompiled);
  EXPECT_TRUE(f.generic_failed());
  EXPECT_EQ(f.generic_runs(), 0);
  EXPECT_EQ(f.overtaken_runs(), 0);
}

TEST_F(TieredFunctionTest, ABadInputGetsTheModulesDiagnostic) {
  const Graph g = mlp();
  const Tensor bad = Tensor::zeros(DType::kFloat32, {2, 25});
  TieredFunction f(g, opts_);
  ASSERT_TRUE(f.started_generic());
  const std::string tiered = error_of([&] { f({bad}); });
  EXPECT_TRUE(f.generic_failed());
  const std::string module = error_of([&] { f.compiled()({bad}); });
  EXPECT_FALSE(module.empty());
  EXPECT_EQ(tiered, module);
}

// The generic tier is the default: on unless the option or KILN_GENERIC_START=0 says no.
TEST_F(TieredFunctionTest, OnByDefaultAndOffWithTheVariable) {
  const Graph g = mlp();
  CompileOptions unset = opts_;
  unset.generic_start.reset();
  {
    TieredFunction f(g, unset);
    EXPECT_TRUE(f.started_generic());
  }
  clear_compile_memo();
  unset.cache_dir = testing::temp_dir("tiered_default_off") + "/cache";
  setenv("KILN_GENERIC_START", "0", 1);
  bool started = true;
  {
    TieredFunction f(g, unset);
    started = f.started_generic();
  }
  unsetenv("KILN_GENERIC_START");
  EXPECT_FALSE(started);
}

// The same value listed twice, a weight and an input as outputs: each output is the caller's
// own tensor, as a module returns them.
TEST(GenericTier, EveryOutputIsAFreshTensor) {
  Graph g("generic_alias");
  Var x = input(g, "x", DType::kFloat32, {4});
  Var w = parameter(g, Tensor::from_doubles(DType::kFloat32, {4}, {1, 2, 3, 4}), "w");
  Var y = relu(x);
  g.set_outputs({w.var(), x.var(), y.var(), y.var()});
  GenericRunner runner(std::shared_ptr<const Graph>(std::shared_ptr<const Graph>(), &g));
  const Tensor in = Tensor::from_doubles(DType::kFloat32, {4}, {-1, 2, -3, 4});
  const std::vector<Tensor> out = runner.run({in});
  ASSERT_EQ(out.size(), 4u);
  for (size_t i = 0; i < out.size(); ++i) {
    EXPECT_NE(out[i].storage().get(), in.storage().get()) << "output " << i;
    for (size_t j = 0; j < i; ++j)
      EXPECT_NE(out[i].storage().get(), out[j].storage().get()) << "outputs " << j << ", " << i;
  }
  EXPECT_TRUE(tensors_close(out[3], Tensor::from_doubles(DType::kFloat32, {4}, {0, 2, 0, 4})));
}

TEST(GenericTierEnv, BadSettingIsAnErrorNamingIt) {
  Graph g("tiered_env");
  Var x = input(g, "x", DType::kFloat32, {4});
  g.set_outputs({relu(x).var()});
  setenv("KILN_GENERIC_START", "yes", 1);
  const std::string err = error_of([&] { TieredFunction f(g, CompileOptions{}); });
  unsetenv("KILN_GENERIC_START");
  EXPECT_NE(err.find("KILN_GENERIC_START: 'yes' is not 0 or 1"), std::string::npos) << err;
}

}  // namespace
}  // namespace kiln
