// The CUDA backend without a GPU: every kernel kind kiln emits runs on the emulator
// (KILN_CUDA_DEVICE=emulator, set below before any device is chosen) and is checked
// against each op's `perform`, on shapes with tails past the block size, broadcasts, empty
// tensors and the values that break kernels (NaN, +-inf, -0.0); and the same kernels.cu
// compiles under NVRTC for sm_80 and sm_90 with no register spills.
#include <gtest/gtest.h>

#include <dlfcn.h>

#include <chrono>
#include <cmath>
#include <cstdlib>
#include <random>
#include <regex>
#include <string_view>
#include <thread>

#include "compiler/c/linker.h"
#include "compiler/compile.h"
#include "compiler/cuda/nvrtc.h"
#include "compiler/cuda/toolchain.h"
#include "compiler/subprocess.h"
#include "frontend/model_loader.h"
#include "helpers.h"
#include "ops/builders.h"
#include "ops/cop.h"
#include "ops/device_placed.h"
#include "ops/reference.h"
#include "ops/scalar_table.h"
#include "runtime/device/caller_stream.h"
#include "runtime/device/device_completion.h"
#include "runtime/device/device_memory.h"
#include "runtime/device/device_tensor.h"
#include "runtime/engine/engine.h"
#include "runtime/io/npy.h"
#include "util/fs.h"

namespace kiln {
namespace {

namespace fs = std::filesystem;
using testing::error_of;
using testing::kiln_env;
using testing::temp_dir;
using testing::tensors_close;
using Ints = std::vector<int64_t>;

// Built twice: cuda_test on the emulator, and cuda_gpu_test (ctest label `gpu`) with
// KILN_CUDA_TEST_DEVICE="gpu", the same op checks on a real GPU. Tests about the emulator
// itself or about NVRTC alone run in the first only.
#ifndef KILN_CUDA_TEST_DEVICE
#define KILN_CUDA_TEST_DEVICE "emulator"
#define KILN_CUDA_SUITE CudaEmulator
#else
#define KILN_CUDA_SUITE CudaGpu
#endif
constexpr bool kOnGpu = std::string_view(KILN_CUDA_TEST_DEVICE) == "gpu";
#define SKIP_ON_GPU()                                                \
  do {                                                               \
    if (kOnGpu) GTEST_SKIP() << "about the emulator or NVRTC alone"; \
  } while (0)

const bool kDevice = [] {
  ::setenv("KILN_CUDA_DEVICE", KILN_CUDA_TEST_DEVICE, 1);
  return true;
}();

CompileOptions on_cuda() {
  CompileOptions o;
  o.device = "cuda";
  return o;
}

// Values that break kernels, then random ones.
Tensor nasty(DType dt, const Shape& shape, std::mt19937& rng, double lo = -3, double hi = 3) {
  Tensor t = testing::random_tensor(dt, shape, rng, lo, hi);
  if (!is_float(dt)) return t;
  const double special[] = {NAN, INFINITY, -INFINITY, -0.0, 0.0, 1.0, -1.0, 0.5};
  for (int64_t i = 0; i < std::min<int64_t>(t.numel(), 8); ++i)
    t.store(i * 7 % t.numel(), special[i]);
  return t;
}

// Every compute node of `g` placed on the device: only transfers stay host nodes.
void expect_all_on_device(const Graph& g) {
  const Graph placed = optimized_graph(g, on_cuda());
  for (const auto& n : placed.nodes()) {
    const std::string& op = n->op->name();
    EXPECT_TRUE(op.rfind("cuda:", 0) == 0 || op == "to_device" || op == "to_host")
        << op << " stayed on the CPU";
  }
}

// Compiles `g` for the CUDA emulator, runs it, and compares every output with perform.
void expect_matches_reference(const Graph& g, const std::vector<Tensor>& inputs, double rtol,
                              double atol) {
  Function f = compile(g, on_cuda());
  EXPECT_NE(f.info().device.find(kOnGpu ? "sm_" : "emulator"), std::string::npos)
      << f.info().device;
  std::vector<Tensor> got = f(inputs);
  std::vector<Tensor> want = evaluate_reference(g, inputs);
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    EXPECT_TRUE(tensors_close(got[i], want[i], rtol, atol))
        << "output " << i << " (" << g.outputs()[i]->name << ")";
  }
}

// Every scalar-table op applied to (3, 257) against a (257,) broadcast operand: one node
// per op (each an output), so the graph is one module.
Graph scalar_ops_graph(DType dt, bool ints) {
  Graph g(ints ? "cuda_int_ops" : "cuda_float_ops");
  Var a = input(g, "a", dt, {3, 257});
  Var b = input(g, "b", dt, {257});
  Var c = input(g, "c", dt, {3, 1});
  std::vector<Variable*> outs;
  for (const auto& def : scalar_ops()) {
    if (def.out == OutRule::kWhere || def.out == OutRule::kCast) continue;
    if (def.domain == Domain::kBool) continue;
    // Its third operand is the second's reciprocal, not an independent value (ops_test's
    // ranges keep them related).
    if (def.name == "div_rcp") continue;
    if (ints ? def.c_int.empty() || def.domain == Domain::kFloat : def.c_float.empty()) continue;
    std::vector<Var> args{a, b, c};
    args.resize(static_cast<size_t>(def.arity));
    outs.push_back(kiln::apply(std::string(def.name), args).var());
  }
  g.set_outputs(outs);
  return g;
}

TEST(KILN_CUDA_SUITE, EveryFloatElementwiseOpMatchesPerform) {
  std::mt19937 rng(1);
  Graph g = scalar_ops_graph(DType::kFloat32, false);
  ASSERT_GT(g.outputs().size(), 40u);
  expect_matches_reference(
      g,
      {nasty(DType::kFloat32, {3, 257}, rng), nasty(DType::kFloat32, {257}, rng),
       nasty(DType::kFloat32, {3, 1}, rng)},
      2e-5, 1e-6);
}

TEST(KILN_CUDA_SUITE, EveryIntegerElementwiseOpMatchesPerform) {
  std::mt19937 rng(2);
  Graph g = scalar_ops_graph(DType::kInt32, true);
  ASSERT_GT(g.outputs().size(), 10u);
  Tensor b = testing::random_tensor(DType::kInt32, {257}, rng, -9, 9);
  b.store_int(0, 0);  // division and modulo by zero
  b.store_int(1, -1);
  Tensor a = testing::random_tensor(DType::kInt32, {3, 257}, rng, -50, 50);
  a.store_int(1, INT32_MIN);  // INT_MIN / -1 wraps instead of trapping
  expect_matches_reference(g, {a, b, testing::random_tensor(DType::kInt32, {3, 1}, rng, -5, 5)}, 0,
                           0);
}

TEST(KILN_CUDA_SUITE, FusedElementwiseChainsAndScalarLiteralsMatchPerform) {
  std::mt19937 rng(3);
  Graph g("cuda_fused");
  Var x = input(g, "x", DType::kFloat64, {kDynamic, 1000});
  Var w = input(g, "w", DType::kFloat64, {1, 1000});
  Var y = tanh(x * w + 0.5) * sigmoid(x) - exp(x / 3.0);
  g.set_outputs({y.var()});
  expect_matches_reference(
      g, {nasty(DType::kFloat64, {5, 1000}, rng), nasty(DType::kFloat64, {1, 1000}, rng)}, 1e-12,
      1e-13);
  // An empty batch launches nothing and returns an empty tensor.
  Function f = compile(g, on_cuda());
  auto out =
      f({Tensor::zeros(DType::kFloat64, {0, 1000}), Tensor::zeros(DType::kFloat64, {1, 1000})});
  EXPECT_EQ(out.at(0).shape(), (Shape{0, 1000}));
}

TEST(KILN_CUDA_SUITE, ReductionsOverAnyAxesMatchPerform) {
  std::mt19937 rng(4);
  Graph g("cuda_reduce");
  Var x = input(g, "x", DType::kFloat32, {5, 7, 300});
  Var n = input(g, "n", DType::kInt32, {6, 33});
  g.set_outputs({sum(x, {2}).var(), mean(x, {0}, true).var(), max(x, {1, 2}).var(), sum(x).var(),
                 kiln::apply("reduce_min", {x}, {{"axes", std::vector<int64_t>{0, 2}}}).var(),
                 kiln::apply("reduce_prod", {x}, {{"axes", std::vector<int64_t>{1}}}).var(),
                 sum(n, {1}).var(), max(n, {0}).var()});
  Tensor xs = testing::random_tensor(DType::kFloat32, {5, 7, 300}, rng, 0.9, 1.1);
  xs.store(301, NAN);  // one row's max and sum must be NaN
  xs.store(5000, INFINITY);
  expect_matches_reference(g, {xs, testing::random_tensor(DType::kInt32, {6, 33}, rng, -100, 100)},
                           1e-4, 1e-5);
}

TEST(KILN_CUDA_SUITE, ReductionsOfEmptyAxesGiveTheIdentity) {
  Graph g("cuda_reduce_empty");
  Var x = input(g, "x", DType::kFloat32, {4, kDynamic});
  g.set_outputs({sum(x, {1}).var(), mean(x, {1}).var()});
  expect_matches_reference(g, {Tensor::zeros(DType::kFloat32, {4, 0})}, 0, 0);
  // max has no identity: refused at run time as on the CPU, naming the node.
  Graph h("cuda_max_empty");
  Var y = input(h, "y", DType::kFloat32, {4, kDynamic});
  h.set_outputs({max(y, {1}).var()});
  Function f = compile(h, on_cuda());
  EXPECT_NE(error_of([&] {
              f({Tensor::zeros(DType::kFloat32, {4, 0})});
            }).find("cuda:reduce_max"),
            std::string::npos);
}

TEST(KILN_CUDA_SUITE, SoftmaxAlongAnyAxisMatchesPerform) {
  std::mt19937 rng(5);
  Graph g("cuda_softmax");
  Var x = input(g, "x", DType::kFloat32, {6, 300});
  Var z = input(g, "z", DType::kFloat64, {4, 5, 3});
  g.set_outputs(
      {softmax(x).var(), log_softmax(x).var(), softmax(z, 1).var(), log_softmax(z, 0).var()});
  Tensor xs = testing::random_tensor(DType::kFloat32, {6, 300}, rng, -30, 30);
  xs.store(3, -INFINITY);  // a masked position
  xs.store(310, 80);       // large values must not overflow
  expect_matches_reference(g, {xs, testing::random_tensor(DType::kFloat64, {4, 5, 3}, rng)}, 1e-5,
                           1e-7);
}

// Long rows take the other code paths: softmax rows held in registers (up to 8 values per
// thread, 256 or 1024 threads) or streamed three times (longer rows), and reductions that
// load four values per thread at a time; every length here leaves a tail.
TEST(KILN_CUDA_SUITE, LongRowsMatchPerformOnEveryKernelPath) {
  std::mt19937 rng(50);
  for (int64_t n : {1023, 2049, 8191, 8193}) {
    Graph g("cuda_long_rows_" + std::to_string(n));
    Var x = input(g, "x", DType::kFloat32, {3, n});
    Var z = input(g, "z", DType::kFloat64, {2, n});
    g.set_outputs({softmax(x).var(), log_softmax(x).var(), softmax(z).var(), sum(x, {1}).var(),
                   max(x, {1}).var(), mean(z, {1}).var(), (exp(x) * 2.0 + 1.0).var()});
    Tensor xs = testing::random_tensor(DType::kFloat32, {3, n}, rng, -30, 30);
    xs.store(n - 1, -INFINITY);    // the last element of row 0: the tail
    xs.store(n + n / 2, 80);       // row 1: large values
    xs.store(2 * n + n - 2, NAN);  // row 2: NaN near the end
    SCOPED_TRACE("row length " + std::to_string(n));
    expect_matches_reference(g, {xs, testing::random_tensor(DType::kFloat64, {2, n}, rng)}, 1e-5,
                             1e-6);
  }  // Rows of special values: all -inf (NaN, as perform gives), a +inf (NaN), NaN first,
  // -inf then finite values, -0.0 among finite ones; float32 and float64.
  for (DType dt : {DType::kFloat32, DType::kFloat64}) {
    Graph g("cuda_special_rows");
    Var x = input(g, "x", dt, {5, 37});
    g.set_outputs({softmax(x).var(), log_softmax(x).var()});
    Tensor xs = testing::random_tensor(dt, {5, 37}, rng, -5, 5);
    for (int64_t j = 0; j < 37; ++j) xs.store(j, -INFINITY);
    xs.store(37 + 20, INFINITY);
    xs.store(2 * 37, NAN);
    for (int64_t j = 0; j < 30; ++j) xs.store(3 * 37 + j, -INFINITY);
    xs.store(4 * 37 + 5, -0.0);
    SCOPED_TRACE(dtype_name(dt));
    expect_matches_reference(g, {xs}, 1e-5, 1e-7);
  }
}

TEST(KILN_CUDA_SUITE, MatmulAndGemmWithTailsAndTransposesMatchPerform) {
  std::mt19937 rng(6);
  Graph g("cuda_gemm");
  Var a = input(g, "a", DType::kFloat32, {17, 33});
  Var b = input(g, "b", DType::kFloat32, {33, 19});
  Var at = input(g, "at", DType::kFloat32, {33, 17});
  Var bt = input(g, "bt", DType::kFloat32, {19, 33});
  Var row = input(g, "row", DType::kFloat32, {19});
  Var col = input(g, "col", DType::kFloat32, {17, 1});
  g.set_outputs({matmul(a, b).var(), gemm(at, bt, row, 0.5, 2.0, true, true).var(),
                 gemm(a, bt, col, 1.0, -1.0, false, true).var()});
  expect_matches_reference(g,
                           {testing::random_tensor(DType::kFloat32, {17, 33}, rng),
                            testing::random_tensor(DType::kFloat32, {33, 19}, rng),
                            testing::random_tensor(DType::kFloat32, {33, 17}, rng),
                            testing::random_tensor(DType::kFloat32, {19, 33}, rng),
                            testing::random_tensor(DType::kFloat32, {19}, rng),
                            testing::random_tensor(DType::kFloat32, {17, 1}, rng)},
                           1e-5, 1e-5);
}

TEST(KILN_CUDA_SUITE, BatchedAndOneDimensionalMatmulsMatchPerform) {
  std::mt19937 rng(16);
  Graph g("cuda_bmm");
  Var a = input(g, "a", DType::kFloat32, {3, 1, 70, 20});
  Var b = input(g, "b", DType::kFloat32, {4, 20, 65});
  Var v = input(g, "v", DType::kFloat32, {20});
  Var d = input(g, "d", DType::kFloat64, {2, 5, 3});
  Var e = input(g, "e", DType::kFloat64, {3, 0});
  g.set_outputs({matmul(a, b).var(), matmul(v, b).var(), matmul(a, v).var(), matmul(v, v).var(),
                 matmul(d, e).var()});
  expect_matches_reference(
      g,
      {nasty(DType::kFloat32, {3, 1, 70, 20}, rng), nasty(DType::kFloat32, {4, 20, 65}, rng),
       nasty(DType::kFloat32, {20}, rng), nasty(DType::kFloat64, {2, 5, 3}, rng),
       Tensor::empty(DType::kFloat64, {3, 0})},
      1e-5, 1e-5);
}

// Every op that only moves data, on shapes with tails, several dtypes and an empty band.
TEST(KILN_CUDA_SUITE, DataMovementOpsMatchPerform) {
  std::mt19937 rng(17);
  Graph g("cuda_movement");
  Var x = input(g, "x", DType::kFloat32, {3, 5, 7, 11});
  Var h = input(g, "h", DType::kFloat64, {3, 2, 7, 11});
  Var none = input(g, "none", DType::kFloat64, {3, 0, 7, 11});
  Var i8 = input(g, "i8", DType::kInt8, {37, 9});
  Var i64 = input(g, "i64", DType::kInt64, {4, 1, 6});
  Var ids = input(g, "ids", DType::kInt64, {2, 3});
  Var ids32 = input(g, "ids32", DType::kInt32, {5});
  Var xd = cast(x, DType::kFloat64);
  g.set_outputs({
      transpose(x, {2, 0, 3, 1}).var(),
      transpose(i8).var(),
      kiln::apply("slice", {x},
                  {{"starts", Ints{-1, 1}},
                   {"ends", Ints{-100, 9}},
                   {"axes", Ints{2, 3}},
                   {"steps", Ints{-2, 3}}})
          .var(),
      kiln::apply("slice", {i8}, {{"starts", Ints{5}}, {"ends", Ints{5}}, {"axes", Ints{0}}}).var(),
      concat({xd, h, none, xd}, 1).var(),
      concat({i8, i8}, 0).var(),
      kiln::apply("expand", {i64}, {{"shape", Ints{2, 4, 3, 6}}}).var(),
      kiln::apply("gather", {x, ids}, {{"axis", int64_t{1}}}).var(),
      kiln::apply("gather", {i8, ids32}, {{"axis", int64_t{0}}}).var(),
  });
  Tensor idx = Tensor::empty(DType::kInt64, {2, 3});
  const int64_t iv[] = {0, 4, -1, 2, -5, 3};
  for (int k = 0; k < 6; ++k) idx.store_int(k, iv[k]);
  Tensor idx32 = Tensor::empty(DType::kInt32, {5});
  const int64_t jv[] = {36, -37, 0, 12, 12};
  for (int k = 0; k < 5; ++k) idx32.store_int(k, jv[k]);
  expect_matches_reference(
      g,
      {nasty(DType::kFloat32, {3, 5, 7, 11}, rng), nasty(DType::kFloat64, {3, 2, 7, 11}, rng),
       Tensor::empty(DType::kFloat64, {3, 0, 7, 11}),
       testing::random_tensor(DType::kInt8, {37, 9}, rng, -100, 100),
       testing::random_tensor(DType::kInt64, {4, 1, 6}, rng, -1e9, 1e9), idx, idx32},
      0, 0);
}

// GridSample on the device runs the CPU's own rule per output element: every mode and
// padding, align_corners both ways, grids past the image and NaN coordinates, float32 and
// float64, against perform.
TEST(KILN_CUDA_SUITE, GridSampleMatchesPerformInEveryModeAndPadding) {
  std::mt19937 rng(29);
  Graph g("cuda_grid_sample");
  Var x = input(g, "x", DType::kFloat32, {2, 3, 7, 9});
  Var grid = input(g, "grid", DType::kFloat32, {2, 5, 6, 2});
  Var xd = input(g, "xd", DType::kFloat64, {1, 2, 4, 5});
  Var gd = input(g, "gd", DType::kFloat64, {1, 3, 3, 2});
  std::vector<Variable*> outs;
  for (const char* mode : {"bilinear", "nearest", "bicubic"}) {
    for (const char* pad : {"zeros", "border", "reflection"}) {
      for (const int64_t align : {int64_t{0}, int64_t{1}}) {
        const Attrs a{{"mode", std::string(mode)},
                      {"padding_mode", std::string(pad)},
                      {"align_corners", align}};
        outs.push_back(kiln::apply("grid_sample", {x, grid}, a).var());
        outs.push_back(kiln::apply("grid_sample", {xd, gd}, a).var());
      }
    }
  }
  g.set_outputs(outs);
  expect_all_on_device(g);
  // Coordinates in [-1.4, 1.4]: inside, on the edges and past them; one NaN per grid.
  Tensor gv = testing::random_tensor(DType::kFloat32, {2, 5, 6, 2}, rng, -1.4, 1.4);
  gv.store(7, std::nan(""));
  gv.store(8, 1.0);
  gv.store(9, -1.0);
  Tensor gdv = testing::random_tensor(DType::kFloat64, {1, 3, 3, 2}, rng, -1.4, 1.4);
  gdv.store(3, std::nan(""));
  expect_matches_reference(g,
                           {nasty(DType::kFloat32, {2, 3, 7, 9}, rng), gv,
                            nasty(DType::kFloat64, {1, 2, 4, 5}, rng), gdv},
                           1e-5, 1e-5);
}

// Pad on the device in every mode: pads on both sides, pads wider than the input (reflect
// and wrap come round more than once), crops (negative pads, the constant mode), a NaN and an
// integer value.
TEST(KILN_CUDA_SUITE, PadMatchesPerformInEveryMode) {
  std::mt19937 rng(31);
  Graph g("cuda_pad");
  Var x = input(g, "x", DType::kFloat32, {2, 3, 5, 4});
  Var d = input(g, "d", DType::kFloat64, {3, 7});
  Var i = input(g, "i", DType::kInt32, {4, 3});
  std::vector<Variable*> outs;
  for (const char* mode : {"constant", "reflect", "edge", "wrap"}) {
    const std::string m(mode);
    outs.push_back(
        kiln::apply("pad", {x}, {{"mode", m}, {"pads", Ints{0, 1, 2, 3, 0, 0, 1, 2}}}).var());
    outs.push_back(kiln::apply("pad", {d}, {{"mode", m}, {"pads", Ints{2, 9, 3, 8}}}).var());
    outs.push_back(kiln::apply("pad", {i}, {{"mode", m}, {"pads", Ints{1, 0, 0, 2}}}).var());
  }
  // Crops take the constant mode.
  outs.push_back(kiln::apply("pad", {x}, {{"pads", Ints{0, 1, 2, 3, 0, -1, 1, -2}}}).var());
  outs.push_back(kiln::apply("pad", {i}, {{"pads", Ints{1, -1, 0, 2}}}).var());
  outs.push_back(
      kiln::apply("pad", {x}, {{"pads", Ints{1, 0, 0, 1, 0, 1, 1, 0}}, {"value", std::nan("")}})
          .var());
  outs.push_back(kiln::apply("pad", {i}, {{"pads", Ints{2, 2, 2, 2}}, {"value", -7.0}}).var());
  g.set_outputs(outs);
  expect_all_on_device(g);
  expect_matches_reference(
      g,
      {nasty(DType::kFloat32, {2, 3, 5, 4}, rng), nasty(DType::kFloat64, {3, 7}, rng),
       testing::random_tensor(DType::kInt32, {4, 3}, rng, -1e6, 1e6)},
      0, 0);
}

// Transposed convolutions on the device, lowered (a matmul and the fold) and direct (`-lower`):
// strides with output_padding, groups with dilation, a negative end pad (positions only the
// bias reaches), 1-D in float64 and 3-D, with and without bias, against perform.
TEST(KILN_CUDA_SUITE, ConvTransposeMatchesPerformLoweredAndDirect) {
  std::mt19937 rng(37);
  Graph g("cuda_conv_transpose");
  Var x = input(g, "x", DType::kFloat32, {2, 6, 5, 7});
  Var w = input(g, "w", DType::kFloat32, {6, 4, 3, 3});
  Var wg = input(g, "wg", DType::kFloat32, {6, 2, 2, 3});
  Var b = input(g, "b", DType::kFloat32, {4});
  Var x1 = input(g, "x1", DType::kFloat64, {1, 4, 9});
  Var w1 = input(g, "w1", DType::kFloat64, {4, 3, 5});
  Var b1 = input(g, "b1", DType::kFloat64, {3});
  Var x3 = input(g, "x3", DType::kFloat32, {1, 2, 3, 4, 3});
  Var w3 = input(g, "w3", DType::kFloat32, {2, 3, 2, 3, 2});
  g.set_outputs({
      kiln::apply(
          "conv_transpose", {x, w, b},
          {{"strides", Ints{2, 2}}, {"pads", Ints{1, 1, 1, 1}}, {"output_padding", Ints{1, 1}}})
          .var(),
      kiln::apply("conv_transpose", {x, wg},
                  {{"group", int64_t{3}}, {"strides", Ints{1, 3}}, {"dilations", Ints{2, 2}}})
          .var(),
      kiln::apply("conv_transpose", {x1, w1, b1}, {{"strides", Ints{3}}, {"pads", Ints{1, -2}}})
          .var(),
      kiln::apply("conv_transpose", {x3, w3}, {{"strides", Ints{2, 1, 2}}}).var(),
  });
  const std::vector<Tensor> in{nasty(DType::kFloat32, {2, 6, 5, 7}, rng),
                               testing::random_tensor(DType::kFloat32, {6, 4, 3, 3}, rng),
                               testing::random_tensor(DType::kFloat32, {6, 2, 2, 3}, rng),
                               testing::random_tensor(DType::kFloat32, {4}, rng),
                               nasty(DType::kFloat64, {1, 4, 9}, rng),
                               testing::random_tensor(DType::kFloat64, {4, 3, 5}, rng),
                               testing::random_tensor(DType::kFloat64, {3}, rng),
                               testing::random_tensor(DType::kFloat32, {1, 2, 3, 4, 3}, rng),
                               testing::random_tensor(DType::kFloat32, {2, 3, 2, 3, 2}, rng)};
  for (const char* passes : {"", "-lower"}) {
    SCOPED_TRACE(std::string("passes '") + passes + "'");
    CompileOptions o = on_cuda();
    o.passes = passes;
    const Graph placed = optimized_graph(g, o);
    int transposed = 0;
    for (const auto& n : placed.nodes()) {
      const std::string& op = n->op->name();
      EXPECT_TRUE(op.rfind("cuda:", 0) == 0 || op == "to_device" || op == "to_host")
          << op << " stayed on the CPU";
      transposed += op.find("conv_transpose") != std::string::npos;
    }
    EXPECT_EQ(transposed, 4);
    Function f = compile(g, o);
    const std::vector<Tensor> got = f(in);
    const std::vector<Tensor> want = evaluate_reference(g, in);
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < got.size(); ++i)
      EXPECT_TRUE(tensors_close(got[i], want[i], 1e-5, 1e-5)) << "output " << i;
  }
}

// RoIAlign on the device: average and max, half-pixel and legacy boxes, a fixed and an adaptive
// sampling ratio, boxes partly and wholly outside the image, against perform; a box with a NaN
// coordinate or a batch index outside the input fails the run naming the box, as on the CPU.
TEST(KILN_CUDA_SUITE, RoiAlignMatchesPerformAndABadBoxFailsNamingIt) {
  std::mt19937 rng(41);
  Graph g("cuda_roi_align");
  Var x = input(g, "x", DType::kFloat32, {2, 3, 12, 10});
  Var rois = input(g, "rois", DType::kFloat32, {5, 4});
  Var bi = input(g, "bi", DType::kInt64, {5});
  std::vector<Variable*> outs;
  for (const char* mode : {"avg", "max"}) {
    for (const int64_t half : {int64_t{0}, int64_t{1}}) {
      for (const int64_t ratio : {int64_t{0}, int64_t{2}}) {
        outs.push_back(kiln::apply("roi_align", {x, rois, bi},
                                   {{"mode", std::string(mode)},
                                    {"output_height", int64_t{3}},
                                    {"output_width", int64_t{4}},
                                    {"sampling_ratio", ratio},
                                    {"spatial_scale", 0.5},
                                    {"half_pixel", half}})
                           .var());
      }
    }
  }
  g.set_outputs(outs);
  expect_all_on_device(g);
  // x1, y1, x2, y2 at spatial scale 0.5: inside, across the edge, outside, tiny, reversed.
  const Tensor boxes = Tensor::from_doubles(
      DType::kFloat32, {5, 4},
      {2, 3, 14, 19, -6, -4, 9, 30, 30, 30, 44, 50, 5, 5, 5.5, 5.2, 16, 12, 4, 2});
  const Tensor batch = Tensor::from_doubles(DType::kInt64, {5}, {0, 1, 1, 0, 1});
  const Tensor xv = nasty(DType::kFloat32, {2, 3, 12, 10}, rng);
  expect_matches_reference(g, {xv, boxes, batch}, 1e-5, 1e-6);
  Function f = compile(g, on_cuda());
  Tensor nan_box = boxes.clone();
  nan_box.store(9, std::nan(""));
  EXPECT_NE(error_of([&] {
              f({xv, nan_box, batch});
            }).find("roi_align: box 2 has a NaN or infinite coordinate"),
            std::string::npos);
  Tensor far = batch.clone();
  far.store_int(3, 2);
  EXPECT_NE(error_of([&] {
              f({xv, boxes, far});
            }).find("roi_align: box 3 has batch index 2, outside [0, 2)"),
            std::string::npos);
}

// A seed draws the same numbers on the device as on the CPU, bit for bit, in every call:
// uniform (both widths), normal, Bernoulli, dropout and its mask, multinomial (rows with NaN,
// +inf and every -inf logit too). Both modules' run counters advance once per call. On a GPU,
// normal and multinomial go through the device's exp, log and cos, which may differ from the
// C library's in the last place: there those two are compared to 1e-6.
TEST(KILN_CUDA_SUITE, RandomDrawsEqualTheCpusInEveryCall) {
  std::mt19937 rng(37);
  Graph g("cuda_random");
  Var x = input(g, "x", DType::kFloat32, {7, 130});
  Var p = input(g, "p", DType::kFloat64, {3, 300});
  Var logits = input(g, "logits", DType::kFloat32, {5, 6});
  auto drop = kiln::apply_multi("dropout_train", {x}, {{"seed", int64_t{5}}, {"ratio", 0.3}});
  g.set_outputs({
      kiln::apply_in(g, "random_uniform", {},
                     {{"shape", Ints{1001}}, {"seed", int64_t{9}}, {"low", -2.0}, {"high", 5.0}})
          .var(),
      kiln::apply_in(g, "random_uniform", {},
                     {{"shape", Ints{3, 333}},
                      {"seed", int64_t{9}},
                      {"stream", int64_t{4}},
                      {"dtype", std::string("float64")}})
          .var(),
      kiln::apply("random_normal", {x}, {{"seed", int64_t{2}}, {"mean", 1.0}, {"scale", 3.0}})
          .var(),
      kiln::apply("bernoulli", {p}, {{"seed", int64_t{3}}, {"dtype", std::string("int32")}}).var(),
      drop[0].var(),
      drop[1].var(),
      kiln::apply(
          "multinomial", {logits},
          {{"seed", int64_t{8}}, {"dtype", std::string("int64")}, {"sample_size", int64_t{64}}})
          .var(),
  });
  expect_all_on_device(g);
  Tensor lv = testing::random_tensor(DType::kFloat32, {5, 6}, rng, -2, 2);
  lv.store(7, std::nan(""));                                    // row 1: no distribution
  lv.store(14, INFINITY);                                       // row 2: always class 2
  for (int64_t c = 0; c < 6; ++c) lv.store(24 + c, -INFINITY);  // row 4: none
  lv.store(3, -INFINITY);                                       // row 0: class 3 never
  const std::vector<Tensor> in{nasty(DType::kFloat32, {7, 130}, rng),
                               testing::random_tensor(DType::kFloat64, {3, 300}, rng, -0.2, 1.2),
                               lv};
  Function cpu = compile(g), dev = compile(g, on_cuda());
  for (int call = 0; call < 2; ++call) {
    const std::vector<Tensor> want = cpu(in), got = dev(in);
    ASSERT_EQ(got.size(), want.size());
    for (size_t k = 0; k < got.size(); ++k) {
      const bool libm = k == 2 || k == 6;
      EXPECT_TRUE(tensors_close(got[k], want[k], kOnGpu && libm ? 1e-6 : 0, 0))
          << "call " << call << ", output " << k;
    }
  }
}

TEST(KILN_CUDA_SUITE, AGatherIndexOutOfRangeFailsTheRunNamingTheIndex) {
  Graph g("cuda_gather_bad");
  Var x = input(g, "x", DType::kFloat32, {4, 3});
  Var ids = input(g, "ids", DType::kInt64, {2});
  g.set_outputs({kiln::apply("gather", {x, ids}, {{"axis", int64_t{0}}}).var()});
  Function f = compile(g, on_cuda());
  Tensor idx = Tensor::empty(DType::kInt64, {2});
  idx.store_int(0, 1);
  idx.store_int(1, 4);
  const std::string err = error_of([&] { f({Tensor::zeros(DType::kFloat32, {4, 3}), idx}); });
  EXPECT_NE(err.find("gather: index 4 is out of range for axis 0 of size 4"), std::string::npos)
      << err;
  EXPECT_NE(err.find("cuda:gather"), std::string::npos) << err;
}

// Reshape and flatten bind their output to the input's device bytes: no kernel, no copy,
// and the values read through the view are right.
TEST(KILN_CUDA_SUITE, ReshapesAreViewsOfTheDeviceBuffer) {
  std::mt19937 rng(18);
  Graph g("cuda_views");
  Var x = input(g, "x", DType::kFloat32, {kDynamic, 6, 5});
  Var y = exp(x);
  Var r = reshape(y, {-1, 3, 10});
  Var f = flatten(transpose(r, {0, 2, 1}), 1);
  g.set_outputs({(r * 2.0).var(), sqrt(f).var(), reshape(f, {-1}).var()});
  const Graph placed = optimized_graph(g, on_cuda());
  int views = 0;
  for (const auto& n : placed.nodes()) {
    if (n->op->name() == "cuda:reshape" || n->op->name() == "cuda:flatten") {
      ++views;
      const auto* op = dynamic_cast<const DevicePlaced*>(n->op.get());
      ASSERT_NE(op, nullptr);
      EXPECT_EQ(op->view_of(*n), 0);
      const DeviceCode code = op->device_code(*n, {{"x"}, {"y"}}, {});
      EXPECT_TRUE(code.kernels.empty() && code.launch.empty());
    }
  }
  EXPECT_EQ(views, 3) << "every reshape placed on the device";
  expect_matches_reference(g, {nasty(DType::kFloat32, {4, 6, 5}, rng)}, 1e-6, 1e-6);
}

TEST(KILN_CUDA_SUITE, ConvolutionsAndPoolsMatchPerform) {
  std::mt19937 rng(19);
  Graph g("cuda_window");
  Var x = input(g, "x", DType::kFloat32, {kDynamic, 6, 13, 11});
  Var w = input(g, "w", DType::kFloat32, {4, 3, 3, 2});
  Var b = input(g, "b", DType::kFloat32, {4});
  Var dw = input(g, "dw", DType::kFloat32, {6, 1, 3, 3});
  Var l = input(g, "l", DType::kFloat64, {2, 3, 29});
  Var lw = input(g, "lw", DType::kFloat64, {5, 3, 4});
  g.set_outputs({
      kiln::apply("conv", {x, w, b},
                  {{"group", int64_t{2}},
                   {"strides", Ints{2, 1}},
                   {"dilations", Ints{1, 2}},
                   {"pads", Ints{1, 0, 2, 1}}})
          .var(),
      kiln::apply("conv", {x, dw}, {{"group", int64_t{6}}, {"pads", Ints{1, 1, 1, 1}}}).var(),
      kiln::apply("conv", {l, lw}, {{"strides", Ints{3}}, {"auto_pad", std::string("SAME_UPPER")}})
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
      kiln::apply("max_pool", {l}, {{"kernel_shape", Ints{4}}, {"dilations", Ints{2}}}).var(),
      // The last window overhangs the input: only real and padded positions count.
      kiln::apply("average_pool", {x},
                  {{"kernel_shape", Ints{2, 2}},
                   {"strides", Ints{2, 2}},
                   {"ceil_mode", int64_t{1}},
                   {"count_include_pad", int64_t{1}}})
          .var(),
  });
  expect_all_on_device(g);
  expect_matches_reference(
      g,
      {nasty(DType::kFloat32, {3, 6, 13, 11}, rng), nasty(DType::kFloat32, {4, 3, 3, 2}, rng),
       testing::random_tensor(DType::kFloat32, {4}, rng), nasty(DType::kFloat32, {6, 1, 3, 3}, rng),
       nasty(DType::kFloat64, {2, 3, 29}, rng), nasty(DType::kFloat64, {5, 3, 4}, rng)},
      1e-5, 1e-5);
}

// Bias and activation run inside the GEMM or convolution kernel, before the store.
TEST(KILN_CUDA_SUITE, EpiloguesRunInsideTheProducerKernel) {
  std::mt19937 rng(20);
  Graph g("cuda_epilogue");
  Var x = input(g, "x", DType::kFloat32, {37, 70});
  Var w = input(g, "w", DType::kFloat32, {70, 66});
  Var bias = input(g, "bias", DType::kFloat32, {66});
  Var im = input(g, "im", DType::kFloat32, {2, 3, 9, 9});
  Var k = input(g, "k", DType::kFloat32, {5, 3, 3, 3});
  Var kb = input(g, "kb", DType::kFloat32, {5, 1, 1});
  Var bm = input(g, "bm", DType::kFloat64, {3, 9, 4});
  Var bn = input(g, "bn", DType::kFloat64, {4, 7});
  g.set_outputs({relu(matmul(x, w) + bias).var(),
                 sigmoid(kiln::apply("conv", {im, k}, {{"pads", Ints{1, 1, 1, 1}}}) + kb).var(),
                 tanh(matmul(bm, bn) * 0.5).var()});
  const Graph placed = optimized_graph(g, on_cuda());
  int fused = 0;
  for (const auto& n : placed.nodes()) fused += n->op->name() == "cuda:with_epilogue";
  EXPECT_EQ(fused, 3) << "every producer took its epilogue on the device";
  const std::string cu = link_c_module(placed, "test").device_unit.str();
  EXPECT_NE(cu.find("epilogue(r, o, &epi"), std::string::npos)
      << "the GEMM stores through its epilogue";
  EXPECT_NE(cu.find("epilogue(acc, o, &epi"), std::string::npos)
      << "the conv stores through its epilogue";
  expect_matches_reference(g,
                           {nasty(DType::kFloat32, {37, 70}, rng),
                            testing::random_tensor(DType::kFloat32, {70, 66}, rng),
                            testing::random_tensor(DType::kFloat32, {66}, rng),
                            nasty(DType::kFloat32, {2, 3, 9, 9}, rng),
                            testing::random_tensor(DType::kFloat32, {5, 3, 3, 3}, rng),
                            testing::random_tensor(DType::kFloat32, {5, 1, 1}, rng),
                            testing::random_tensor(DType::kFloat64, {3, 9, 4}, rng),
                            testing::random_tensor(DType::kFloat64, {4, 7}, rng)},
                           1e-5, 1e-5);
}

// The held-out style check: every ONNX example runs on the emulator, its compute on the
// device, and matches the CPU backend.
TEST(KILN_CUDA_SUITE, TheOnnxExamplesMatchTheCpuBackend) {
  for (const char* name : {"mlp", "lenet", "resblock", "attention"}) {
    SCOPED_TRACE(name);
    const fs::path dir = fs::path(KILN_EXAMPLES_DIR) / "onnx" / name;
    Graph g = load_model((dir / "model.onnx").string());
    const Graph placed = optimized_graph(g, on_cuda());
    int on_host = 0;
    for (const auto& n : placed.nodes()) {
      const std::string& op = n->op->name();
      if (op.rfind("cuda:", 0) != 0 && op != "to_device" && op != "to_host") {
        ++on_host;
        ADD_FAILURE() << op << " stayed on the CPU";
      }
    }
    std::vector<Tensor> inputs;
    std::mt19937 rng(21);
    for (const Variable* v : g.inputs()) {
      Shape s;
      for (int64_t d : v->type.dims) s.push_back(d == kDynamic ? 2 : d);
      inputs.push_back(testing::random_tensor(v->type.dtype, s, rng, -2, 2));
    }
    std::vector<Tensor> cpu = compile(g)(inputs);
    std::vector<Tensor> cuda = compile(g, on_cuda())(inputs);
    ASSERT_EQ(cpu.size(), cuda.size());
    for (size_t i = 0; i < cpu.size(); ++i)
      EXPECT_TRUE(tensors_close(cuda[i], cpu[i], 1e-4, 1e-5)) << i;
  }
}

// The emulator built with ThreadSanitizer (tests/emulator_race.cpp) runs a softmax kernel
// kiln emitted: clean as emitted, and a TSan data race in the block reduction once the
// __syncthreads between the per-warp partials and their reader is deleted.
TEST(KILN_CUDA_SUITE, ThreadSanitizerCatchesADeletedBarrier) {
  SKIP_ON_GPU();
  Graph g("cuda_race");
  Var x = input(g, "x", DType::kFloat32, {3, 300});
  g.set_outputs({softmax(x).var()});
  LinkedModule m = link_c_module(optimized_graph(g, on_cuda()), "test");
  ASSERT_EQ(m.kernel_names.size(), 1u);
  const std::string source = m.device_unit.str();
  const std::string barrier = "  if (lane == 0) scratch[warp] = v;\n  __syncthreads();\n";
  const size_t at = source.find(barrier);
  ASSERT_NE(at, std::string::npos) << "the block reduction's first barrier moved";
  const fs::path dir = temp_dir("cuda-race");
  auto run = [&](const std::string& text, const std::string& name) {
    const fs::path out = dir / name;
    fs::create_directories(out);
    write_file_atomic(out / "kernels.cu", text);
    return run_process({"/usr/bin/env", "TSAN_OPTIONS=halt_on_error=0 exitcode=66",
                        KILN_EMULATOR_RACE, KILN_EMULATOR_SHIM, (out / "kernels.cu").string(),
                        m.kernel_symbols[0], out.string()});
  };
  auto clean = run(source, "clean");
  EXPECT_EQ(clean.exit_code, 0) << clean.out << clean.err;
  EXPECT_EQ(clean.err.find("ThreadSanitizer"), std::string::npos) << clean.err;
  std::string broken = source;
  broken.replace(at, barrier.size(), "  if (lane == 0) scratch[warp] = v;\n");
  auto race = run(broken, "broken");
  EXPECT_NE(race.exit_code, 0) << race.out;
  EXPECT_NE(race.err.find("WARNING: ThreadSanitizer: data race"), std::string::npos) << race.err;
  EXPECT_NE(race.err.find("kiln_block_reduce"), std::string::npos) << race.err;
}

TEST(KILN_CUDA_SUITE, NonContiguousInputsAreGatheredOnTheWayToTheDevice) {
  std::mt19937 rng(7);
  Graph g("cuda_strided");
  Var x = input(g, "x", DType::kFloat32, {40, 30});
  g.set_outputs({(x * 2.0 + 1.0).var()});
  Tensor t = testing::random_tensor(DType::kFloat32, {40, 30}, rng);
  expect_matches_reference(g, {testing::non_contiguous(t)}, 1e-6, 1e-6);
}

TEST(KILN_CUDA_SUITE, TheMlpExampleMatchesTheCpuBackend) {
  const std::string dir = std::string(KILN_EXAMPLES_DIR) + "/mlp";
  Graph g = load_model(dir + "/mlp.json");
  Tensor x = read_npy(dir + "/input.npy");
  Function cpu = compile(g);
  Function cuda = compile(g, on_cuda());
  EXPECT_TRUE(tensors_close(cuda({x}).at(0), cpu({x}).at(0), 1e-5, 1e-6));
  EXPECT_TRUE(tensors_close(cuda({x}).at(0), read_npy(dir + "/expected.npy"), 1e-4, 1e-5));
  EXPECT_NE(cuda.info().key, cpu.info().key);
  // Kernels equal but for their node's prefix are defined once: the MLP's first two
  // layers (GEMM + bias + relu) share one.
  LinkedModule m = link_c_module(optimized_graph(g, on_cuda()), "test");
  const std::string cu = m.device_unit.str();
  size_t defined = 0;
  for (size_t at = cu.find("__global__ void "); at != std::string::npos;
       at = cu.find("__global__ void ", at + 1))
    ++defined;
  EXPECT_EQ(m.kernel_names.size(), 4u);
  EXPECT_EQ(defined, 3u) << cu;
  EXPECT_EQ(m.kernel_symbols[0], m.kernel_symbols[1]);
  EXPECT_NE(m.kernel_symbols[1], m.kernel_symbols[2]);
  // The module says where it runs; the emulator never passes for a GPU.
  if (!kOnGpu) {
    EXPECT_EQ(cuda.info().device, "kiln CUDA emulator on the CPU (not a GPU)");
  }
  EXPECT_TRUE(cpu.info().device.empty());
}

// Device buffers and the pinned staging blocks of copies (held until the step's event,
// then returned) come from pools: the second run of a function finds every block it needs
// in the free lists and allocates nothing. Under load the first run's device buffers have
// reached the pool up to milliseconds after the run returned (a holder not yet found; the
// blocks do arrive), so the test waits for them, up to a second, before the second run.
TEST(KILN_CUDA_SUITE, ASecondRunAllocatesNoDeviceOrStagingMemory) {
  const std::string dir = std::string(KILN_EXAMPLES_DIR) + "/mlp";
  Function f = compile(load_model(dir + "/mlp.json"), on_cuda());
  Tensor x = read_npy(dir + "/input.npy");
  const Tensor first = f({x}).at(0);
  for (int i = 0; i < 100 && device_pool_stats().cached_bytes == 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  const DevicePoolStats before = device_pool_stats(), staging_before = pinned_pool_stats();
  EXPECT_GT(before.cached_bytes, 0u) << "the first run's buffers went back to the pool";
  EXPECT_GT(staging_before.cached_bytes, 0u) << "staging blocks went back to the pool";
  const Tensor second = f({x}).at(0);
  const DevicePoolStats after = device_pool_stats(), staging_after = pinned_pool_stats();
  EXPECT_EQ(after.allocations, before.allocations);
  EXPECT_GT(after.reuses, before.reuses);
  EXPECT_EQ(staging_after.allocations, staging_before.allocations);
  EXPECT_GT(staging_after.reuses, staging_before.reuses);
  EXPECT_TRUE(tensors_close(second, first, 0, 0)) << "a reused block holds no stale result";
  device_pool_trim();
  EXPECT_EQ(device_pool_stats().cached_bytes, 0u);
}

// Two branches big enough to run apart: to_device, softmax and matmul on one side each,
// then both copied back. Every step is device work.
Graph branched_graph() {
  Graph g("cuda_branches");
  Var x = input(g, "x", DType::kFloat32, {300, 257});
  Var w = input(g, "w", DType::kFloat32, {257, 70});
  g.set_outputs({softmax(x).var(), matmul(x, w).var()});
  return g;
}

// The threaded engine runs a branched program step by step: each device step is an async
// engine function that enqueues on its worker's stream and completes through its event.
// Two runs in flight at once keep their own buffers.
TEST(KILN_CUDA_SUITE, BranchedRunsCompleteAsynchronouslyThroughDeviceEvents) {
  std::mt19937 rng(41);
  const Graph g = branched_graph();
  auto engine = make_engine(EngineKind::kThreaded, 2);
  CompileOptions o = on_cuda();
  o.engine = engine.get();
  Function f = compile(g, o);
  const Tensor x1 = nasty(DType::kFloat32, {300, 257}, rng),
               x2 = nasty(DType::kFloat32, {300, 257}, rng);
  const Tensor w = testing::random_tensor(DType::kFloat32, {257, 70}, rng);
  const uint64_t before = completions_delivered();
  PendingRun r1 = f.run_async({{"x", x1}, {"w", w}});
  PendingRun r2 = f.run_async({{"x", x2}, {"w", w}});
  const std::vector<Tensor> got2 = r2.get(), got1 = r1.get();
  int device_steps = 0;
  const Graph placed = optimized_graph(g, on_cuda());
  for (const auto& n : placed.nodes()) {
    const auto* op = dynamic_cast<const COp*>(n->op.get());
    device_steps += op && op->enqueues_device_work();
  }
  EXPECT_EQ(device_steps, 6) << "x and w to the device, softmax, matmul, two copies back";
  EXPECT_GE(completions_delivered() - before, static_cast<uint64_t>(2 * device_steps))
      << "every device step of both runs completed through its stream's event";
  for (const auto& [got, x] : {std::pair{got1, x1}, std::pair{got2, x2}}) {
    const std::vector<Tensor> want = evaluate_reference(g, {x, w});
    EXPECT_TRUE(tensors_close(got.at(0), want.at(0), 1e-5, 1e-6));
    EXPECT_TRUE(tensors_close(got.at(1), want.at(1), 1e-4, 1e-4));
  }
}

// A kernel that fails on the device is reported at the step's event, asynchronously: the
// run fails naming the node, in a chain (one thread) and on the engine, and the next run
// without the fault is right.
TEST(KILN_CUDA_SUITE, ADeviceFaultFailsTheRunNamingTheNodeAndTheNextRunWorks) {
  SKIP_ON_GPU();
  std::mt19937 rng(42);
  const Graph g = branched_graph();
  auto engine = make_engine(EngineKind::kThreaded, 2);
  CompileOptions o = on_cuda();
  o.engine = engine.get();
  Function branched = compile(g, o);
  Graph chain("cuda_chain");
  Var cx = input(chain, "x", DType::kFloat32, {5, 9});
  chain.set_outputs({exp(softmax(cx)).var()});
  Function chained = compile(chain, on_cuda());
  const Tensor x = nasty(DType::kFloat32, {300, 257}, rng);
  const Tensor w = testing::random_tensor(DType::kFloat32, {257, 70}, rng);
  const Tensor small = testing::random_tensor(DType::kFloat32, {5, 9}, rng);
  // Not a UserError: the device failed, not the model.
  auto device_error_of = [](auto&& fn) {
    try {
      fn();
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  ::setenv("KILN_CUDA_EMULATOR_FAULT", "softmax", 1);
  const std::string on_engine = device_error_of([&] {
    branched.run_async({{"x", x}, {"w", w}}).get();
  });
  const std::string in_chain = device_error_of([&] { chained({small}); });
  ::unsetenv("KILN_CUDA_EMULATOR_FAULT");
  for (const std::string& err : {on_engine, in_chain}) {
    EXPECT_NE(err.find("(cuda:softmax)"), std::string::npos) << err;
    EXPECT_NE(err.find("failed on the device"), std::string::npos) << err;
  }
  const std::vector<Tensor> want = evaluate_reference(g, {x, w});
  const std::vector<Tensor> got = branched.run_async({{"x", x}, {"w", w}}).get();
  EXPECT_TRUE(tensors_close(got.at(0), want.at(0), 1e-5, 1e-6));
  EXPECT_TRUE(
      tensors_close(chained({small}).at(0), evaluate_reference(chain, {small}).at(0), 1e-5, 1e-6));
}

// A device too small for a run fails it naming the node whose output did not fit.
TEST(KILN_CUDA_SUITE, OutOfDeviceMemoryFailsTheRunNamingTheNode) {
  SKIP_ON_GPU();
  std::mt19937 rng(43);
  Graph g("cuda_oom");
  Var x = input(g, "x", DType::kFloat32, {64, 1000});
  g.set_outputs({softmax(x).var()});
  Function f = compile(g, on_cuda());
  const Tensor xs = testing::random_tensor(DType::kFloat32, {64, 1000}, rng);
  device_pool_trim();                                  // no cached block may serve the run
  ::setenv("KILN_CUDA_EMULATOR_MEMORY", "300000", 1);  // x fits (256 KB), its softmax does not
  const std::string err = error_of([&] { f({xs}); });
  ::unsetenv("KILN_CUDA_EMULATOR_MEMORY");
  EXPECT_NE(err.find("(cuda:softmax)"), std::string::npos) << err;
  EXPECT_NE(err.find("out of memory allocating"), std::string::npos) << err;
  EXPECT_TRUE(tensors_close(f({xs}).at(0), evaluate_reference(g, {xs}).at(0), 1e-5, 1e-6));
}

// On a real GPU: an intermediate larger than the card (an outer product of 2^19 x 2^19
// float32, 1 TiB: 128 GiB fit an H200's 141 GB and the product ran) fails the run naming the
// node that could not get its memory, and the device still works afterwards.
TEST(KILN_CUDA_SUITE, AnIntermediateLargerThanTheGpuFailsNamingTheNode) {
  if (!kOnGpu) {
    GTEST_SKIP() << "the emulator's limit: OutOfDeviceMemoryFailsTheRunNamingTheNode";
  }
  std::mt19937 rng(45);
  Graph g("cuda_gpu_oom");
  Var a = input(g, "a", DType::kFloat32, {int64_t{1} << 19, 1});
  Var b = input(g, "b", DType::kFloat32, {1, int64_t{1} << 19});
  g.set_outputs({sum(matmul(a, b), {0, 1}).var()});
  CompileOptions o = on_cuda();
  o.passes = "none";  // the product stays a materialized intermediate
  Function f = compile(g, o);
  const Tensor as = testing::random_tensor(DType::kFloat32, {int64_t{1} << 19, 1}, rng);
  const Tensor bs = testing::random_tensor(DType::kFloat32, {1, int64_t{1} << 19}, rng);
  const std::string err = error_of([&] { f({as, bs}); });
  EXPECT_NE(err.find("(cuda:matmul)"), std::string::npos) << err;
  EXPECT_NE(err.find("out of memory allocating"), std::string::npos) << err;
  Graph small("cuda_after_oom");
  Var x = input(small, "x", DType::kFloat32, {64, 1000});
  small.set_outputs({softmax(x).var()});
  Function s = compile(small, on_cuda());
  const Tensor xs = testing::random_tensor(DType::kFloat32, {64, 1000}, rng);
  EXPECT_TRUE(tensors_close(s({xs}).at(0), evaluate_reference(small, {xs}).at(0), 1e-5, 1e-6));
}

// With device_io the caller passes device tensors and gets device tensors: no transfer
// nodes at the edges, a CPU-only node in between still works, two functions chain on the
// device, and a tensor on the wrong side is refused by name.
TEST(KILN_CUDA_SUITE, DeviceInputsAndOutputsStayOnTheDevice) {
  std::mt19937 rng(44);
  Graph g("cuda_device_io");
  Var x = input(g, "x", DType::kFloat32, {7, 33});
  Var p = apply("cumsum", {exp(x)}, {{"axis", int64_t{1}}});  // no CUDA code: on the CPU
  g.set_outputs({softmax(p).var(), (x * 2.0).var()});
  CompileOptions o = on_cuda();
  o.device_io = true;
  const Graph placed = optimized_graph(g, o);
  int uploads = 0, downloads = 0;
  for (const auto& n : placed.nodes()) {
    uploads += n->op->name() == "to_device";
    downloads += n->op->name() == "to_host";
  }
  EXPECT_EQ(downloads, 1) << "only into the CPU's cumsum";
  EXPECT_EQ(uploads, 1) << "only out of the cumsum";
  EXPECT_EQ(placed.outputs().at(0)->name, g.outputs().at(0)->name) << "outputs keep their names";
  Function f = compile(g, o);
  const Tensor xs = nasty(DType::kFloat32, {7, 33}, rng);
  const std::vector<Tensor> got = f({to_device(xs)});
  ASSERT_EQ(got.size(), 2u);
  const std::vector<Tensor> want = evaluate_reference(g, {xs});
  for (size_t i = 0; i < got.size(); ++i) {
    EXPECT_TRUE(got[i].storage()->on_device()) << i;
    EXPECT_TRUE(tensors_close(to_host(got[i]), want[i], 1e-5, 1e-6)) << i;
  }
  // The second output feeds a second function without leaving the device.
  Graph h("cuda_device_io_next");
  Var y = input(h, "y", DType::kFloat32, {7, 33});
  h.set_outputs({(y + 1.0).var()});
  Function next = compile(h, o);
  const Tensor chained = to_host(next({got[1]}).at(0));
  EXPECT_TRUE(tensors_close(chained, evaluate_reference(h, {want[1]}).at(0), 1e-6, 1e-6));
  EXPECT_NE(error_of([&] { f({xs}); }).find("input 'x': expected a CUDA device tensor"),
            std::string::npos);
  Function on_host = compile(g, on_cuda());
  EXPECT_NE(error_of([&] {
              on_host({to_device(xs)});
            }).find("input 'x': expected a host tensor, got a device tensor"),
            std::string::npos);
  EXPECT_NE(error_of([&] { got[0].load(0); }).find("copy it to the host first"), std::string::npos);
  // One value named by two outputs, and an output that is an input: each output is a
  // device tensor of its own name.
  Graph twice("cuda_device_io_twice");
  Var in = input(twice, "t", DType::kFloat32, {3});
  Var t = exp(in);
  twice.set_outputs({t.var(), t.var(), in.var()});
  Function twice_f = compile(twice, o);
  const Tensor ts = nasty(DType::kFloat32, {3}, rng);
  const std::vector<Tensor> outs = twice_f({to_device(ts)});
  const std::vector<Tensor> outs_want = evaluate_reference(twice, {ts});
  ASSERT_EQ(outs.size(), 3u);
  for (size_t i = 0; i < outs.size(); ++i) {
    EXPECT_TRUE(outs[i].storage()->on_device()) << i;
    EXPECT_TRUE(tensors_close(to_host(outs[i]), outs_want[i], 1e-6, 1e-6)) << i;
  }
}

// A device input read by a CPU node goes down through a host copy of a name of its own,
// while device nodes read it where it is (as an embedding's ids are, where the gather of a
// transformer stays on the host).
TEST(KILN_CUDA_SUITE, ADeviceInputReadOnTheHostKeepsItsName) {
  std::mt19937 rng(45);
  Graph g("cuda_device_io_host_reader");
  Var x = input(g, "x", DType::kFloat32, {5, 9});
  Var c = apply("cumsum", {x}, {{"axis", int64_t{1}}});  // no CUDA code: on the CPU
  g.set_outputs({(c * 3.0).var(), exp(x).var()});
  CompileOptions o = on_cuda();
  o.device_io = true;
  const Graph placed = optimized_graph(g, o);
  EXPECT_EQ(placed.inputs().at(0)->name, "x");
  int downloads = 0;
  for (const auto& n : placed.nodes()) downloads += n->op->name() == "to_host";
  EXPECT_EQ(downloads, 1);
  Function f = compile(g, o);
  const Tensor xs = nasty(DType::kFloat32, {5, 9}, rng);
  const std::vector<Tensor> got = f({to_device(xs)});
  const std::vector<Tensor> want = evaluate_reference(g, {xs});
  ASSERT_EQ(got.size(), 2u);
  for (size_t i = 0; i < got.size(); ++i)
    EXPECT_TRUE(tensors_close(to_host(got[i]), want[i], 1e-5, 1e-6)) << i;
}

// On a caller's stream (PyTorch's current one, in Python) every launch of a run goes onto
// that stream, branches included, in order on the calling thread; without one, none does.
// A handle the device does not know is refused by name.
TEST(KILN_CUDA_SUITE, ARunOnTheCallersStreamEnqueuesEverythingThere) {
  std::mt19937 rng(46);
  // Two independent branches: on the threaded engine such a run goes step by step.
  const Graph g = branched_graph();
  auto engine = make_engine(EngineKind::kThreaded, 2);
  CompileOptions o = on_cuda();
  o.device_io = true;
  o.engine = engine.get();
  Function f = compile(g, o);
  const Tensor xs = nasty(DType::kFloat32, {300, 257}, rng);
  const Tensor ws = testing::random_tensor(DType::kFloat32, {257, 70}, rng);
  const std::vector<Tensor> want = evaluate_reference(g, {xs, ws});
  const Tensor xd = to_device(xs), wd = to_device(ws);
  f({xd, wd});  // weights uploaded, plans made
  ASSERT_EQ(f.stats().stepwise_runs, 1) << "a branched run, step by step on the engine";
  std::unique_ptr<DeviceStream> caller = accelerator().create_stream();
  const uint64_t before = caller->launches();
  const int64_t stepwise = f.stats().stepwise_runs;
  std::vector<Tensor> got;
  {
    CallerStream on(caller->native());
    got = f({xd, wd});
  }
  if (!kOnGpu) EXPECT_GE(caller->launches() - before, 2u) << "the run's kernels went there";
  EXPECT_EQ(f.stats().stepwise_runs, stepwise) << "its steps ran in order on this thread";
  for (size_t i = 0; i < got.size(); ++i)
    EXPECT_TRUE(tensors_close(to_host(got[i]), want[i], 1e-4, 1e-4)) << i;
  const uint64_t after = caller->launches();
  f({xd, wd});
  EXPECT_EQ(caller->launches(), after) << "without a caller's stream kiln uses its own";
  if (!kOnGpu) {
    EXPECT_NE(error_of([] { CallerStream bad(0x3039); }).find("0x3039 is not a live stream"),
              std::string::npos);
    const uintptr_t gone = caller->native();
    caller.reset();
    EXPECT_NE(error_of([&] { CallerStream bad(gone); }).find("is not a live stream"),
              std::string::npos);
  }
}

// Weights go to the device once per function: with device inputs and outputs, a second
// run of the MLP copies nothing through the host (no staging block is even taken).
TEST(KILN_CUDA_SUITE, WeightsAreUploadedOncePerFunction) {
  const std::string dir = std::string(KILN_EXAMPLES_DIR) + "/mlp";
  CompileOptions o = on_cuda();
  o.device_io = true;
  Function f = compile(load_model(dir + "/mlp.json"), o);
  const Tensor x = to_device(read_npy(dir + "/input.npy"));
  const Tensor first = to_host(f({x}).at(0));
  const DevicePoolStats before = pinned_pool_stats();
  const Tensor second = to_host(f({x}).at(0));
  const DevicePoolStats after = pinned_pool_stats();
  EXPECT_EQ(after.allocations + after.reuses, before.allocations + before.reuses);
  EXPECT_TRUE(tensors_close(second, first, 0, 0));
  Function cpu = compile(load_model(dir + "/mlp.json"));
  EXPECT_TRUE(tensors_close(second, cpu({read_npy(dir + "/input.npy")}).at(0), 1e-5, 1e-6));
}

// kiln run --device-io: the module runs on device tensors (the CLI copies them there and
// back) and writes what the CPU backend writes; the graph shows the input on the device.
TEST(KILN_CUDA_SUITE, TheCliRunsAModuleOnDeviceInputsAndOutputs) {
  const std::string dir = std::string(KILN_EXAMPLES_DIR) + "/mlp";
  const std::string out = temp_dir("cuda-device-io");
  const std::vector<std::string> env{"KILN_CUDA_DEVICE=" KILN_CUDA_TEST_DEVICE};
  auto r = kiln_env(env, {"run", "--device", "cuda", "--device-io", dir + "/mlp.json", "--input",
                          "x=" + dir + "/input.npy", "--output-dir", out});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  Function cpu = compile(load_model(dir + "/mlp.json"));
  EXPECT_TRUE(tensors_close(read_npy(out + "/y.npy"), cpu({read_npy(dir + "/input.npy")}).at(0),
                            1e-5, 1e-6));
  auto graph =
      kiln_env(env, {"source", "--graph", "--device", "cuda", "--device-io", dir + "/mlp.json"});
  ASSERT_EQ(graph.exit_code, 0) << graph.err;
  EXPECT_NE(graph.out.find("input x: float32 (?, 784) on cuda"), std::string::npos) << graph.out;
  auto bad = kiln_env(env, {"run", "--device-io", dir + "/mlp.json", "--input",
                            "x=" + dir + "/input.npy", "--output-dir", out});
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_NE(bad.err.find("--device-io needs --device cuda"), std::string::npos) << bad.err;
}

// kiln source --device cuda: the host C first, then kernels.cu under its own banner, holding
// the kernel every launch in the host C names; --help says so.
TEST(KILN_CUDA_SUITE, SourcePrintsTheHostCAndThenTheKernels) {
  const std::string model = std::string(KILN_EXAMPLES_DIR) + "/mlp/mlp.json";
  const std::vector<std::string> env{"KILN_CUDA_DEVICE=" KILN_CUDA_TEST_DEVICE};
  auto r = kiln_env(env, {"source", "--device", "cuda", model});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const size_t banner = r.out.find("/* ==== kernels.cu: the CUDA kernels");
  ASSERT_NE(banner, std::string::npos) << r.out.substr(0, 2000);
  const std::string host = r.out.substr(0, banner), cu = r.out.substr(banner);
  EXPECT_EQ(host.find("__global__"), std::string::npos);
  // Every kernel symbol the host's kernel table names is defined in the device part.
  std::smatch m;
  std::string rest = host;
  int named = 0;
  const std::regex symbol("\"(n[0-9]+_[a-z_0-9]+)\"");
  while (std::regex_search(rest, m, symbol)) {
    EXPECT_NE(cu.find("__global__ void " + m[1].str() + "("), std::string::npos) << m[1];
    ++named;
    rest = m.suffix();
  }
  EXPECT_GT(named, 0) << host.substr(host.size() > 3000 ? host.size() - 3000 : 0);
  // The host-only source has no device part.
  auto cpu = kiln_env({}, {"source", model});
  EXPECT_EQ(cpu.out.find("/* ==== kernels.cu"), std::string::npos);
  EXPECT_NE(kiln_env({}, {"source", "--help"}).out.find("--device"), std::string::npos);
}

TEST(KILN_CUDA_SUITE, KernelsAreStoredBesideTheModuleAndAWarmHitRebuildsNothing) {
  const fs::path cache = fs::path(temp_dir("cuda-cache")) / "cache";
  const std::string model = std::string(KILN_EXAMPLES_DIR) + "/mlp/mlp.json";
  const std::vector<std::string> env{"KILN_CACHE_DIR=" + cache.string(),
                                     "KILN_CUDA_DEVICE=" KILN_CUDA_TEST_DEVICE};
  auto first = kiln_env(env, {"compile", "-v", "--device", "cuda", model});
  ASSERT_EQ(first.exit_code, 0) << first.err;
  EXPECT_NE(first.err.find("cache miss"), std::string::npos) << first.err;
  if (kOnGpu) {
    // The device line names the GPU and never the emulator.
    EXPECT_NE(first.err.find("device  cuda: "), std::string::npos) << first.err;
    EXPECT_EQ(first.err.find("emulator"), std::string::npos) << first.err;
  } else {
    EXPECT_NE(first.err.find("device  cuda: kiln CUDA emulator on the CPU (not a GPU)"),
              std::string::npos)
        << first.err;
  }
  const std::vector<std::string> image =
      kOnGpu ? std::vector<std::string>{"kernels.cubin", "kernels.ptx"}
             : std::vector<std::string>{"kernels.emu.so"};
  int entries = 0;
  for (const auto& shard : fs::directory_iterator(cache / "objects"))
    for (const auto& e : fs::directory_iterator(shard)) {
      if (fs::exists(e.path() / "kernel.o")) continue;  // a CPU node's kernel object
      ++entries;
      for (const char* f : {"module.so", "module.c", "kernels.cu"})
        EXPECT_TRUE(fs::exists(e.path() / f)) << f;
      const std::string meta = read_file(e.path() / "meta.json");
      EXPECT_NE(meta.find("\"cuda.device\""), std::string::npos) << meta;
      for (const auto& f : image) {
        EXPECT_TRUE(fs::exists(e.path() / f)) << f;
        EXPECT_NE(meta.find(f), std::string::npos)
            << "the image is verified like the module: " << f;
      }
    }
  EXPECT_EQ(entries, 1);
  std::vector<std::string> debug = env;
  debug.push_back("KILN_DEBUG=2");
  auto again = kiln_env(debug, {"compile", "-v", "--device", "cuda", model});
  ASSERT_EQ(again.exit_code, 0) << again.err;
  EXPECT_NE(again.err.find("cache hit"), std::string::npos) << again.err;
  EXPECT_EQ(again.err.find("NVRTC 1"), std::string::npos) << "a warm hit never loads NVRTC:\n"
                                                          << again.err;
}

TEST(Cuda, WithoutADeviceTheErrorSaysWhatIsMissingAndHowToEmulate) {
  if (void* h = ::dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL)) {
    ::dlclose(h);
    GTEST_SKIP() << "this machine has a CUDA driver";
  }
  const std::string dir = std::string(KILN_EXAMPLES_DIR) + "/mlp";
  auto r = kiln_env({"KILN_CUDA_DEVICE=", "KILN_CACHE_DIR=" + temp_dir("cuda-none")},
                    {"run", "--device", "cuda", dir + "/mlp.json", "--input",
                     "x=" + dir + "/input.npy", "--output-dir", temp_dir("cuda-none-out")});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("no CUDA driver"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("KILN_CUDA_DEVICE=emulator"), std::string::npos) << r.err;
  auto bad = kiln_env({}, {"compile", "--device", "tpu", dir + "/mlp.json"});
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_NE(bad.err.find("--device expects cpu|cuda"), std::string::npos) << bad.err;
}

// A kernel that does not compile (a C++ compiler for the emulator that breaks relu's line
// the way a broken op would emit it): the error names the node and its fragment line, and
// the failing kernels.cu is kept in the cache's failed/ folder.
TEST(KILN_CUDA_SUITE, AKernelCompileErrorNamesTheNodeAndKeepsTheSource) {
  SKIP_ON_GPU();
  const fs::path base = temp_dir("cuda-broken");
  const fs::path cxx = base / "broken-cxx.sh";
  write_file_atomic(cxx,
                    "#!/bin/sh\n"
                    "case \" $* \" in *\" --version \"*) exec clang++ --version ;; esac\n"
                    "out=\"\"; for a; do case \"$a\" in *kernels.cu) src=\"$a\" ;; esac; done\n"
                    "mkdir -p \"" +
                        (base / "edit").string() +
                        "\"\n"
                        "sed 's/y\\[i\\] = /y[i] = undefined_name + /' \"$src\" > \"" +
                        (base / "edit" / "kernels.cu").string() +
                        "\"\n"
                        "for a; do case \"$a\" in *kernels.cu) set -- \"$@\" \"" +
                        (base / "edit" / "kernels.cu").string() +
                        "\" ;; *) set -- \"$@\" \"$a\" ;; esac; shift; done\n"
                        "exec clang++ \"$@\"\n",
                    0700, true);
  const fs::path model = base / "relu.json";
  write_file_atomic(model,
                    R"({"name": "relu", "inputs": [{"name": "x", "dtype": "float32", "shape": [8]}],
 "nodes": [{"op": "relu", "inputs": ["x"], "outputs": ["y"]}], "outputs": ["y"]})");
  const fs::path cache = base / "cache";
  auto r = kiln_env(
      {"KILN_CACHE_DIR=" + cache.string(), "KILN_CUDA_DEVICE=emulator", "KILN_CXX=" + cxx.string()},
      {"compile", "--device", "cuda", model.string()});
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_NE(r.err.find("CUDA kernels for graph 'relu' failed to compile (emulator)"),
            std::string::npos)
      << r.err;
  EXPECT_NE(r.err.find("(cuda:relu), cuda_code line"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("undefined_name"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("kernels.cu:"), std::string::npos) << r.err;
  int kept = 0;
  for (const auto& e : fs::directory_iterator(cache / "failed")) {
    kept += fs::exists(e.path() / "kernels.cu") && fs::exists(e.path() / "module.c");
  }
  EXPECT_EQ(kept, 1);
  EXPECT_FALSE(fs::exists(cache / "objects") && !fs::is_empty(cache / "objects") && [&] {
    // Good C kernels may be stored; no module is.
    for (const auto& shard : fs::directory_iterator(cache / "objects"))
      for (const auto& e : fs::directory_iterator(shard))
        if (!fs::exists(e.path() / "kernel.o")) return true;
    return false;
  }()) << "nothing is stored for a failed build";
}

TEST(Cuda, BadCudaSettingsNameTheVariable) {
  const std::string model = std::string(KILN_EXAMPLES_DIR) + "/mlp/mlp.json";
  auto device = kiln_env({"KILN_CUDA_DEVICE=tpu"}, {"source", "--device", "cuda", model});
  EXPECT_EQ(device.exit_code, 1);
  EXPECT_NE(device.err.find("KILN_CUDA_DEVICE='tpu' is not a device"), std::string::npos)
      << device.err;
  if (void* h = ::dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL)) {
    ::dlclose(h);
    GTEST_SKIP() << "this machine has a CUDA driver: the GPU, not KILN_CUDA_ARCH, picks the arch";
  }
  auto arch = kiln_env({"KILN_CUDA_DEVICE=", "KILN_CUDA_ARCH=volta"},
                       {"source", "--device", "cuda", model});
  EXPECT_EQ(arch.exit_code, 1);
  EXPECT_NE(arch.err.find("KILN_CUDA_ARCH='volta' is not an sm_XX architecture"), std::string::npos)
      << arch.err;
  auto nvrtc = kiln_env({"KILN_CUDA_DEVICE=", "KILN_NVRTC=/nonexistent/libnvrtc.so"},
                        {"source", "--device", "cuda", model});
  EXPECT_EQ(nvrtc.exit_code, 1);
  EXPECT_NE(nvrtc.err.find("NVRTC not found (tried /nonexistent/libnvrtc.so)"), std::string::npos)
      << nvrtc.err;
}

// kernels.cu of a graph placed on CUDA, as compile() writes it.
std::string kernels_of(const Graph& g, const std::optional<std::string>& passes = std::nullopt) {
  CompileOptions o = on_cuda();
  o.passes = passes;
  return link_c_module(optimized_graph(g, o), "test").device_unit.str();
}

// sizeof(kiln_cuda_nd): numel, ndim, contiguous, shape[8], strides[12][8].
constexpr int kIndexMapBytes = 8 + 4 + 4 + 8 * 8 + 12 * 8 * 8;

// KILN_CUDA_OPT=fast compiles with NVRTC's fast-compile level: a different key (NVRTC's
// options are a key component), kernels NVRTC accepts, and a bad level named.
TEST(Cuda, TheNvrtcOptimisationLevelIsPartOfTheKey) {
  if (void* h = ::dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL)) {
    ::dlclose(h);
    GTEST_SKIP() << "this machine has a CUDA driver: kiln source would use the GPU's arch";
  }
  const std::string model = std::string(KILN_EXAMPLES_DIR) + "/mlp/mlp.json";
  auto key_of = [&](const std::string& level) {
    auto r = kiln_env({"KILN_CUDA_DEVICE=", "KILN_CUDA_OPT=" + level},
                      {"source", "--device", "cuda", model});
    EXPECT_EQ(r.exit_code, 0) << r.err;
    std::smatch m;
    static const std::regex key(R"(/\* key ([0-9a-f]{64}) \*/)");
    return std::regex_search(r.out, m, key) ? m[1].str() : std::string("none");
  };
  const std::string full = key_of("full"), fast = key_of("fast");
  EXPECT_NE(full, "none");
  EXPECT_NE(full, fast);
  EXPECT_EQ(key_of(""), full) << "full is the default";
  auto bad =
      kiln_env({"KILN_CUDA_DEVICE=", "KILN_CUDA_OPT=turbo"}, {"source", "--device", "cuda", model});
  EXPECT_EQ(bad.exit_code, 1);
  EXPECT_NE(bad.err.find("KILN_CUDA_OPT='turbo' is not a CUDA optimisation level (full or fast)"),
            std::string::npos)
      << bad.err;
  const std::string source = kernels_of(load_model(model));
  NvrtcResult r =
      Nvrtc::get().compile(source, "kernels.cu", "sm_90",
                           {"--std=c++17", "-default-device", "--diag-suppress=177", "-Ofc=max"});
  EXPECT_TRUE(r.ok) << r.log;
  EXPECT_FALSE(r.cubin.empty());
}

// The cache key's NVRTC fingerprint is remembered per library file in the user's cache, so
// a warm hit in a new process need not load NVRTC: the memo is written on first use, read
// back (a forged value with the right identity is what comes back, proving it is read), and
// ignored once it names another file.
TEST(CudaNvrtc, TheFingerprintIsRememberedPerLibraryFile) {
  SKIP_ON_GPU();
  const std::string home = temp_dir("nvrtc-memo");
  const char* old = std::getenv("XDG_CACHE_HOME");
  const std::string saved = old ? old : "";
  ::setenv("XDG_CACHE_HOME", home.c_str(), 1);
  const std::string real = Nvrtc::key_fingerprint();
  EXPECT_EQ(real, Nvrtc::get().fingerprint());
  std::vector<fs::path> memos;
  for (const auto& e : fs::directory_iterator(fs::path(home) / "kiln" / "toolchains")) {
    if (e.path().filename().string().rfind("nvrtc-", 0) == 0) memos.push_back(e.path());
  }
  ASSERT_EQ(memos.size(), 1u) << "one memo for the one library";
  const std::string text = read_file(memos[0]);
  const std::string identity = text.substr(text.find('\n') + 1);
  EXPECT_EQ(text.substr(0, text.find('\n')), real);
  EXPECT_NE(identity.find(fs::canonical(Nvrtc::get().path()).string()), std::string::npos)
      << identity;
  write_file_atomic(memos[0], "nvrtc forged\n" + identity);
  EXPECT_EQ(Nvrtc::key_fingerprint(), "nvrtc forged") << "read from the memo";
  write_file_atomic(memos[0], "nvrtc forged\n/elsewhere/libnvrtc.so\n1\n2.3\n4");
  EXPECT_EQ(Nvrtc::key_fingerprint(), real) << "a memo for another file is not trusted";
  if (old) {
    ::setenv("XDG_CACHE_HOME", saved.c_str(), 1);
  } else {
    ::unsetenv("XDG_CACHE_HOME");
  }
}

TEST(CudaNvrtc, EveryKernelCompilesForSm80AndSm90WithoutSpillsOrIndexMapCopies) {
  SKIP_ON_GPU();
  const Nvrtc& nvrtc = Nvrtc::get();  // scripts/setup installs NVRTC: missing it fails here
  std::vector<Graph> graphs;
  graphs.push_back(scalar_ops_graph(DType::kFloat32, false));
  graphs.push_back(scalar_ops_graph(DType::kFloat64, false));
  graphs.push_back(scalar_ops_graph(DType::kInt32, true));
  graphs.push_back(scalar_ops_graph(DType::kInt64, true));
  {
    Graph g("nvrtc_mixed");
    Var x = input(g, "x", DType::kFloat32, {kDynamic, 300});
    Var w = input(g, "w", DType::kFloat32, {300, 64});
    Var d = input(g, "d", DType::kFloat64, {kDynamic, 300});
    Var i8 = input(g, "i8", DType::kInt8, {kDynamic, 300});
    g.set_outputs({softmax(matmul(x, w)).var(), log_softmax(d).var(), sum(x, {1}).var(),
                   max(d, {0}).var(), mean(x).var(), sum(i8, {1}).var(),
                   (tanh(x * 2.0) + gelu(x)).var(), gemm(x, w, 1.0, false, false).var()});
    graphs.push_back(std::move(g));
  }
  {
    Graph g("nvrtc_movement_window");
    Var x = input(g, "x", DType::kFloat32, {kDynamic, 6, 13, 11});
    Var w = input(g, "w", DType::kFloat32, {4, 3, 3, 3});
    Var d = input(g, "d", DType::kFloat64, {kDynamic, 2, 13, 11});
    Var ids = input(g, "ids", DType::kInt32, {5});
    Var bias = input(g, "bias", DType::kFloat32, {4, 1, 1});
    Var bm = input(g, "bm", DType::kFloat64, {3, 7, 11});
    g.set_outputs({
        relu(kiln::apply("conv", {x, w}, {{"group", int64_t{2}}}) + bias).var(),
        kiln::apply("max_pool", {x}, {{"kernel_shape", Ints{3, 3}}}).var(),
        kiln::apply("average_pool", {d}, {{"kernel_shape", Ints{2, 2}}}).var(),
        transpose(x, {0, 2, 3, 1}).var(),
        concat({d, d}, 1).var(),
        kiln::apply(
            "slice", {d},
            {{"starts", Ints{-1}}, {"ends", Ints{0}}, {"steps", Ints{-2}}, {"axes", Ints{3}}})
            .var(),
        kiln::apply("gather", {x, ids}, {{"axis", int64_t{1}}}).var(),
        gelu(matmul(bm, transpose(bm, {0, 2, 1})) + 1.0).var(),
    });
    graphs.push_back(std::move(g));
  }
  {
    Graph g("nvrtc_sampling");
    Var x = input(g, "x", DType::kFloat32, {kDynamic, 3, 16, 16});
    Var grid = input(g, "grid", DType::kFloat32, {kDynamic, 8, 8, 2});
    Var d = input(g, "d", DType::kFloat64, {1, 2, 5, 5});
    Var gd = input(g, "gd", DType::kFloat64, {1, 4, 4, 2});
    g.set_outputs(
        {kiln::apply("grid_sample", {x, grid}, {{"mode", std::string("bicubic")}}).var(),
         kiln::apply("grid_sample", {x, grid}, {{"padding_mode", std::string("reflection")}}).var(),
         kiln::apply("grid_sample", {d, gd}, {{"mode", std::string("nearest")}}).var(),
         kiln::apply("pad", {x},
                     {{"mode", std::string("reflect")}, {"pads", Ints{0, 0, 1, 2, 0, 0, 3, 4}}})
             .var(),
         kiln::apply("pad", {d}, {{"pads", Ints{0, 1, 1, 1, 0, 1, 1, 1}}, {"value", 2.5}}).var(),
         kiln::apply("random_normal", {x}, {{"seed", int64_t{2}}}).var(),
         kiln::apply("roi_align",
                     {x, input(g, "rois", DType::kFloat32, {kDynamic, 4}),
                      input(g, "bi", DType::kInt64, {kDynamic})},
                     {{"output_height", int64_t{7}}, {"output_width", int64_t{7}}})
             .var(),
         kiln::apply("multinomial", {kiln::apply("reshape", {gd}, {{"shape", Ints{4, 8}}})},
                     {{"dtype", std::string("int64")}})
             .var(),
         kiln::apply("bernoulli", {d}, {{"dtype", std::string("float64")}}).var(),
         kiln::apply_multi("dropout_train", {x}, {{"ratio", 0.25}})[1].var()});
    graphs.push_back(std::move(g));
  }
  // Transposed convolutions, lowered (the fold kernel, 2-D and 3-D) and direct.
  Graph tg("nvrtc_transposed");
  {
    Var x = input(tg, "x", DType::kFloat32, {kDynamic, 6, 9, 9});
    Var w = input(tg, "w", DType::kFloat32, {6, 4, 3, 3});
    Var b = input(tg, "b", DType::kFloat32, {8});
    Var d = input(tg, "d", DType::kFloat64, {1, 2, 3, 4, 3});
    Var wd = input(tg, "wd", DType::kFloat64, {2, 3, 2, 3, 2});
    tg.set_outputs({kiln::apply("conv_transpose", {x, w, b},
                                {{"group", int64_t{2}},
                                 {"strides", Ints{2, 2}},
                                 {"pads", Ints{1, 1, 1, 1}},
                                 {"output_padding", Ints{1, 1}}})
                        .var(),
                    kiln::apply("conv_transpose", {d, wd}, {{"strides", Ints{2, 1, 2}}}).var()});
  }
  std::vector<std::pair<std::string, std::string>> sources;
  for (const auto& g : graphs) sources.emplace_back(g.name(), kernels_of(g));
  sources.emplace_back(tg.name(), kernels_of(tg));
  sources.emplace_back(tg.name() + " (-lower)", kernels_of(tg, "-lower"));
  EXPECT_NE(sources[sources.size() - 2].second.find("conv_transpose_fold("), std::string::npos);
  EXPECT_NE(sources.back().second.find("conv_transpose("), std::string::npos);
  static const std::regex entry(R"(Compiling entry function '(\w+)')");
  static const std::regex spills(
      R"((\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads)");
  for (const auto& [name, source] : sources) {
    for (const char* arch : {"sm_80", "sm_90"}) {
      NvrtcResult r =
          nvrtc.compile(source, "kernels.cu", arch,
                        {"--std=c++17", "-default-device", "--diag-suppress=177", "-Xptxas=-v"});
      ASSERT_TRUE(r.ok) << name << " for " << arch << ":\n" << r.log;
      EXPECT_FALSE(r.cubin.empty());
      // Every function's report: no spills, and no stack frame that could hold an index
      // map (a kernel without __grid_constant__ copies its kiln_cuda_nd, 848 bytes, into
      // local memory; a math helper's small table is allowed).
      int entries = 0;
      std::string fn;
      std::istringstream lines(r.log);
      for (std::string line; std::getline(lines, line);) {
        std::smatch m;
        if (std::regex_search(line, m, entry)) {
          fn = m[1];
          ++entries;
        } else if (std::regex_search(line, m, spills)) {
          EXPECT_LT(std::stoi(m[1]), kIndexMapBytes)
              << fn << " copies an index map to local memory (" << arch << ")";
          EXPECT_EQ(m[2], "0") << fn << " spills stores (" << arch << "): " << line;
          EXPECT_EQ(m[3], "0") << fn << " spills loads (" << arch << ")";
        }
      }
      EXPECT_GT(entries, 0) << "ptxas reported no entry functions:\n" << r.log;
    }
  }
}

TEST(CudaNvrtc, ACompileErrorNamesTheNodeAndTheFragmentLine) {
  SKIP_ON_GPU();
  // A graph placed normally, its kernels.cu edited as a broken op would emit it.
  Graph g("broken");
  Var x = input(g, "x", DType::kFloat32, {8});
  g.set_outputs({relu(x).var()});
  const Graph placed = optimized_graph(g, on_cuda());
  LinkedModule m = link_c_module(placed, "test");
  std::string source = m.device_unit.str();
  const size_t at = source.find("y[i] = ");
  ASSERT_NE(at, std::string::npos);
  source.replace(at, 7, "y[i] = undefined_name + ");
  NvrtcResult r =
      Nvrtc::get().compile(source, "kernels.cu", "sm_90", {"--std=c++17", "-default-device"});
  ASSERT_FALSE(r.ok);
  EXPECT_NE(r.log.find("undefined_name"), std::string::npos) << r.log;
  // The edit kept every line where it was, so the source map still applies.
  std::vector<Diagnostic> diags = cuda_diagnostics(r.log, m.device_unit);
  ASSERT_FALSE(diags.empty()) << r.log;
  EXPECT_EQ(diags[0].severity, "error");
  ASSERT_GE(diags[0].origin.node, 0);
  EXPECT_EQ(placed.nodes().at(static_cast<size_t>(diags[0].origin.node))->op->name(), "cuda:relu");
  EXPECT_EQ(diags[0].origin.fragment, "cuda_code");
  EXPECT_GT(diags[0].origin.fragment_line, 1);
  EXPECT_NE(diags[0].source_line.find("y[i] = "), std::string::npos) << diags[0].source_line;
}

}  // namespace
}  // namespace kiln
