// The rewrite passes: what each does to a graph, the pipeline's controls, and that the
// optimized graph computes what the unoptimized one does.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <random>

#include "compiler/compile.h"
#include "ops/builders.h"
#include "ops/c/conv_pack.h"
#include "ops/c/gemm_pack.h"
#include "ops/c/qgemm_pack.h"
#include "ops/fused_elementwise.h"
#include "ops/reference.h"
#include "ops/registry.h"
#include "rewrite/constant_recipe.h"
#include "rewrite/passes.h"
#include "rewrite/pipeline.h"
#include "tests/helpers.h"
#include "util/log.h"
#include "util/strings.h"

namespace kiln {
namespace {

int count_ops(const Graph& g, const std::string& op) {
  int n = 0;
  for (const auto& node : g.nodes()) n += node->op->name() == op;
  return n;
}

// Compiles with `passes` and checks the outputs against the unoptimized reference.
void expect_same_results(const Graph& g, const std::vector<Tensor>& inputs,
                         const std::string& passes, double rtol = 1e-4, double atol = 1e-5) {
  auto want = evaluate_reference(g, inputs);
  CompileOptions options;
  options.passes = passes;
  auto got = compile(g, options)(inputs);
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    EXPECT_TRUE(testing::tensors_close(got[i], want[i], rtol, atol))
        << "output " << i << " with passes '" << passes << "'\n"
        << optimized_graph(g, options).to_string();
  }
}

TEST(Rewrite, FoldingEvaluatesConstantSubgraphsAndKeepsParametersParameters) {
  Graph g("fold");
  Var x = input(g, "x", DType::kFloat32, {kDynamic, 3});
  Var c = constant(g, Tensor::from_doubles(DType::kFloat32, {3}, {1, 2, 3}), "c");
  Var w(&g, g.add_parameter(Tensor::from_doubles(DType::kFloat32, {3}, {4, 5, 6}), "w"));
  g.set_outputs({x * exp(c) + sqrt(w)});
  Graph f = fold_constants(g);
  EXPECT_EQ(count_ops(f, "exp"), 0);
  EXPECT_EQ(count_ops(f, "sqrt"), 0);
  bool parameter_found = false;
  for (const Variable* v : f.constants()) {
    if (v->value->load(0) == 2.0) parameter_found = v->parameter;  // sqrt(4)
  }
  EXPECT_TRUE(parameter_found) << "a value folded from a parameter must stay a parameter";
  expect_same_results(g, {Tensor::from_doubles(DType::kFloat32, {2, 3}, {1, 2, 3, 4, 5, 6})}, "");
}

// Batch norm as the ONNX importer writes it: a chain over the statistics (parameters) that
// one folding pass must evaluate whole, or every run recomputes it.
TEST(Rewrite, FoldingEvaluatesAWholeChainOfParametersInOnePass) {
  Graph g("chain");
  Var x = input(g, "x", DType::kFloat32, {kDynamic, 3, 2, 2});
  Var var = parameter(g, Tensor::from_doubles(DType::kFloat32, {3}, {0.5, 1, 4}), "var");
  Var gamma = parameter(g, Tensor::from_doubles(DType::kFloat32, {3}, {1, 2, 3}), "gamma");
  Var scale = reshape(gamma / sqrt(var + 1e-5), {-1, 1, 1});
  g.set_outputs({x * scale});
  Graph f = fold_constants(g);
  EXPECT_EQ(f.nodes().size(), 1u) << f.to_string();
  EXPECT_EQ(count_ops(f, "mul"), 1) << f.to_string();
  std::mt19937 rng(1);
  expect_same_results(g, {testing::random_tensor(DType::kFloat32, {2, 3, 2, 2}, rng)}, "");
}

TEST(Rewrite, SimplifyRemovesIdentities) {
  Graph g("simplify");
  Var x = input(g, "x", DType::kFloat32, {2, 3});
  Var t = transpose(transpose(x, {1, 0}), {1, 0});
  Var y = log(exp(-(-(t * 1.0 + 0.0))));
  g.set_outputs({y});
  Graph s = simplify(g);
  // Everything cancels: the output is a copy of x under the output's own name.
  EXPECT_EQ(count_ops(remove_dead(s), "reshape"), 1) << s.to_string();
  EXPECT_EQ(remove_dead(s).nodes().size(), 1u) << remove_dead(s).to_string();
  EXPECT_EQ(remove_dead(s).outputs()[0]->name, y.var()->name);
  // x * 2 is not an identity; broadcasting by a constant 1 of larger shape is not either.
  Graph h("kept");
  Var a = input(h, "a", DType::kFloat32, {3});
  Var ones = constant(h, Tensor::from_doubles(DType::kFloat32, {2, 3}, {1, 1, 1, 1, 1, 1}));
  h.set_outputs({a * 2.0, a * ones});
  EXPECT_EQ(count_ops(simplify(h), "mul"), 2);
  expect_same_results(g, {Tensor::from_doubles(DType::kFloat32, {2, 3}, {1, -2, 3, 4, 5, 6})}, "");
  // A pad of zeros (as exporters write) is x; a real pad stays.
  Graph p("pads");
  Var px = input(p, "x", DType::kFloat32, {2, 3});
  Var zero = apply("pad", {px}, {{"pads", std::vector<int64_t>{0, 0, 0, 0}}});
  p.set_outputs({relu(zero), apply("pad", {px}, {{"pads", std::vector<int64_t>{0, 1, 0, 0}}})});
  EXPECT_EQ(count_ops(simplify(p), "pad"), 1) << simplify(p).to_string();
  expect_same_results(p, {Tensor::from_doubles(DType::kFloat32, {2, 3}, {1, -2, 3, 4, 5, 6})}, "");
  // A transpose moving only axes of size 1 keeps the elements' order: a reshape. One that
  // swaps two longer axes stays, and so does one over a dynamic axis.
  Graph tr("transposes");
  Var tx = input(tr, "x", DType::kFloat32, {1, 3, 1, 2});
  Var td = input(tr, "d", DType::kFloat32, {kDynamic, 1, 2});
  tr.set_outputs({relu(transpose(tx, {2, 1, 3, 0})), relu(transpose(tx, {0, 3, 2, 1})),
                  relu(transpose(td, {1, 0, 2}))});
  const Graph ts = simplify(tr);
  EXPECT_EQ(count_ops(ts, "reshape"), 1) << ts.to_string();
  EXPECT_EQ(count_ops(ts, "transpose"), 2) << ts.to_string();
  expect_same_results(tr,
                      {Tensor::from_doubles(DType::kFloat32, {1, 3, 1, 2}, {1, -2, 3, 4, 5, -0.0}),
                       Tensor::from_doubles(DType::kFloat32, {3, 1, 2}, {6, 5, 4, 3, 2, 1})},
                      "");
}

// A zero Pad of H and W in front of a convolution (TensorFlow-style "same" padding, as
// EfficientNetV2's exports write it) becomes the convolution's own pads: no pad step, and the
// blocked region does not break around it. A pad of another value, of the channels, or before
// a convolution with auto_pad stays; a pad read elsewhere too stays for that reader.
TEST(Rewrite, SimplifyFoldsZeroPadsIntoConvolutions) {
  std::mt19937 rng(83);
  Graph g("pad_conv");
  Var x = input(g, "x", DType::kFloat32, {kDynamic, 8, 13, 12});
  Var w = constant(g, testing::random_tensor(DType::kFloat32, {8, 1, 3, 3}, rng), "w");
  Var wf = constant(g, testing::random_tensor(DType::kFloat32, {4, 8, 3, 3}, rng), "wf");
  Var w1 = constant(g, testing::random_tensor(DType::kFloat32, {4, 8, 3}, rng), "w1");
  Var wc = constant(g, testing::random_tensor(DType::kFloat32, {4, 10, 3, 3}, rng), "wc");
  auto pad = [&](Var v, std::vector<int64_t> pads, double value = 0.0) {
    return apply("pad", {v}, {{"pads", pads}, {"value", value}});
  };
  const std::vector<int64_t> same{0, 0, 0, 1, 0, 0, 1, 1};  // bottom and right, 1 left
  Var shared = pad(x, same);
  Var l = input(g, "l", DType::kFloat32, {2, 8, 17});
  g.set_outputs({
      // Depthwise at stride 2 with pads of its own: they add up.
      apply("conv", {shared, w},
            {{"group", int64_t{8}},
             {"strides", std::vector<int64_t>{2, 2}},
             {"pads", std::vector<int64_t>{1, 0, 0, 0}}})
          .var(),
      relu(shared).var(),  // the padded value is read here too: that pad stays
      apply("conv", {pad(x, same, 1.0), wf}, {}).var(),
      apply("conv", {pad(x, {0, 1, 0, 0, 0, 1, 0, 0}), wc},
            {{"pads", std::vector<int64_t>{1, 1, 1, 1}}})
          .var(),
      apply("conv", {pad(x, same), wf}, {{"auto_pad", std::string("SAME_UPPER")}}).var(),
      apply("conv", {pad(l, {0, 0, 2, 0, 0, 3}), w1}, {}).var(),  // 1-D
  });
  const Graph s = remove_dead(simplify(g));
  // Left: the shared pad (for relu), the pad of ones, the pad of the channels, the one before
  // auto_pad.
  EXPECT_EQ(count_ops(s, "pad"), 4) << s.to_string();
  int grown = 0;
  for (const auto& node : s.nodes()) {
    if (node->op->name() != "conv" || node->inputs[0]->kind != VarKind::kInput) continue;
    const auto pads = attr_ints(node->op->props(), "pads");
    grown += pads == std::vector<int64_t>{1, 1, 1, 1} || pads == std::vector<int64_t>{2, 3};
  }
  EXPECT_EQ(grown, 2) << s.to_string();
  Tensor xs = testing::random_tensor(DType::kFloat32, {2, 8, 13, 12}, rng);
  xs.store(5, std::nan(""));
  xs.store(40, -std::numeric_limits<double>::infinity());
  const std::vector<Tensor> in{xs, testing::random_tensor(DType::kFloat32, {2, 8, 17}, rng)};
  expect_same_results(g, in, "");
  expect_same_results(g, in, "-simplify");
}

// transpose -> reshape -> transpose becomes one transpose between reshapes where the reshape
// only merges and splits axes: blocked -> NCHW -> NHWC (ConvNeXt's exit from a region), NHWC ->
// NCHW -> blocked (its way back), with size-1 axes, exactly the same values. A reshape that
// regroups elements across axes, and a chain whose middle value is read elsewhere, stay.
TEST(Rewrite, ComposeReordersMakesOneTransposeOfTwo) {
  std::mt19937 rng(89);
  Graph g("reorders");
  Var blocked = input(g, "blocked", DType::kFloat32, {2, 4, 5, 3, 8});
  Var nhwc = input(g, "nhwc", DType::kFloat32, {1, 5, 3, 32});
  Var odd = input(g, "odd", DType::kFloat32, {6, 4});
  Var out1 = transpose(reshape(transpose(blocked, {0, 1, 4, 2, 3}), {2, 32, 5, 3}), {0, 2, 3, 1});
  Var out2 = transpose(reshape(transpose(nhwc, {0, 3, 1, 2}), {1, 4, 8, 5, 3}), {0, 1, 3, 4, 2});
  Var out3 = transpose(reshape(transpose(odd, {1, 0}), {6, 4}), {1, 0});  // (4, 6) -> (6, 4)
  Var shared = transpose(blocked, {0, 1, 4, 2, 3});
  Var out4 = transpose(reshape(shared, {2, 32, 5, 3}), {0, 2, 3, 1});
  g.set_outputs({relu(out1), relu(out2), relu(out3), relu(out4), relu(shared)});
  const Graph c = remove_dead(compose_reorders(g));
  // One each for the first two, two for the regrouping reshape, and the shared chain's two.
  EXPECT_EQ(count_ops(c, "transpose"), 6) << c.to_string();
  const std::vector<Tensor> in{testing::random_tensor(DType::kFloat32, {2, 4, 5, 3, 8}, rng),
                               testing::random_tensor(DType::kFloat32, {1, 5, 3, 32}, rng),
                               testing::random_tensor(DType::kFloat32, {6, 4}, rng)};
  const auto want = evaluate_reference(g, in), got = evaluate_reference(c, in);
  for (size_t i = 0; i < want.size(); ++i)
    EXPECT_TRUE(testing::tensors_close(got[i], want[i], 0, 0)) << "output " << i;
  expect_same_results(g, in, "");
}

// Checks out[i] against the C library's powf(xs[i], power): within an ulp, with its NaN,
// infinities, signed zeros, overflow and underflow.
void expect_power_of(const Tensor& xs, const Tensor& out, float power) {
  auto ordered = [](float v) {  // float bits in the order of the values they encode
    int32_t b;
    std::memcpy(&b, &v, 4);
    return b < 0 ? int64_t{INT32_MIN} - b : int64_t{b};
  };
  for (int64_t i = 0; i < xs.numel(); ++i) {
    const float v = static_cast<float>(xs.load(i));
    const float want = std::pow(v, power);
    const float got = static_cast<float>(out.load(i));
    SCOPED_TRACE("x = " + std::to_string(v) + ", power " + std::to_string(power));
    if (std::isnan(want)) {
      EXPECT_TRUE(std::isnan(got));
    } else if (std::isinf(want) || want == 0) {
      EXPECT_EQ(got, want);
      EXPECT_EQ(std::signbit(got), std::signbit(want));
    } else {
      EXPECT_LE(std::abs(ordered(got) - ordered(want)), 1) << got << " vs " << want;
    }
  }
}

// Values that break a power: NaN, infinities, signed zeros, overflow, underflow, then random
// ones, `n` in all.
Tensor power_bases(int64_t n, std::mt19937& rng) {
  const float inf = std::numeric_limits<float>::infinity();
  const std::vector<float> special{std::nanf(""), inf,    -inf,    0.0f, -0.0f, 1e20f,
                                   -1e13f,        1e-40f, -1e-30f, 3.0f, -2.5f, 1.0000001f};
  Tensor xs = testing::random_tensor(DType::kFloat32, {n}, rng, -4, 4);
  for (size_t i = 0; i < special.size(); ++i) xs.store(static_cast<int64_t>(i), special[i]);
  return xs;
}

// pow(x, 2) and pow(x, 3) with a constant exponent become products (a libm call per element
// kept GPT-2's GELU from vectorising): within an ulp of the C library's powf, the same NaN,
// infinities, signed zeros, overflow and underflow. Other exponents stay.
TEST(Rewrite, SimplifyTurnsSquaresAndCubesIntoProducts) {
  Graph g("powers");
  Var x = input(g, "x", DType::kFloat32, {37});
  Var y = input(g, "y", DType::kFloat32, {37});
  auto exponent = [&](double e) {
    return constant(g, Tensor::from_doubles(DType::kFloat32, {}, {e}));
  };
  g.set_outputs({apply("pow", {x, exponent(2)}, {}).var(), apply("pow", {x, exponent(3)}, {}).var(),
                 apply("pow", {x, exponent(2.5)}, {}).var(), apply("pow", {x, y}, {}).var()});
  const Graph s = remove_dead(simplify(g));
  EXPECT_EQ(count_ops(s, "pow"), 2) << s.to_string();
  EXPECT_EQ(count_ops(s, "mul"), 3) << s.to_string();
  std::mt19937 rng(97);
  const Tensor xs = power_bases(37, rng);
  const Tensor ys = testing::random_tensor(DType::kFloat32, {37}, rng, 0.5, 2);
  Function f = compile(g);
  const auto out = f({xs, ys});
  expect_power_of(xs, out[0], 2);
  expect_power_of(xs, out[1], 3);
}

// An exponent that is a weight (onnxruntime's quantizer turns GPT-2's Pow exponent into an
// initializer) stays a pow, but its loop is versioned on the value: 2 and 3 run as products, any
// other value through libm. Each version, alone and fused into a chain, over a length that
// leaves a tail past the vector width, against powf; new weights take the other versions.
TEST(Rewrite, WeightExponentsRunTheirPowerAsProducts) {
  auto build = [](Graph& g, float power) {
    Var x = input(g, "x", DType::kFloat32, {203});
    Var z = input(g, "z", DType::kFloat32, {203});  // the same values: z's pow is fused
    Var e = parameter(g, Tensor::from_doubles(DType::kFloat32, {}, {power}), "e");
    Var half = constant(g, Tensor::from_doubles(DType::kFloat32, {}, {0.5}));
    g.set_outputs(
        {apply("pow", {x, e}, {}).var(), apply("mul", {apply("pow", {z, e}, {}), half}, {}).var()});
  };
  std::mt19937 rng(5);
  const Tensor xs = power_bases(203, rng);
  for (float power : {3.0f, 2.0f, 2.5f, -1.0f, 0.0f}) {
    Graph g("weight_powers");
    build(g, power);
    const std::string src = generate_source(g);
    EXPECT_NE(src.find("fused_elementwise{program=\"pow"), std::string::npos) << src;
    EXPECT_NE(src.find("kiln_version_on == ((float)3.0)"), std::string::npos) << src;
    const auto out = compile(g)({xs, xs});
    expect_power_of(xs, out[0], power);
    Tensor doubled = out[1];
    for (int64_t i = 0; i < doubled.numel(); ++i) doubled.store(i, doubled.load(i) * 2);
    expect_power_of(xs, doubled, power);
  }
}

// An arithmetic op between a transpose and a constant varying along one axis (ConvNeXt's layer
// scale after its NHWC -> NCHW transpose) moves before the transpose, the constant reshaped to
// the transpose's input: the transpose then meets the next reorder. Operand order is kept
// (c - t, t / c). A transpose read twice, a constant varying along two axes, and a run-time
// operand stay. Same values, bit for bit.
TEST(Rewrite, SimplifyMovesArithmeticBeforeATranspose) {
  std::mt19937 rng(97);
  Graph g("before_transpose");
  Var x = input(g, "x", DType::kFloat32, {2, 5, 3, 8});
  Var r = input(g, "r", DType::kFloat32, {8, 1, 1});
  auto nchw = [&] { return transpose(x, {0, 3, 1, 2}); };  // (2, 8, 5, 3)
  Var c = parameter(g, testing::random_tensor(DType::kFloat32, {8, 1, 1}, rng), "c");
  Var d = constant(g, testing::random_tensor(DType::kFloat32, {1, 8, 1, 1}, rng, 0.5, 2), "d");
  Var two = constant(g, testing::random_tensor(DType::kFloat32, {8, 5, 1}, rng), "two");
  Var shared = nchw();
  g.set_outputs({relu(nchw() * c), relu(c - nchw()), relu(nchw() / d), relu(shared * c),
                 relu(shared), relu(nchw() * two), relu(nchw() + r)});
  const Graph s = remove_dead(simplify(g));
  int moved = 0;
  for (const auto& node : s.nodes()) {
    if (node->op->name() == "transpose" && node->inputs[0]->owner &&
        node->inputs[0]->owner->op->name() != "transpose")
      ++moved;  // a transpose of an arithmetic result
  }
  EXPECT_EQ(moved, 3) << s.to_string();
  EXPECT_EQ(count_ops(s, "transpose"), 6) << s.to_string();
  Tensor xs = testing::random_tensor(DType::kFloat32, {2, 5, 3, 8}, rng);
  xs.store(3, std::nan(""));
  xs.store(17, -0.0);
  const std::vector<Tensor> in{xs, testing::random_tensor(DType::kFloat32, {8, 1, 1}, rng)};
  const auto want = evaluate_reference(g, in), got = evaluate_reference(s, in);
  for (size_t i = 0; i < want.size(); ++i)
    EXPECT_TRUE(testing::tensors_close(got[i], want[i], 0, 0)) << "output " << i;
  expect_same_results(g, in, "");
}

// A layout round trip around a one-input elementwise op: transpose, relu (or a cast), and
// the inverse transpose read only there become the op alone; a second reader of the inner
// transpose or of the op, or perms that do not undo each other, keep the transposes.
TEST(Rewrite, SimplifyDropsInverseTransposesAroundAnActivation) {
  std::mt19937 rng(98);
  Graph g("round_trip");
  Var x = input(g, "x", DType::kFloat32, {2, 5, 3, 8});
  auto there = [&](Var v) { return transpose(v, {0, 3, 1, 2}); };
  auto back = [&](Var v) { return transpose(v, {0, 2, 3, 1}); };
  Var shared = relu(there(x));
  g.set_outputs({back(relu(there(x))), back(cast(there(x), DType::kFloat64)), back(shared), shared,
                 transpose(relu(there(x)), {0, 2, 1, 3})});
  const Graph s = remove_dead(simplify(g));
  // Left: the shared round trip (2 transposes) and the one whose perms do not cancel (2).
  EXPECT_EQ(count_ops(s, "transpose"), 4) << s.to_string();
  EXPECT_EQ(s.outputs()[0]->owner->op->name(), "relu") << s.to_string();
  EXPECT_EQ(s.outputs()[0]->owner->inputs[0]->name, "x") << s.to_string();
  EXPECT_EQ(s.outputs()[1]->owner->op->name(), "cast") << s.to_string();
  Tensor xs = testing::random_tensor(DType::kFloat32, {2, 5, 3, 8}, rng);
  xs.store(3, std::nan(""));
  xs.store(17, -0.0);
  const auto want = evaluate_reference(g, {xs}), got = evaluate_reference(s, {xs});
  for (size_t i = 0; i < want.size(); ++i)
    EXPECT_TRUE(testing::tensors_close(got[i], want[i], 0, 0)) << "output " << i;
  expect_same_results(g, {xs}, "");
}

TEST(Rewrite, CseMergesIdenticalNodesAndConstants) {
  Graph g("cse");
  Var x = input(g, "x", DType::kFloat32, {4});
  Var c1 = constant(g, Tensor::from_doubles(DType::kFloat32, {4}, {1, 2, 3, 4}));
  Var c2 = constant(g, Tensor::from_doubles(DType::kFloat32, {4}, {1, 2, 3, 4}));
  g.set_outputs({exp(x) * c1 + exp(x) * c2});
  Graph m = remove_dead(merge_common(g));
  EXPECT_EQ(count_ops(m, "exp"), 1) << m.to_string();
  EXPECT_EQ(count_ops(m, "mul"), 1) << m.to_string();
  EXPECT_EQ(m.constants().size(), 1u);
  expect_same_results(g, {Tensor::from_doubles(DType::kFloat32, {4}, {0, 1, -1, 2})}, "");
}

TEST(Rewrite, DeadCodeIsRemoved) {
  Graph g("dce");
  Var x = input(g, "x", DType::kFloat32, {4});
  Var unused = exp(x) * 3.0;
  (void)unused;
  g.set_outputs({x + 1.0});
  Graph d = remove_dead(g);
  EXPECT_EQ(d.nodes().size(), 1u);
  EXPECT_EQ(d.inputs().size(), 1u);
}

TEST(Rewrite, FusionMakesOneLoopOfChainsTreesAndBroadcasts) {
  Graph g("fuse");
  Var a = input(g, "a", DType::kFloat32, {kDynamic, 8});
  Var b = input(g, "b", DType::kFloat32, {8});
  Var s = sigmoid(a * 0.5 + b);   // broadcast of b
  Var y = tanh(s) * s - exp(-a);  // a diamond through s
  g.set_outputs({y});
  Graph f = fuse_elementwise(g);
  ASSERT_EQ(f.nodes().size(), 1u) << f.to_string();
  EXPECT_EQ(f.nodes()[0]->op->name(), "fused_elementwise");
  EXPECT_EQ(f.outputs()[0]->name, y.var()->name);
  std::string src = generate_source(g);
  EXPECT_NE(src.find("kiln_tanhf"), std::string::npos) << "float32 uses kiln's own tanh";
  EXPECT_EQ(src.find("tanhf("), src.find("kiln_tanhf(") + 5) << "no libm tanhf call";
  std::mt19937 rng(1);
  expect_same_results(g,
                      {testing::random_tensor(DType::kFloat32, {5, 8}, rng),
                       testing::random_tensor(DType::kFloat32, {8}, rng)},
                      "");
}

TEST(Rewrite, FusionStopsAtValuesReadElsewhereAndAtCostlySmallProducers) {
  Graph g("stops");
  Var a = input(g, "a", DType::kFloat32, {4, 8});
  Var b = input(g, "b", DType::kFloat32, {8});
  Var t = a * 2.0;  // read by two groups and a graph output: stays its own value
  Var e = exp(b);   // (8,) feeding a (4, 8) group: exp would run 4x, so not fused
  g.set_outputs({t + e, t - 1.0, t});
  Graph f = fuse_elementwise(g);
  EXPECT_EQ(count_ops(f, "exp"), 1) << f.to_string();
  EXPECT_EQ(count_ops(f, "mul"), 1) << f.to_string();
  std::mt19937 rng(2);
  expect_same_results(g,
                      {testing::random_tensor(DType::kFloat32, {4, 8}, rng),
                       testing::random_tensor(DType::kFloat32, {8}, rng)},
                      "");
}

// A quantized activation read as float32 by two consumers stays stored as its bytes: the
// widening cast is repeated in each consumer, not the end of its producer's loop. And a
// division on a small operand is not repeated for every element of a broadcast.
TEST(Rewrite, FusionStoresAWidenedValueNarrowAndDividesSmallOperandsOnce) {
  Graph g("narrow");
  Var x = input(g, "x", DType::kUInt8, {4, 8});
  Var b = input(g, "b", DType::kFloat32, {8});
  Var q = cast(round(cast(x, DType::kFloat32) * 0.5) + 1.0, DType::kUInt8);
  Var f = cast(q, DType::kFloat32);  // read by two consumers
  Var small = b / 3.0;               // (8,) feeding a (4, 8) group
  g.set_outputs({f * 2.0 + small, mean(f, {1}, true)});
  Graph o = optimize(g, std::string(""));  // the reduction takes its copy of the cast too
  for (const auto& n : o.nodes()) {
    const Variable* out = n->outputs[0];
    const bool is_output = out == o.outputs()[0] || out == o.outputs()[1];
    const std::vector<int64_t> full{4, 8};
    EXPECT_FALSE(!is_output && out->type.dtype == DType::kFloat32 && out->type.dims == full)
        << "a (4, 8) float32 value is stored: " << o.to_string();
  }
  EXPECT_EQ(count_ops(o, "div"), 1) << o.to_string();
  std::mt19937 rng(5);
  expect_same_results(g,
                      {testing::random_tensor(DType::kUInt8, {4, 8}, rng),
                       testing::random_tensor(DType::kFloat32, {8}, rng)},
                      "");
}

// A quantized gate (a per-channel value requantized: divided by its scale, rounded, clipped,
// dequantized) that multiplies a map: the whole small chain runs once per channel, not cut at
// its division with the rounding and dequantization repeated for every element of the map.
TEST(Rewrite, FusionComputesASmallChainOnceWhenPartOfItIsCostly) {
  Graph g("gate");
  Var x = input(g, "x", DType::kFloat32, {6, 37});
  Var b = input(g, "b", DType::kFloat32, {37});
  Var q = cast(clip(round(b / 0.02) + 3.0, 0.0, 255.0), DType::kUInt8);
  Var gate = (cast(q, DType::kFloat32) - 3.0) * 0.02;
  g.set_outputs({x * gate});
  Graph o = optimize(g, std::string(""));
  int rounds = 0;
  for (const auto& n : o.nodes()) {
    if (n->op->name() != "fused_elementwise") continue;
    if (attr_string(n->op->props(), "program").find("round") == std::string::npos) continue;
    ++rounds;
    EXPECT_EQ(n->outputs[0]->type.dims, std::vector<int64_t>{37})
        << "the gate's rounding is repeated per element: " << o.to_string();
  }
  EXPECT_EQ(rounds, 1) << o.to_string();
  std::mt19937 rng(11);
  expect_same_results(g,
                      {testing::random_tensor(DType::kFloat32, {6, 37}, rng),
                       testing::random_tensor(DType::kFloat32, {37}, rng)},
                      "");
}

TEST(Rewrite, ReductionFusionComputesTheReducedValuesInTheReductionLoop) {
  Graph g("reduce");
  Var a = input(g, "a", DType::kFloat32, {kDynamic, 8, 6});
  Var b = input(g, "b", DType::kFloat32, {8, 1});
  Var sq = (a - b) * (a - b);  // broadcast of b, read twice
  Var y = mean(sq, {1, 2}, true);
  Var m = max(exp(a * 0.5), {0});  // a reduction over the outermost axis
  Var p = prod(a, {2});            // no producer: stays a plain reduce_prod
  g.set_outputs({y, m, p});
  Graph o = optimize(g, std::string(""));
  EXPECT_EQ(count_ops(o, "fused_reduce"), 2) << o.to_string();
  EXPECT_EQ(count_ops(o, "fused_elementwise"), 0) << o.to_string();
  EXPECT_EQ(count_ops(o, "reduce_prod"), 1) << o.to_string();
  EXPECT_EQ(o.nodes().size(), 3u) << "no intermediate values: " << o.to_string();
  EXPECT_NE(o.to_string().find("reduce=\"mean\""), std::string::npos) << o.to_string();
  std::mt19937 rng(7);
  std::vector<Tensor> in{testing::random_tensor(DType::kFloat32, {37, 8, 6}, rng),
                         testing::random_tensor(DType::kFloat32, {8, 1}, rng)};
  expect_same_results(g, in, "");
  expect_same_results(g, in, "-reduction");
  EXPECT_EQ(count_ops(optimize(g, std::string("-reduction")), "fused_reduce"), 0);
  // A long row reduced to one value per row exercises the 16 partial accumulators and the
  // tail; a value read by another node too stays its own node.
  Graph h("rows");
  Var x = input(h, "x", DType::kFloat32, {3, 1000});
  Var e = exp(x - 1.0);
  h.set_outputs({sum(e, {1}), min(e * 2.0, {1}), e});
  Graph ho = optimize(h, std::string(""));
  EXPECT_EQ(count_ops(ho, "fused_reduce"), 1) << ho.to_string();
  expect_same_results(h, {testing::random_tensor(DType::kFloat32, {3, 1000}, rng)}, "");
  std::string err = testing::error_of([] {
    OpRegistry::instance().create("fused_reduce", {{"reduce", "median"}, {"program", "exp($0)"}});
  });
  EXPECT_NE(err.find("unknown reduction 'median'"), std::string::npos) << err;
}

// A large max or min to one value runs as one per row, then one of the rows (the first step
// splits among workers); a sum keeps one step (reassociating it would change its bits), and
// so does a small tensor. The values are the reference's, with infinities, a NaN and -0.0.
TEST(Rewrite, ExtremaOfALargeTensorRunPerRowThenOfTheRows) {
  Graph g("range");
  Var x = input(g, "x", DType::kFloat32, {40, 2000});
  Var s = input(g, "s", DType::kFloat32, {4, 100});
  g.set_outputs({max(x), min(x), sum(x), max(s)});
  Graph o = optimize(g, std::string(""));
  EXPECT_EQ(count_ops(o, "reduce_max"), 3) << o.to_string();
  EXPECT_EQ(count_ops(o, "reduce_min"), 2) << o.to_string();
  EXPECT_EQ(count_ops(o, "reduce_sum"), 1) << o.to_string();
  EXPECT_EQ(count_ops(optimize(g, std::string("-extrema")), "reduce_max"), 2);
  std::mt19937 rng(13);
  Tensor a = testing::random_tensor(DType::kFloat32, {40, 2000}, rng);
  Tensor b = testing::random_tensor(DType::kFloat32, {4, 100}, rng);
  a.store(1234, std::numeric_limits<double>::infinity());
  a.store(77777, -std::numeric_limits<double>::infinity());
  a.store(5, -0.0);
  expect_same_results(g, {a, b}, "");
  a.store(40000, std::numeric_limits<double>::quiet_NaN());
  auto want = evaluate_reference(g, {a, b});
  auto got = compile(g, CompileOptions{})({a, b});
  for (int k = 0; k < 2; ++k) {
    EXPECT_EQ(std::isnan(got[k].load(0)), std::isnan(want[k].load(0)))
        << "output " << k << ": " << got[k].load(0) << " against " << want[k].load(0);
  }
}

// A dequantize-and-bias chain, then a reshape, then an activation (a quantized BERT's dense
// layer and GELU): the reshape moves above the chain, so chain and activation are one loop;
// the reshape after the activation stays where it is (moving it would only swap it with the
// first), and so does a reshape of a value read elsewhere too.
TEST(Rewrite, AReshapeRisesAboveAnElementwiseChainSoItFusesWithItsReader) {
  Graph g("dense");
  Var q = input(g, "q", DType::kInt32, {6, 40});
  Var bias = input(g, "bias", DType::kFloat32, {40});
  Var y = reshape(cast(q, DType::kFloat32) * 0.5 + bias, {1, 6, 40});
  Var z = y * erf(y / 1.5);
  g.set_outputs({reshape(z, {6, 40})});
  Graph o = optimize(g, std::string(""));
  EXPECT_EQ(count_ops(o, "fused_elementwise"), 1) << o.to_string();
  std::mt19937 rng(17);
  std::vector<Tensor> in{testing::random_tensor(DType::kInt32, {6, 40}, rng),
                         testing::random_tensor(DType::kFloat32, {40}, rng)};
  expect_same_results(g, in, "");
  Graph h("shared");
  Var hq = input(h, "q", DType::kInt32, {6, 40});
  Var hb = input(h, "bias", DType::kFloat32, {40});
  Var d = cast(hq, DType::kFloat32) * 0.5 + hb;
  Var hy = reshape(d, {1, 6, 40});
  h.set_outputs({hy * erf(hy / 1.5), d});
  EXPECT_EQ(count_ops(optimize(h, std::string("")), "fused_elementwise"), 2);
  expect_same_results(h, in, "");
}

TEST(Rewrite, EpilogueFusionPutsBiasAndActivationInTheGemmThunk) {
  Graph g("epi");
  Var x = input(g, "x", DType::kFloat32, {kDynamic, 6});
  std::mt19937 rng(3);
  Var w = constant(g, testing::random_tensor(DType::kFloat32, {6, 5}, rng), "w");
  Var bias = constant(g, testing::random_tensor(DType::kFloat32, {5}, rng), "bias");
  Var y = gelu(matmul(x, w) + bias);
  g.set_outputs({y});
  Graph o = optimize(g, std::string(""));
  ASSERT_EQ(o.nodes().size(), 1u) << o.to_string();
  EXPECT_EQ(o.nodes()[0]->op->name(), "with_epilogue");
  expect_same_results(g, {testing::random_tensor(DType::kFloat32, {7, 6}, rng)}, "");
  // The matmul's result read elsewhere too: no epilogue, both values stay.
  Graph h("shared");
  Var hx = input(h, "x", DType::kFloat32, {3, 6});
  Var hw = constant(h, testing::random_tensor(DType::kFloat32, {6, 5}, rng), "w");
  Var z = matmul(hx, hw);
  h.set_outputs({relu(z), z});
  EXPECT_EQ(count_ops(optimize(h, std::string("")), "with_epilogue"), 0);
}

// Weight packing: a float gemm over a constant B reads B packed (transB absorbed), the packed
// copy stays a parameter when the weight was one, a weight two gemms share packs once, and
// runtime, integer or narrower-than-a-vector B is left alone. Results match the unpacked
// graph.
// The layout pass converts a region of 4-D values holding two convolutions or more: they
// become conv_nchwc, the elementwise nodes between them run on the blocked tensors, and
// activations are reordered only where the region meets the rest (the image in, the graph
// output out); weights are reordered now, a parameter staying a parameter. A convolution
// alone (12 channels around the depthwise one are not whole blocks) and float64 stay as
// they were.
TEST(Rewrite, LayoutPassBlocksRegionsOfConvolutions) {
  std::mt19937 rng(67);
  auto chain = [&](DType dt, int64_t c, bool with_depthwise) {
    Graph g("layout");
    Var x = input(g, "x", dt, {kDynamic, c, 9, 10});
    Var we(&g, g.add_parameter(testing::random_tensor(dt, {2 * c, c, 1, 1}, rng), "we"));
    Var y = relu(apply("conv", {x, we}, {}));
    if (with_depthwise) {
      Var wd = constant(g, testing::random_tensor(dt, {2 * c, 1, 3, 3}, rng), "wd");
      y = clip(
          apply("conv", {y, wd}, {{"group", 2 * c}, {"pads", std::vector<int64_t>{1, 1, 1, 1}}}),
          0.0, 6.0);
    }
    Var wp = constant(g, testing::random_tensor(dt, {c, 2 * c, 1, 1}, rng), "wp");
    g.set_outputs({add(apply("conv", {y, wp}, {}), x)});
    return g;
  };
  Graph g = chain(DType::kFloat32, 16, true);
  Graph l = layout_nchwc(g);
  EXPECT_EQ(count_ops(l, "conv_nchwc"), 3) << l.to_string();
  EXPECT_EQ(count_ops(l, "conv"), 0) << l.to_string();
  EXPECT_EQ(count_ops(l, "transpose"), 2) << "one reorder in, one out:\n" << l.to_string();
  int parameters = 0;
  for (const auto& node : l.nodes()) {
    if (node->op->name() == "conv_nchwc") {
      EXPECT_EQ(node->inputs[1]->kind, VarKind::kConstant) << "a weight was not reordered now";
      parameters += node->inputs[1]->parameter;
    }
  }
  EXPECT_EQ(parameters, 1) << "the reordered parameter weight is no longer a parameter";
  EXPECT_EQ(count_ops(layout_nchwc(chain(DType::kFloat32, 16, false)), "conv_nchwc"), 2);
  for (const Graph& same : {chain(DType::kFloat32, 12, true), chain(DType::kFloat64, 16, true)}) {
    EXPECT_EQ(count_ops(layout_nchwc(same), "conv_nchwc"), 0) << same.to_string();
  }
  EXPECT_EQ(count_ops(optimize(g, std::string("-layout")), "conv_nchwc"), 0);
  const std::vector<Tensor> in{testing::random_tensor(DType::kFloat32, {2, 16, 9, 10}, rng)};
  expect_same_results(g, in, "");
  expect_same_results(g, in, "-epilogue,-fusion");
}

// Grouped convolutions whose groups hold whole blocks (RegNet's 16 channels per group,
// ResNeXt's) join the region as conv_nchwc with channel_groups: no reorder around them. Groups
// of two blocks in and out (pairs in the kernel), of three in and six out at stride 2, of two
// in and one out, one with a bias; a grouped convolution whose groups are not whole blocks (12
// output channels) stays plain.
// Results match the reference, the rewritten graph's perform included, at batch 2 and with
// the work split between parts.
TEST(Rewrite, LayoutPassRunsGroupedConvolutionsInBlocks) {
  std::mt19937 rng(79);
  auto block = [&](int64_t odd_group) {
    Graph g("grouped");
    Var x = input(g, "x", DType::kFloat32, {kDynamic, 32, 11, 9});
    auto w = [&](std::vector<int64_t> dims, const std::string& name) {
      return constant(g, testing::random_tensor(DType::kFloat32, dims, rng, -0.5, 0.5), name);
    };
    const std::vector<int64_t> pad1{1, 1, 1, 1};
    Var y = relu(apply("conv", {x, w({48, 32, 1, 1}, "w1")}, {}));
    y = relu(apply("conv", {y, w({48, 16, 3, 3}, "w2"), w({48}, "b2")},
                   {{"group", int64_t{3}}, {"pads", pad1}}));
    y = apply("conv", {y, w({96, 24, 3, 3}, "w3")},
              {{"group", int64_t{2}}, {"pads", pad1}, {"strides", std::vector<int64_t>{2, 2}}});
    y = relu(apply("conv", {y, w({48, 96 / odd_group, 3, 3}, "w4")},
                   {{"group", odd_group}, {"pads", pad1}}));
    g.set_outputs({apply("conv", {y, w({32, 48, 1, 1}, "w5")}, {})});
    return g;
  };
  Graph g = block(6);  // 16 input and 8 output channels per group
  Graph l = layout_nchwc(g);
  EXPECT_EQ(count_ops(l, "conv_nchwc"), 5) << l.to_string();
  EXPECT_EQ(count_ops(l, "transpose"), 2) << "one reorder in, one out:\n" << l.to_string();
  int grouped = 0;
  for (const auto& node : l.nodes())
    grouped += attr_int(node->op->props(), "channel_groups", 1) > 1;
  EXPECT_EQ(grouped, 3) << l.to_string();
  const std::vector<Tensor> in{testing::random_tensor(DType::kFloat32, {2, 32, 11, 9}, rng)};
  const auto want = evaluate_reference(g, in);
  const auto blocked = evaluate_reference(l, in);
  // Five layers grow the outputs to ~150, so an output near 0 is a difference of large sums:
  // float32 rounding is judged against the output's scale.
  double scale = 0;
  for (double v : want.at(0).to_doubles()) scale = std::max(scale, std::fabs(v));
  const double atol = 1e-6 * scale;
  EXPECT_TRUE(testing::tensors_close(blocked.at(0), want.at(0), 1e-4, atol));
  expect_same_results(g, in, "-layout", 1e-4, atol);
  expect_same_results(g, in, "", 1e-4, atol);
  expect_same_results(g, in, "-epilogue,-fusion", 1e-4, atol);
  // 12 channels per group are not whole blocks: that convolution stays a plain one, and so
  // does the last 1 x 1, alone after it (not worth its two reorders).
  Graph h = block(4);
  Graph hl = layout_nchwc(h);
  EXPECT_EQ(count_ops(hl, "conv"), 2) << hl.to_string();
  EXPECT_EQ(count_ops(hl, "conv_nchwc"), 3) << hl.to_string();
  expect_same_results(h, in, "", 1e-4, atol);
}

// A lone convolution converts only when its multiply-adds outnumber the elements its two
// reorders move 64 times or more: 128 -> 256 channels over a 3 x 3 map (85 per element, a
// ShuffleNetV2 head) does, a 16 -> 32 1 x 1 (11 per element) and a 3 x 3 of 8 -> 8 channels
// (24) do not. Results match the unrewritten graph's, for a batch of 2 through a dynamic N.
TEST(Rewrite, LayoutPassBlocksALoneConvolutionWorthItsReorders) {
  std::mt19937 rng(73);
  auto lone = [&](int64_t c, int64_t m, int64_t k, int64_t hw) {
    Graph g("lone");
    Var x = input(g, "x", DType::kFloat32, {kDynamic, c, hw, hw});
    Var w = constant(g, testing::random_tensor(DType::kFloat32, {m, c, k, k}, rng), "w");
    const int64_t p = k / 2;
    g.set_outputs({relu(apply("conv", {x, w}, {{"pads", std::vector<int64_t>{p, p, p, p}}}))});
    return g;
  };
  Graph heavy = lone(128, 256, 1, 3);
  Graph l = layout_nchwc(heavy);
  EXPECT_EQ(count_ops(l, "conv_nchwc"), 1) << l.to_string();
  EXPECT_EQ(count_ops(l, "transpose"), 2) << "one reorder in, one out:\n" << l.to_string();
  expect_same_results(heavy, {testing::random_tensor(DType::kFloat32, {2, 128, 3, 3}, rng)}, "");
  for (const Graph& light : {lone(16, 32, 1, 9), lone(8, 8, 3, 9)}) {
    EXPECT_EQ(count_ops(layout_nchwc(light), "conv_nchwc"), 0) << light.to_string();
  }
}

// Integer convolutions in a chain run channels-last: the 3x3 and the depthwise one after it
// take nhwc, a per-channel product and a global pooling follow on channels-last tensors, and
// transposes stand only where the region meets the graph: one per output; the first
// convolution reads the channels-first image itself (x_nchw). A lone
// integer convolution stays channels-first. The rewritten graph's reference and its module
// match the unrewritten graph bit for bit.
TEST(Rewrite, IntegerConvolutionChainsRunChannelsLast) {
  std::mt19937 rng(79);
  int names = 0;
  auto qconv = [&](Graph& g, Var x, int64_t c, int64_t m, int64_t group) {
    auto c8 = [&](DType t, const Shape& s, double lo, double hi) {
      return constant(g, testing::random_tensor(t, s, rng, lo, hi), "q" + std::to_string(++names));
    };
    return apply(
        "qconv",
        {x, c8(DType::kInt8, {m, c / group, 3, 3}, -128, 127), c8(DType::kUInt8, {}, 100, 140),
         c8(DType::kInt8, {m}, -3, 3), c8(DType::kFloat32, {m}, 0.001, 0.004),
         c8(DType::kUInt8, {}, 3, 9), c8(DType::kInt32, {m}, -2000, 2000)},
        {{"kernel_shape", std::vector<int64_t>{3, 3}},
         {"pads", std::vector<int64_t>{1, 1, 1, 1}},
         {"group", group},
         {"requant", int64_t{1}},
         {"bias", int64_t{1}}});
  };
  auto nhwc_convs = [](const Graph& g) {
    int n = 0;
    for (const auto& node : g.nodes())
      n += node->op->name() == "qconv" && attr_int(node->op->props(), "nhwc", 0) == 1;
    return n;
  };
  Graph g("qchain");
  Var x = input(g, "x", DType::kUInt8, {2, 8, 7, 5});
  Var y = qconv(g, qconv(g, x, 8, 72, 1), 72, 72, 72);
  Var s = constant(g, testing::random_tensor(DType::kFloat32, {1, 72, 1, 1}, rng, -1, 1), "s");
  Var scaled = mul(cast(y, DType::kFloat32), s);
  g.set_outputs({scaled, apply("reduce_mean", {scaled},
                               {{"axes", std::vector<int64_t>{2, 3}}, {"keepdims", int64_t{1}}})});
  Graph l = layout_nhwc_int8(g);
  EXPECT_EQ(nhwc_convs(l), 2) << l.to_string();
  EXPECT_EQ(count_ops(l, "transpose"), 2) << "one per output:\n" << l.to_string();
  int entries = 0;
  for (const auto& node : l.nodes()) entries += attr_int(node->op->props(), "x_nchw", 0) == 1;
  EXPECT_EQ(entries, 1) << "the first convolution reads the image channels-first\n"
                        << l.to_string();
  const std::vector<Tensor> in{testing::random_tensor(DType::kUInt8, {2, 8, 7, 5}, rng, 0, 255)};
  auto want = evaluate_reference(g, in);
  auto got_ref = evaluate_reference(l, in);
  auto got = compile(g)(in);
  for (size_t i = 0; i < want.size(); ++i) {
    EXPECT_TRUE(testing::tensors_close(got_ref[i], want[i], 0, 0)) << "reference, output " << i;
    EXPECT_TRUE(testing::tensors_close(got[i], want[i], 1e-6, 1e-6)) << "module, output " << i;
  }
  Graph lone("lone");
  Var lx = input(lone, "x", DType::kUInt8, {1, 8, 6, 6});
  lone.set_outputs({qconv(lone, lx, 8, 16, 1)});
  EXPECT_EQ(nhwc_convs(layout_nhwc_int8(lone)), 0);
  // A fire module: two convolutions of one squeeze, concatenated along the channels, then a
  // third convolution; the concatenation joins the region (axis 3), no transpose around it.
  Graph fire("fire");
  Var fx = input(fire, "x", DType::kUInt8, {1, 5, 6, 7});
  Var sq = qconv(fire, fx, 5, 8, 1);
  Var cat = apply("concat", {qconv(fire, sq, 8, 16, 1), qconv(fire, sq, 8, 24, 1)},
                  {{"axis", int64_t{1}}});
  fire.set_outputs({qconv(fire, cat, 40, 8, 1)});
  Graph fl = layout_nhwc_int8(fire);
  EXPECT_EQ(nhwc_convs(fl), 4) << fl.to_string();
  EXPECT_EQ(count_ops(fl, "transpose"), 1) << "one out:\n" << fl.to_string();
  const std::vector<Tensor> fin{testing::random_tensor(DType::kUInt8, {1, 5, 6, 7}, rng, 0, 255)};
  EXPECT_TRUE(testing::tensors_close(evaluate_reference(fl, fin)[0],
                                     evaluate_reference(fire, fin)[0], 0, 0));
  EXPECT_TRUE(
      testing::tensors_close(compile(fire)(fin)[0], evaluate_reference(fire, fin)[0], 0, 0));
}

// qconv's layout props are checked by name: nhwc takes a 4-D input, x_nchw a group-1
// convolution and nhwc itself.
TEST(Rewrite, IntegerConvolutionLayoutPropsAreChecked) {
  std::mt19937 rng(83);
  auto error_of = [&](const Shape& xs, int64_t group, Attrs layout) {
    Graph g("bad");
    Var x = input(g, "x", DType::kUInt8, xs);
    const int64_t c = xs.size() == 4 ? xs[3] : xs[1];
    auto k = [&](DType t, const Shape& s, const std::string& n) {
      return constant(g, testing::random_tensor(t, s, rng, 1, 3), n);
    };
    Attrs props{{"kernel_shape", std::vector<int64_t>(xs.size() - 2, 1)},
                {"group", group},
                {"requant", int64_t{1}}};
    for (auto& [key, value] : layout) props[key] = value;
    std::vector<int64_t> ws{c, c / group};
    ws.resize(xs.size(), 1);
    try {
      apply("qconv",
            {x, k(DType::kInt8, ws, "w"), k(DType::kUInt8, {}, "az"), k(DType::kInt8, {c}, "bz"),
             k(DType::kFloat32, {c}, "s"), k(DType::kUInt8, {}, "yz")},
            props);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  EXPECT_NE(error_of({1, 4, 5}, 1, {{"nhwc", int64_t{1}}}).find("nhwc needs a rank-4 input"),
            std::string::npos);
  EXPECT_NE(error_of({1, 5, 5, 4}, 2, {{"nhwc", int64_t{1}}, {"x_nchw", int64_t{1}}})
                .find("x_nchw takes group-1"),
            std::string::npos);
  EXPECT_NE(error_of({1, 4, 5, 5}, 1, {{"x_nchw", int64_t{1}}}).find("x_nchw needs nhwc"),
            std::string::npos);
  EXPECT_EQ(error_of({1, 5, 5, 4}, 1, {{"nhwc", int64_t{1}}}), "");
  // c4 (a three-channel stem widened to four) needs a packed weight, group 1 and a
  // channels-first input: each named.
  EXPECT_NE(error_of({1, 3, 5, 5}, 1, {{"c4", int64_t{1}}}).find("c4 (a three-channel image"),
            std::string::npos);
  EXPECT_NE(error_of({1, 5, 5, 3}, 1, {{"c4", int64_t{1}}, {"nhwc", int64_t{1}}})
                .find("channels-first input"),
            std::string::npos);
}

// Squeeze-and-excitation: conv(x * s) with s per channel, the product read by the
// convolution alone, scales the weights (C x M per run) instead of the activation; a 3x3
// convolution's weights too (s per input channel of every tap). Not where the weights
// outnumber the map (a 2 x 2 map under 64 -> 32 weights), nor where the product has another
// reader, nor for s per image of a batch. Results match the unrewritten graph's.
TEST(Rewrite, LayoutPassMovesPerChannelScalesOntoTheWeights) {
  std::mt19937 rng(71);
  const DType f = DType::kFloat32;
  auto se_block = [&](int64_t hw, int64_t kernel, bool second_reader, int64_t s_batch) {
    Graph g("se");
    Var x = input(g, "x", f, {kDynamic, 16, hw, hw});
    Var we = constant(g, testing::random_tensor(f, {48, 16, 1, 1}, rng), "we");
    Var y = relu(apply("conv", {x, we}, {}));
    Var s = sigmoid(input(g, "s", f, {s_batch, 48, 1, 1}));
    Var ys = mul(y, s);
    Var wp = constant(g, testing::random_tensor(f, {32, 48, kernel, kernel}, rng), "wp");
    const int64_t pad = kernel / 2;
    Var out = apply("conv", {ys, wp}, {{"pads", std::vector<int64_t>{pad, pad, pad, pad}}});
    g.set_outputs(second_reader ? std::vector<Variable*>{out.var(), ys.var()}
                                : std::vector<Variable*>{out.var()});
    return g;
  };
  auto scaled = [](const Graph& l) {
    int n = 0;
    for (const auto& node : l.nodes()) n += node->name.find(".scale_weights") != std::string::npos;
    return n;
  };
  for (int64_t kernel : {1, 3}) {
    const int64_t hw = kernel == 1 ? 9 : 18;  // 32 x 9 weights per channel need 288 positions
    Graph g = se_block(hw, kernel, false, 1);
    Graph l = layout_nchwc(g);
    EXPECT_EQ(scaled(l), 1) << l.to_string();
    EXPECT_EQ(count_ops(l, "mul"), 1) << "the activation is still scaled:\n" << l.to_string();
    for (int64_t n : {1, 2}) {
      const std::vector<Tensor> in{testing::random_tensor(f, {n, 16, hw, hw}, rng),
                                   testing::random_tensor(f, {1, 48, 1, 1}, rng, -3, 3)};
      // Sums of up to 432 float32 products of size ~4 that cancel to ~0.1.
      expect_same_results(g, in, "", 1e-4, 2e-4);
    }
  }
  EXPECT_EQ(scaled(layout_nchwc(se_block(2, 1, false, 1))), 0)
      << "32 weights a channel, 4 positions";
  EXPECT_EQ(scaled(layout_nchwc(se_block(9, 3, false, 1))), 0)
      << "288 weights a channel, 81 positions";
  EXPECT_EQ(scaled(layout_nchwc(se_block(9, 1, true, 1))), 0) << "the product is an output";
  EXPECT_EQ(scaled(layout_nchwc(se_block(9, 1, false, 2))), 0) << "a scale per image";
  EXPECT_EQ(count_ops(optimize(se_block(9, 1, false, 1), std::string("-layout")), "conv_nchwc"), 0);
}

// A convolution whose windows tile the image (a ViT's patch embedding, a ConvNeXt stem)
// becomes a GEMM over rows of patches, packed like any other: float32 and float64, a
// batch, a bias, a parameter weight (still a parameter after the reshape). Padding, a
// stride other than the window, a map the window does not divide, too few taps (48) and a
// 1 x 1 window stay convolutions.
TEST(Rewrite, LayoutPassRunsPatchConvolutionsAsGemms) {
  std::mt19937 rng(73);
  using V = std::vector<int64_t>;
  auto patch = [&](DType dt, int64_t c, int64_t k, int64_t hw, Attrs extra, bool bias) {
    Graph g("patch");
    Var x = input(g, "x", dt, {kDynamic, c, hw, hw});
    Var w(&g, g.add_parameter(testing::random_tensor(dt, {24, c, k, k}, rng), "w"));
    Attrs a{{"strides", V{k, k}}};
    for (auto& [key, v] : extra) a[key] = v;
    std::vector<Var> in{x, w};
    if (bias) in.push_back(constant(g, testing::random_tensor(dt, {24}, rng), "b"));
    g.set_outputs({relu(apply("conv", in, a))});
    return g;
  };
  for (DType dt : {DType::kFloat32, DType::kFloat64}) {
    for (bool bias : {true, false}) {
      Graph g = patch(dt, 4, 4, 12, {}, bias);  // 64 taps
      Graph l = optimize(g, std::string(""));
      EXPECT_EQ(count_ops(l, "conv"), 0) << l.to_string();
      int packed = 0;
      for (const auto& node : l.nodes()) {
        if (attr_int(node->op->props(), "packed_n", 0) == 24) {
          ++packed;
          EXPECT_TRUE(node->inputs[1]->parameter) << "the weight is no longer a parameter";
        }
      }
      EXPECT_EQ(packed, 1) << l.to_string();
      for (int64_t n : {1, 3}) {
        expect_same_results(g, {testing::random_tensor(dt, {n, 4, 12, 12}, rng)}, "");
      }
    }
  }
  const DType f = DType::kFloat32;
  for (const Graph& same :
       {patch(f, 4, 4, 12, {{"pads", V{1, 1, 1, 1}}}, true),
        patch(f, 4, 4, 12, {{"strides", V{2, 2}}}, true), patch(f, 4, 4, 14, {}, true),
        patch(f, 3, 4, 12, {}, true), patch(f, 64, 1, 12, {}, true)}) {
    EXPECT_EQ(count_ops(layout_nchwc(same), "gemm"), 0) << same.to_string();
  }
}

TEST(Rewrite, PackingGivesGemmsOverConstantWeightsPanels) {
  std::mt19937 rng(59);
  Graph g("pack");
  Var x = input(g, "x", DType::kFloat32, {kDynamic, 6});
  Var rb = input(g, "rb", DType::kFloat32, {6, 4});
  Var w(&g, g.add_parameter(testing::random_tensor(DType::kFloat32, {20, 6}, rng), "w"));
  Var bias = constant(g, testing::random_tensor(DType::kFloat32, {20}, rng), "bias");
  Var narrow = constant(g, testing::random_tensor(DType::kFloat32, {6, 15}, rng), "narrow");
  Var xi = input(g, "xi", DType::kInt32, {2, 3});
  Var wi = constant(g, testing::random_tensor(DType::kInt32, {3, 2}, rng), "wi");
  g.set_outputs({gemm(x, w, bias, 1.0, 1.0, false, true), gemm(x, w, 2.0, false, true), gemm(x, rb),
                 gemm(xi, wi), gemm(x, narrow)});
  Graph p = pack_weights(g);
  int packed = 0;
  for (const auto& node : p.nodes()) {
    const int64_t n = attr_int(node->op->props(), "packed_n", 0);
    if (n == 0) continue;
    ++packed;
    EXPECT_EQ(n, 20);
    EXPECT_EQ(attr_int(node->op->props(), "transB", 0), 0);
    const Variable* b = node->inputs[1];
    EXPECT_EQ(b->name, "w.packed_t");
    EXPECT_TRUE(b->parameter) << "a packed weight must stay a parameter";
    EXPECT_EQ(b->type.dims, (std::vector<int64_t>{2, 6, 16}));  // 20 columns: 16 + 4 padded
  }
  EXPECT_EQ(packed, 2) << p.to_string();
  int packed_constants = 0;
  for (const Variable* v : p.constants()) packed_constants += v->name == "w.packed_t";
  EXPECT_EQ(packed_constants, 1) << "the shared weight was packed twice";
  std::vector<Tensor> in{testing::random_tensor(DType::kFloat32, {3, 6}, rng),
                         testing::random_tensor(DType::kFloat32, {6, 4}, rng),
                         testing::random_tensor(DType::kInt32, {2, 3}, rng, -9, 9)};
  expect_same_results(g, in, "");
  expect_same_results(g, in, "-pack");
  CompileOptions off;
  off.passes = "-pack";
  const Graph unpacked = optimized_graph(g, off);
  for (const auto& node : unpacked.nodes()) {
    EXPECT_EQ(attr_int(node->op->props(), "packed_n", 0), 0) << "-pack still packed";
  }
}

// x @ transpose(W) with W a weight (PyTorch's lowering of a linear layer, an exported tied LM
// head) packs W itself, read transposed: no transpose step is left to copy W on every run,
// also where W is past the size folding takes (2^22 elements) and so stays a transpose
// node. A transpose another step also reads stays for that step; a transpose of an input
// packs nothing.
TEST(Rewrite, PackingReadsATransposedWeightInPlace) {
  std::mt19937 rng(83);
  const DType f = DType::kFloat32;
  Graph g("pack_transposed");
  Var x = input(g, "x", f, {kDynamic, 3, 24});
  Var xi = input(g, "xi", f, {20, 24});
  Var w(&g, g.add_parameter(testing::random_tensor(f, {20, 24}, rng), "w"));
  Var big(&g, g.add_parameter(testing::random_tensor(f, {4200, 1024}, rng), "big"));  // 4.3M
  Var w2(&g, g.add_parameter(testing::random_tensor(f, {17, 24}, rng), "w2"));
  Var t2 = transpose(w2, {1, 0});
  g.set_outputs({add(matmul(x, transpose(w, {1, 0})), constant(g, testing::random_tensor(f, {20}, rng), "b")),
                 matmul(input(g, "xb", f, {2, 1024}), transpose(big, {1, 0})),
                 matmul(x, t2), relu(t2),              // the transpose has another reader
                 matmul(x, transpose(xi, {1, 0}))});   // an input: nothing to pack
  const Graph o = optimize(g, std::string(""));
  int packed = 0;
  for (const auto& node : o.nodes()) {
    if (attr_int(node->op->props(), "packed_n", 0) == 0) continue;
    ++packed;
    EXPECT_TRUE(node->inputs[1]->parameter) << o.to_string();
  }
  EXPECT_EQ(packed, 3) << o.to_string();
  // The small weights' transposes fold before packing; the large one is packed transposed.
  bool big_packed = false;
  for (const Variable* v : o.constants()) big_packed = big_packed || v->name == "big.packed_t";
  EXPECT_TRUE(big_packed) << o.to_string();
  // Left: the transpose relu reads (folded or not) and the input's.
  EXPECT_LE(count_ops(o, "transpose"), 2) << o.to_string();
  for (const auto& node : o.nodes()) {
    if (node->op->name() == "transpose") {
      EXPECT_NE(node->inputs[0]->name, "big") << "the large weight is still transposed per run";
      EXPECT_NE(node->inputs[0]->name, "w") << o.to_string();
    }
  }
  std::vector<Tensor> in{testing::random_tensor(f, {2, 3, 24}, rng),
                         testing::random_tensor(f, {20, 24}, rng),
                         testing::random_tensor(f, {2, 1024}, rng)};
  expect_same_results(g, in, "", 1e-3, 1e-4);  // float sums of 1024 products
}

// A node nothing reads (a graph built in code can leave one) is no reader: it does not keep
// a product from taking the residual add after it as its epilogue.
TEST(Rewrite, DeadReadersDoNotBlockFusion) {
  std::mt19937 rng(89);
  const DType f = DType::kFloat32;
  Graph g("dead_reader");
  Var x = input(g, "x", f, {2, 5, 24});
  Var residual = input(g, "r", f, {2, 5, 20});
  Var w(&g, g.add_parameter(testing::random_tensor(f, {24, 20}, rng), "w"));
  Var y = matmul(x, w);
  reshape(y, {10, 20});  // dead
  g.set_outputs({add(y, residual)});
  const Graph o = optimize(g, std::string(""));
  EXPECT_EQ(count_ops(o, "add"), 0) << o.to_string();
  EXPECT_EQ(count_ops(o, "reshape"), 0) << o.to_string();
  expect_same_results(g, {testing::random_tensor(f, {2, 5, 24}, rng),
                          testing::random_tensor(f, {2, 5, 20}, rng)}, "");
}

// A packed product's bias add goes into the kernel (the gemm's C at beta 1), from either side
// of the add and for a parameter bias; an add the product shares, one whose other operand
// is an input, a matrix or a bias that broadcasts the output, and a product that is also an
// output keep their adds. Values with NaN and infinities in the bias match the reference.
TEST(Rewrite, PackingTakesBiasAddsIntoTheKernel) {
  std::mt19937 rng(71);
  const DType f = DType::kFloat32;
  Graph g("pack_bias");
  Var x = input(g, "x", f, {kDynamic, 5, 24});
  Var xi = input(g, "xi", f, {20});
  auto weight = [&](const char* name) {
    return constant(g, testing::random_tensor(f, {24, 20}, rng), name);
  };
  Tensor bias_value = testing::random_tensor(f, {20}, rng);
  bias_value.store(3, std::numeric_limits<double>::quiet_NaN());
  bias_value.store(7, std::numeric_limits<double>::infinity());
  bias_value.store(18, -0.0);
  Var bias = constant(g, bias_value, "bias");
  Var pbias(&g, g.add_parameter(testing::random_tensor(f, {20}, rng), "pbias"));
  Var shared = matmul(x, weight("w_shared"));
  Var wide = constant(g, testing::random_tensor(f, {5, 20}, rng), "wide");
  Var out_too = matmul(x, weight("w_out"));
  g.set_outputs({
      add(matmul(x, weight("w1")), bias),         // absorbed
      relu(add(pbias, matmul(x, weight("w2")))),  // absorbed, bias on the left
      add(shared, bias), relu(shared),            // the product has two readers
      add(matmul(x, weight("w3")), xi),           // an input, not a weight
      add(matmul(x, weight("w4")), wide),         // a matrix, not a vector
      add(out_too, bias), out_too,                // the product is an output too
  });
  const Graph p = pack_weights(g);
  int with_bias = 0;
  for (const auto& node : p.nodes()) {
    if (node->op->name() != "gemm") continue;
    EXPECT_GT(attr_int(node->op->props(), "packed_n", 0), 0) << p.to_string();
    if (node->inputs.size() == 3) {
      ++with_bias;
      EXPECT_TRUE(node->inputs[2]->name == "bias" || node->inputs[2]->name == "pbias")
          << p.to_string();
      EXPECT_EQ(attr_float(node->op->props(), "beta", 0.0), 1.0) << p.to_string();
    }
  }
  EXPECT_EQ(with_bias, 2) << p.to_string();
  EXPECT_EQ(count_ops(p, "add"), 4) << p.to_string();
  std::vector<Tensor> in{testing::random_tensor(f, {3, 5, 24}, rng),
                         testing::random_tensor(f, {20}, rng)};
  const auto want = evaluate_reference(g, in);
  const auto got = evaluate_reference(p, in);
  for (size_t i = 0; i < want.size(); ++i) {
    EXPECT_TRUE(testing::tensors_close(got[i], want[i], 1e-5, 1e-5)) << "output " << i;
  }
  expect_same_results(g, in, "");
  expect_same_results(g, in, "-pack");
}

// Direct convolutions over constant weights get them in blocks of 16 output channels; a
// pointwise one (a GEMM), a grouped one, one of fewer than 16 channels or 64 taps and one
// whose weight is an input keep theirs. The packed graph's reference (Conv::perform on the
// blocks) and compiled module match the original's.
TEST(Rewrite, PackingGivesDirectConvolutionsWeightBlocks) {
  std::mt19937 rng(67);
  using V = std::vector<int64_t>;
  const DType f = DType::kFloat32;
  Graph g("pack_conv");
  Var x = input(g, "x", f, {kDynamic, 8, 9, 7});
  Var wi = input(g, "wi", f, {20, 8, 3, 3});
  Var w(&g, g.add_parameter(testing::random_tensor(f, {20, 8, 3, 3}, rng), "w"));
  Var b = constant(g, testing::random_tensor(f, {20}, rng), "b");
  const Attrs pad{{"pads", V{1, 1, 1, 1}}};
  const Attrs strided{{"pads", V{0, 1, 1, 0}}, {"strides", V{2, 1}}};
  Var pointwise = constant(g, testing::random_tensor(f, {24, 8, 1, 1}, rng), "pointwise");
  Var grouped = constant(g, testing::random_tensor(f, {20, 4, 3, 3}, rng), "grouped");
  Var narrow = constant(g, testing::random_tensor(f, {8, 8, 3, 3}, rng), "narrow");
  Var few = constant(g, testing::random_tensor(f, {16, 8, 1, 7}, rng), "few_taps");
  g.set_outputs({apply("conv", {x, w, b}, pad), apply("conv", {x, w}, strided),
                 apply("conv", {x, pointwise}),
                 apply("conv", {x, grouped}, {{"group", int64_t{2}}}), apply("conv", {x, narrow}),
                 apply("conv", {x, few}), apply("conv", {x, wi})});
  Graph p = pack_weights(g);
  int packed = 0;
  for (const auto& node : p.nodes()) {
    const int64_t m = attr_int(node->op->props(), "packed_m", 0);
    if (m == 0) continue;
    ++packed;
    EXPECT_EQ(m, 20);
    EXPECT_EQ(attr_ints(node->op->props(), "kernel_shape"), (V{3, 3}));
    const Variable* pw = node->inputs[1];
    EXPECT_EQ(pw->name, "w.blocks");
    EXPECT_TRUE(pw->parameter) << "a packed weight must stay a parameter";
    EXPECT_EQ(pw->type.dims, (V{2, 72, 16}));
  }
  EXPECT_EQ(packed, 2) << p.to_string();
  int blocks = 0;
  for (const Variable* v : p.constants()) blocks += v->name == "w.blocks";
  EXPECT_EQ(blocks, 1) << "the shared weight was packed twice";
  const std::vector<Tensor> in{testing::random_tensor(f, {2, 8, 9, 7}, rng),
                               testing::random_tensor(f, {20, 8, 3, 3}, rng)};
  const auto want = evaluate_reference(g, in);
  const auto got = evaluate_reference(p, in);
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    EXPECT_TRUE(testing::tensors_close(got[i], want[i], 1e-5, 1e-6)) << "output " << i;
  }
  expect_same_results(g, in, "");
}

// A packed 1x1 convolution or one of a single channel (a graph read back from kiln's JSON;
// the pack pass makes neither) runs the packed kernel, not the GEMM or depthwise code,
// which would read the blocks as rows.
TEST(Rewrite, HandPackedPointwiseAndSingleChannelConvolutionsRunPacked) {
  std::mt19937 rng(79);
  using V = std::vector<int64_t>;
  for (const V& wdims : {V{20, 8, 1, 1}, V{1, 1, 3, 3}}) {
    const int64_t c = wdims[1];
    const Tensor w = testing::random_tensor(DType::kFloat32, wdims, rng);
    Graph plain("plain"), packed("packed");
    Var xp = input(plain, "x", DType::kFloat32, {2, c, 6, 5});
    const int64_t pad = wdims[2] / 2;  // the 1x1 one unpadded: what the GEMM path would take
    plain.set_outputs({apply("conv", {xp, constant(plain, w, "w")}, {{"pads", V(4, pad)}})});
    Var xk = input(packed, "x", DType::kFloat32, {2, c, 6, 5});
    packed.set_outputs({apply(
        "conv", {xk, constant(packed, pack_conv_blocks(w), "w.blocks")},
        {{"pads", V(4, pad)}, {"packed_m", wdims[0]}, {"kernel_shape", V{wdims[2], wdims[3]}}})});
    const std::vector<Tensor> in{testing::random_tensor(DType::kFloat32, {2, c, 6, 5}, rng)};
    const Tensor want = evaluate_reference(plain, in)[0];
    EXPECT_TRUE(testing::tensors_close(evaluate_reference(packed, in)[0], want, 1e-5, 1e-6));
    EXPECT_TRUE(testing::tensors_close(compile(packed)(in)[0], want, 1e-5, 1e-6))
        << "weight of " << wdims[0] << " channels";
  }
}

// A packed weight of the wrong shape is an error naming the shape it must have.
TEST(Rewrite, PackedConvolutionWeightOfTheWrongShapeIsNamed) {
  Graph g("bad_blocks");
  Var x = input(g, "x", DType::kFloat32, {1, 8, 9, 7});
  Var w = input(g, "w", DType::kFloat32, {2, 70, 16});
  EXPECT_EQ(testing::error_of([&] {
              apply("conv", {x, w},
                    {{"packed_m", int64_t{20}}, {"kernel_shape", std::vector<int64_t>{3, 3}}});
            }),
            "node 0 (conv): conv: with packed_m=20, W must be (2, 72, 16) (blocks of 16 output "
            "channels by 72 taps), got (2, 70, 16) [inputs: x: float32 (1, 8, 9, 7); w: float32 "
            "(2, 70, 16)]");
  EXPECT_NE(testing::error_of([&] {
              apply("conv", {x, w}, {{"packed_m", int64_t{20}}});
            }).find("packed_m"),
            std::string::npos);
}

TEST(Rewrite, PassSpecsDisablePassesAndRejectUnknownNames) {
  size_t opt_in = 0;
  for (const auto& p : all_passes()) opt_in += p.opt_in;
  EXPECT_EQ(opt_in, 2u) << "bf16conv and bf16 are the passes that run only when named";
  EXPECT_EQ(select_passes("", "KILN_PASSES").size(), all_passes().size() - opt_in);
  EXPECT_EQ(select_passes("none", "KILN_PASSES").size(), 0u);
  auto some = select_passes("-fusion, -cse", "KILN_PASSES");
  EXPECT_EQ(some.size(), all_passes().size() - opt_in - 2);
  // Named, an opt-in pass joins in its place (after pack); "-bf16" leaves it off.
  auto with = select_passes("-cse,bf16", "KILN_PASSES");
  ASSERT_EQ(with.size(), all_passes().size() - 2);
  auto at = std::find_if(with.begin(), with.end(),
                         [](const PassInfo& p) { return std::string(p.name) == "bf16"; });
  ASSERT_NE(at, with.end());
  EXPECT_EQ(std::string((at - 1)->name), "pack");
  // bf16conv runs first, before the weight reorders it adds are folded.
  auto both = select_passes("bf16conv,bf16", "KILN_PASSES");
  ASSERT_EQ(both.size(), all_passes().size());
  EXPECT_EQ(std::string(both.front().name), "bf16conv");
  EXPECT_EQ(select_passes("-bf16", "KILN_PASSES").size(), all_passes().size() - opt_in);
  EXPECT_NE(testing::error_of([] { select_passes("cse", "KILN_PASSES"); }).find("write -cse"),
            std::string::npos);
  for (const auto& p : some) {
    EXPECT_NE(std::string(p.name), "fusion");
    EXPECT_NE(std::string(p.name), "cse");
  }
  std::string err = testing::error_of([] { select_passes("-fuson", "KILN_PASSES"); });
  EXPECT_NE(err.find("KILN_PASSES: unknown pass 'fuson'"), std::string::npos) << err;
  EXPECT_NE(err.find("fusion"), std::string::npos) << "lists the passes: " << err;

  Graph g("spec");
  Var a = input(g, "a", DType::kFloat32, {4});
  g.set_outputs({exp(a) + 1.0});
  ::setenv("KILN_PASSES", "-fusion", 1);
  EXPECT_EQ(count_ops(optimize(g), "fused_elementwise"), 0);
  ::setenv("KILN_PASSES", "", 1);
  EXPECT_EQ(count_ops(optimize(g), "fused_elementwise"), 1);
  ::unsetenv("KILN_PASSES");
}

TEST(Rewrite, DebugLevelTwoPrintsTheGraphAfterEachPass) {
  Graph g("debugged");
  Var a = input(g, "a", DType::kFloat32, {4});
  g.set_outputs({exp(a) + 1.0});
  set_debug_level(2);
  ::testing::internal::CaptureStderr();
  optimize(g, std::string("bf16conv,bf16"));  // every pass, the opt-in ones too
  std::string err = ::testing::internal::GetCapturedStderr();
  set_debug_level(0);
  for (const auto& p : all_passes()) {
    EXPECT_NE(err.find("after pass " + std::string(p.name) + ":"), std::string::npos) << err;
  }
  EXPECT_NE(err.find("fused_elementwise{program=\"exp($0); add(%0, $1)\"}"), std::string::npos)
      << err;
}

TEST(Rewrite, FusedProgramTextIsCheckedWithItsOffset) {
  auto make = [](const std::string& text) {
    return testing::error_of([&] {
      OpRegistry::instance().create("fused_elementwise", {{"program", text}});
    });
  };
  EXPECT_NE(make("add($0, %3)").find("uses a later step"), std::string::npos);
  EXPECT_NE(make("frobnicate($0)").find("unknown scalar op 'frobnicate'"), std::string::npos);
  EXPECT_NE(make("add($0)").find("add takes 2 arguments, got 1"), std::string::npos);
  EXPECT_NE(make("exp($0").find("offset"), std::string::npos);
  EXPECT_NE(make("exp($1)").find("inputs are not all used"), std::string::npos);
  auto epilogue = [](const Attrs& props) {
    return testing::error_of([&] { OpRegistry::instance().create("with_epilogue", props); });
  };
  EXPECT_NE(epilogue({{"base", "softmax"}, {"base_inputs", int64_t{1}}, {"program", "relu($0)"}})
                .find("'softmax' cannot take an epilogue"),
            std::string::npos);
  // A float32 qmatmul (scaled) is no byte output (requant), and takes a float32 scale.
  auto qmatmul = [](const Attrs& props, const std::vector<TensorType>& in) {
    return testing::error_of(
        [&] { OpRegistry::instance().create("qmatmul", props)->infer_type(in); });
  };
  EXPECT_NE(qmatmul({{"scaled", int64_t{1}}, {"requant", int64_t{1}}}, {})
                .find("scaled (a float32 output) and requant (a byte output) exclude each other"),
            std::string::npos);
  const TensorType a{DType::kUInt8, {3, 4}}, b{DType::kInt8, {4, 5}};
  const TensorType az{DType::kUInt8, {}}, bz{DType::kInt8, {}};
  EXPECT_NE(qmatmul({{"scaled", int64_t{1}}}, {a, b, az, bz, TensorType{DType::kFloat64, {}}})
                .find("qmatmul: the scale must be float32"),
            std::string::npos);
  EXPECT_NE(qmatmul({{"scaled", int64_t{1}}}, {a, b, az, bz, TensorType{DType::kFloat32, {3}}})
                .find("the scale must be a scalar or hold one value per output column (5)"),
            std::string::npos);
  EXPECT_EQ(qmatmul({{"scaled", int64_t{1}}}, {a, b, az, bz, TensorType{DType::kFloat32, {5}}}),
            "no error");
  // A qmatmul's parts are runs of whole rows only with split_rows (a forged entry without it).
  EXPECT_NE(epilogue({{"base", "qmatmul"},
                      {"base.scaled", int64_t{1}},
                      {"base_inputs", int64_t{5}},
                      {"program", "relu($0)"}})
                .find("'qmatmul' cannot take an epilogue"),
            std::string::npos);
  EXPECT_EQ(epilogue({{"base", "qmatmul"},
                      {"base.scaled", int64_t{1}},
                      {"base.split_rows", int64_t{1}},
                      {"base_inputs", int64_t{5}},
                      {"program", "relu($0)"}}),
            "no error");
  EXPECT_NE(epilogue({{"base", "gemm"},
                      {"base_inputs", int64_t{2}},
                      {"program", "relu($0)"},
                      {"bogus", int64_t{1}}})
                .find("attribute 'bogus'"),
            std::string::npos);
  auto op = OpRegistry::instance().create("fused_elementwise",
                                          {{"program", "leaky_relu{alpha=0.2}($0); mul(%0, $1)"}});
  EXPECT_EQ(op->props().at("program"),
            AttrValue(std::string("leaky_relu{alpha=0.2}($0); mul(%0, $1)")));
}

}  // namespace
}  // namespace kiln

namespace kiln {
namespace {

// Attention's head splits as exporters write them: GPT's slice / reshape / transpose and
// ViT's reshape / transpose / gather per head, q scaled by a constant. The views pass lets
// the products read the qkv product in place: no transpose, gather or slice survives on
// those paths, the scales become alpha, and the module matches the unoptimized graph's
// reference (sizes 13 x 3 heads x 5 split no vector evenly). A chain from a graph input
// and a reshape that is no view (a transposed value merged across its strides) keep their
// copies and still compute the same.
TEST(Rewrite, ViewsLetMatmulsReadAttentionHeadsInPlace) {
  std::mt19937 rng(5);
  const DType f = DType::kFloat32;
  const int64_t t = 13, h = 3, dh = 5, d = h * dh;
  Graph g("views");
  Var x = input(g, "x", f, {1, t, d});
  Var xt = input(g, "xt", f, {1, d, t});
  Var qkv = add(x, x);  // a value a step made (graph inputs may arrive strided)
  Var qkv3 = matmul(qkv, constant(g, testing::random_tensor(f, {d, 3 * d}, rng), "w"));
  auto slice = [&](Var v, int64_t from) {
    return apply("slice", {v},
                 {{"starts", std::vector<int64_t>{from}},
                  {"ends", std::vector<int64_t>{from + d}},
                  {"axes", std::vector<int64_t>{2}}});
  };
  auto heads = [&](Var v, std::vector<int64_t> perm) {
    return transpose(reshape(v, {1, t, h, dh}), std::move(perm));
  };
  // GPT: q scaled before the product, k transposed for it, v as it is.
  Var q = mul(heads(slice(qkv3, 0), {0, 2, 1, 3}), scalar(g, f, 0.25));
  Var k = heads(slice(qkv3, d), {0, 2, 3, 1});
  Var v = heads(slice(qkv3, 2 * d), {0, 2, 1, 3});
  Var gpt = matmul(matmul(q, k), v);
  // ViT: (1, t, 3, d) -> (3, 1, t, d), one head group per constant index (v's negative).
  Var groups = transpose(reshape(qkv3, {1, t, 3, d}), {2, 0, 1, 3});
  auto pick = [&](int64_t i) {
    Var index = constant(g, Tensor::from_doubles(DType::kInt64, {}, {static_cast<double>(i)}));
    return heads(apply("gather", {groups, index}, {{"axis", int64_t{0}}}), {0, 2, 1, 3});
  };
  Var vit = matmul(matmul(pick(0), transpose(pick(1), {0, 1, 3, 2})), pick(-1));
  // From a graph input: the first transpose stays a copy.
  Var from_input = matmul(transpose(xt, {0, 2, 1}), transpose(xt, {0, 1, 2}));
  // No view: (1, d, t) transposed to (1, t, d), merged to (t * d) then split the other way.
  Var merged = reshape(transpose(add(xt, xt), {0, 2, 1}), {1, d, t});
  Var no_view = matmul(merged, transpose(merged, {0, 2, 1}));
  // The heads back to rows: the products store through these transposes (out_perm), and
  // vit's relu stays out of its product's epilogue. A transpose moving the last axis stays.
  Var gpt_rows = reshape(transpose(gpt, {0, 2, 1, 3}), {1, t, d});
  Var vit_rows = relu(transpose(vit, {2, 0, 1, 3}));
  Var last_moves = transpose(matmul(qkv, transpose(qkv, {0, 2, 1})), {0, 2, 1});
  g.set_outputs({gpt_rows, vit_rows, from_input, no_view, last_moves});

  const Graph p = optimized_graph(g, CompileOptions{});
  int viewed = 0, scaled = 0, stored_through = 0;
  for (const auto& node : p.nodes()) {
    const Attrs& props = node->op->props();
    const std::string& name = node->op->name();
    const bool base = name == "with_epilogue" && attr_string(props, "base") == "matmul";
    if (name != "matmul" && !base) continue;
    const std::string pre = base ? "base." : "";
    viewed += props.count(pre + "a_view") + props.count(pre + "b_view");
    stored_through += props.count(pre + "out_perm");
    EXPECT_FALSE(base && props.count(pre + "out_perm")) << p.to_string();
    if (props.count(pre + "alpha")) {
      ++scaled;
      EXPECT_EQ(attr_float(props, pre + "alpha"), 0.25) << p.to_string();
    }
  }
  // gpt: q, k, v; vit: all four operands; last_moves: qkv transposed; from_input: its
  // second transpose is the identity.
  EXPECT_EQ(viewed, 8) << p.to_string();
  EXPECT_EQ(stored_through, 2) << p.to_string();
  EXPECT_EQ(scaled, 1) << p.to_string();
  EXPECT_EQ(count_ops(p, "gather") + count_ops(p, "slice"), 0) << p.to_string();
  // Left: from_input's copy of xt, no_view's transpose (its reshape reads it) and
  // last_moves's.
  EXPECT_EQ(count_ops(p, "transpose"), 3) << p.to_string();

  std::vector<Tensor> in{testing::random_tensor(f, {1, t, d}, rng),
                         testing::random_tensor(f, {1, d, t}, rng)};
  // No NaN here: one in q or k reaches every element of attention x V, and outputs that
  // are all NaN compare equal whatever the views did.
  in[0].store(40, -0.0);
  expect_same_results(g, in, "", 1e-4, 1e-4);
  expect_same_results(g, in, "-views", 1e-4, 1e-4);
}

// Attention's scores, softmax and weighted sum become one attention step: ViT's heads read
// in place through views (the scale as alpha, the rows stored through out_perm), and plain
// batched operands (graph inputs, which may arrive strided). Sizes split no vector or panel
// evenly, and 200 x 197 scores take two row blocks. The fused step computes exactly what
// the three steps do (the same kernels on the same rows) and matches the reference; large
// scores test the softmax's shift, a NaN in q reaches its row only. Scores that are also an
// output, a softmax over another axis and float64 stay unfused.
TEST(Rewrite, AttentionFusesScoresSoftmaxAndWeightedSum) {
  std::mt19937 rng(21);
  const DType f = DType::kFloat32;
  const int64_t t = 13, h = 3, dh = 5, d = h * dh;
  Graph g("attention");
  Var x = input(g, "x", f, {1, t, d});
  Var qkv3 = matmul(add(x, x), constant(g, testing::random_tensor(f, {d, 3 * d}, rng), "w"));
  auto heads = [&](Var v, std::vector<int64_t> perm) {
    return transpose(reshape(v, {1, t, h, dh}), std::move(perm));
  };
  Var groups = transpose(reshape(qkv3, {1, t, 3, d}), {2, 0, 1, 3});
  auto pick = [&](int64_t i) {
    Var index = constant(g, Tensor::from_doubles(DType::kInt64, {}, {static_cast<double>(i)}));
    return heads(apply("gather", {groups, index}, {{"axis", int64_t{0}}}), {0, 2, 1, 3});
  };
  Var q = mul(pick(0), scalar(g, f, 0.25));
  Var vit = matmul(softmax(matmul(q, transpose(pick(1), {0, 1, 3, 2}))), pick(2));
  Var vit_rows = reshape(transpose(vit, {0, 2, 1, 3}), {1, t, d});
  // Plain operands: (2, 3) heads, 200 queries, 197 keys, 64 wide, 19 wide values.
  Var pq = input(g, "q", f, {2, 3, 200, 64});
  Var pk = input(g, "k", f, {2, 3, 64, 197});
  Var pv = input(g, "v", f, {2, 3, 197, 19});
  Var plain = transpose(matmul(softmax(matmul(pq, pk)), pv), {0, 2, 1, 3});  // rows of heads
  // Unfused: scores also an output; a softmax over the queries.
  Var small_q = input(g, "sq", f, {2, 7, 9});
  Var small_k = input(g, "sk", f, {2, 9, 7});
  Var scores = matmul(small_q, small_k);
  Var kept = matmul(softmax(scores), small_q);
  Var other_axis = matmul(softmax(matmul(small_q, small_k), 1), small_q);
  // Three heads of two row blocks each: split in two parts, a part ends inside a head.
  Var q3 = input(g, "q3", f, {1, 3, 200, 64});
  Var k3 = input(g, "k3", f, {1, 3, 64, 197});
  Var v3 = input(g, "v3", f, {1, 3, 197, 19});
  Var three = transpose(matmul(softmax(matmul(q3, k3)), v3), {0, 2, 1, 3});
  Graph g64("attention_f64");
  Var q64 = input(g64, "q", DType::kFloat64, {2, 7, 9});
  g64.set_outputs({matmul(softmax(matmul(q64, transpose(q64, {0, 2, 1}))), q64).var()});
  g.set_outputs({vit_rows, plain, kept, scores, other_axis, three});

  const Graph p = optimized_graph(g, CompileOptions{});
  EXPECT_EQ(count_ops(p, "attention"), 3) << p.to_string();
  EXPECT_EQ(count_ops(p, "softmax"), 2) << p.to_string();
  for (const auto& node : p.nodes()) {
    if (node->op->name() != "attention") continue;
    const Attrs& props = node->op->props();
    if (node->inputs[0]->type.rank() == 3) {  // vit: every operand a view of qkv3
      EXPECT_EQ(props.count("q_view") + props.count("k_view") + props.count("v_view"), 3u);
      EXPECT_EQ(attr_float(props, "alpha"), 0.25);
    }
    EXPECT_EQ(props.count("out_perm"), 1u);
  }
  EXPECT_EQ(count_ops(optimized_graph(g64, CompileOptions{}), "attention"), 0);

  std::vector<Tensor> in{testing::random_tensor(f, {1, t, d}, rng),
                         testing::random_tensor(f, {2, 3, 200, 64}, rng),
                         testing::random_tensor(f, {2, 3, 64, 197}, rng),
                         testing::random_tensor(f, {2, 3, 197, 19}, rng),
                         testing::random_tensor(f, {2, 7, 9}, rng),
                         testing::random_tensor(f, {2, 9, 7}, rng),
                         testing::random_tensor(f, {1, 3, 200, 64}, rng),
                         testing::random_tensor(f, {1, 3, 64, 197}, rng),
                         testing::random_tensor(f, {1, 3, 197, 19}, rng)};
  in[0].store(3, -0.0);
  for (int64_t i = 0; i < 64; ++i) in[1].store(5 * 64 + i, 30.0 * in[1].load(5 * 64 + i));
  in[1].store((200 + 17) * 64 + 3, NAN);  // head 1, query 17
  expect_same_results(g, in, "", 1e-4, 1e-5);
  CompileOptions unfused;
  unfused.passes = "-attention";
  const auto want = compile(g, unfused)(in);
  const auto got = compile(g, CompileOptions{})(in);
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    EXPECT_TRUE(testing::tensors_close(got[i], want[i], 0, 0)) << "output " << i;
  }
  for (int64_t j = 0; j < 19; ++j) {  // output (2, 200, 3, 19)
    EXPECT_TRUE(std::isnan(got[1].load((17 * 3 + 1) * 19 + j)));
    EXPECT_FALSE(std::isnan(got[1].load((16 * 3 + 1) * 19 + j)));
  }
  // Strided inputs: the plain step reads any strides.
  std::vector<Tensor> strided = in;
  strided[2] = testing::non_contiguous(in[2]);
  expect_same_results(g, strided, "", 1e-4, 1e-5);
}

// A causal decoder's chain (the product scaled by a constant, then where(mask, -inf, .),
// softmax, product) keeps its steps (the pass leaves it: fused, it measured slower at 128
// tokens). The attention op written by hand with the mask as a fourth input (and the other
// where order, mask_keeps) computes bit for bit what the compiled chain does, and matches the
// reference; a NaN row, a fully masked row (-1e4 fill) and a strided mask are covered.
TEST(Rewrite, AttentionTakesACausalMaskAsAFourthInput) {
  std::mt19937 rng(23);
  const DType f = DType::kFloat32;
  const int64_t t = 37, dh = 9;
  Tensor causal = Tensor::zeros(DType::kBool, {t, t});
  for (int64_t i = 0; i < t; ++i)
    for (int64_t j = i + 1; j < t; ++j) causal.store(i * t + j, 1);
  auto build = [&](Graph& g, bool by_hand) {
    Var q = input(g, "q", f, {2, 3, t, dh});
    Var k = input(g, "k", f, {2, 3, dh, t});
    Var v = input(g, "v", f, {2, 3, t, 11});
    Var mask = input(g, "mask", DType::kBool, {t, t});
    if (by_hand) {
      g.set_outputs(
          {apply("attention", {q, k, v, mask}, {{"alpha", 0.125}, {"mask_fill", -INFINITY}}).var(),
           apply("attention", {q, k, v, mask},
                 {{"alpha", 0.25}, {"mask_fill", -1e4}, {"mask_keeps", int64_t{1}}})
               .var()});
      return;
    }
    Var hidden = matmul(
        softmax(where(mask, scalar(g, f, -INFINITY), mul(matmul(q, k), scalar(g, f, 0.125)))), v);
    Var kept =
        matmul(softmax(where(mask, mul(matmul(q, k), scalar(g, f, 0.25)), scalar(g, f, -1e4))), v);
    g.set_outputs({hidden, kept});
  };
  Graph chain("masked_chain"), fused("masked_by_hand");
  build(chain, false);
  build(fused, true);
  EXPECT_EQ(count_ops(optimized_graph(chain, CompileOptions{}), "attention"), 0);
  std::vector<Tensor> in{testing::random_tensor(f, {2, 3, t, dh}, rng),
                         testing::random_tensor(f, {2, 3, dh, t}, rng),
                         testing::random_tensor(f, {2, 3, t, 11}, rng), causal};
  in[0].store(5, NAN);  // row 0 of head 0: its one unmasked score is NaN
  // mask_keeps=1 keeps the upper triangle: the last row keeps nothing but its fill.
  for (const auto& inputs :
       {in, std::vector<Tensor>{in[0], in[1], in[2], testing::non_contiguous(causal)}}) {
    expect_same_results(fused, inputs, "", 1e-4, 1e-5);
    const auto want = compile(chain, CompileOptions{})(inputs);
    const auto got = compile(fused, CompileOptions{})(inputs);
    for (size_t i = 0; i < got.size(); ++i) {
      EXPECT_TRUE(testing::tensors_close(got[i], want[i], 0, 0)) << "output " << i;
    }
  }
}

// attention written by hand: bad props and inputs name the op and what was wrong.
TEST(Rewrite, AttentionBadPropsAndInputsAreClearErrors) {
  Graph g("attention_errors");
  const DType f = DType::kFloat32;
  Var q = input(g, "q", f, {2, 4, 8});
  Var k = input(g, "k", f, {2, 8, 5});
  Var v = input(g, "v", f, {2, 5, 3});
  Var wide = input(g, "w", f, {2, 9, 5});
  Var other = input(g, "o", f, {3, 8, 5});
  Var d = input(g, "d", DType::kFloat64, {2, 5, 3});
  auto m = testing::error_of([&] { apply("attention", {q, k}); });
  EXPECT_NE(m.find("attention takes 3 inputs"), std::string::npos) << m;
  m = testing::error_of([&] { apply("attention", {q, k, d}); });
  EXPECT_NE(m.find("attention: v is float64, not float32"), std::string::npos) << m;
  m = testing::error_of([&] { apply("attention", {q, wide, v}); });
  EXPECT_NE(m.find("attention: inner dimensions differ"), std::string::npos) << m;
  m = testing::error_of([&] { apply("attention", {q, other, v}); });
  EXPECT_NE(m.find("attention: batch dimensions differ"), std::string::npos) << m;
  m = testing::error_of([&] {
    apply("attention", {q, k, v}, {{"out_perm", std::vector<int64_t>{1, 0, 2, 3}}});
  });
  EXPECT_NE(m.find("out_perm"), std::string::npos) << m;
  m = testing::error_of([&] {
    apply("attention", {q, k, v}, {{"out_perm", std::vector<int64_t>{0, 2, 1}}});
  });
  EXPECT_NE(m.find("out_perm"), std::string::npos) << m;
  EXPECT_NE(m.find("last axis"), std::string::npos) << m;
  m = testing::error_of([&] { apply("attention", {q, k, v, v}); });
  EXPECT_NE(m.find("attention: the mask must be bool, got float32 (2, 5, 3)"), std::string::npos)
      << m;
  Var bad_mask = input(g, "bm", DType::kBool, {5, 4});
  m = testing::error_of([&] { apply("attention", {q, k, v, bad_mask}); });
  EXPECT_NE(m.find("attention: the mask must be bool (4, 5), got (5, 4)"), std::string::npos) << m;
  m = testing::error_of([&] { apply("attention", {q, k, v}, {{"mask_keeps", int64_t{2}}}); });
  EXPECT_NE(m.find("mask_keeps"), std::string::npos) << m;
  m = testing::error_of([&] { apply("attention", {q, k, v}, {{"safe", int64_t{2}}}); });
  EXPECT_NE(m.find("attribute 'safe': must be 0 or 1"), std::string::npos) << m;
  m = testing::error_of([&] { apply("softmax", {q}, {{"safe", int64_t{-1}}}); });
  EXPECT_NE(m.find("attribute 'safe': must be 0 or 1"), std::string::npos) << m;
  m = testing::error_of([&] { apply("log_softmax", {q}, {{"safe", int64_t{1}}}); });
  EXPECT_NE(m.find("unknown attribute"), std::string::npos) << m;
  m = testing::error_of([&] { apply("attention", {q, k, v}, {{"scale", 0.5}}); });
  EXPECT_NE(m.find("scale"), std::string::npos) << m;
  m = testing::error_of([&] {
    apply("attention", {q, k, v}, {{"q_view", std::vector<int64_t>{60, 3, 2, 4, 8, 32, 8, 1}}});
  });
  EXPECT_NE(m.find("q_view"), std::string::npos) << m;
  // Dynamic sizes that disagree at run time are named there, before the kernel reads them.
  Graph dyn("attention_dynamic");
  Var dq = input(dyn, "q", f, {kDynamic, 4, 8});
  Var dk = input(dyn, "k", f, {kDynamic, 8, kDynamic});
  Var dv = input(dyn, "v", f, {kDynamic, kDynamic, 3});
  dyn.set_outputs({apply("attention", {dq, dk, dv}).var()});
  Function df = compile(dyn, CompileOptions{});
  std::mt19937 drng(24);
  m = testing::error_of([&] {
    df({testing::random_tensor(f, {2, 4, 8}, drng), testing::random_tensor(f, {3, 8, 5}, drng),
        testing::random_tensor(f, {2, 5, 3}, drng)});
  });
  EXPECT_NE(m.find("attention: batch dimensions differ"), std::string::npos) << m;
  m = testing::error_of([&] {
    df({testing::random_tensor(f, {2, 4, 8}, drng), testing::random_tensor(f, {2, 8, 5}, drng),
        testing::random_tensor(f, {2, 6, 3}, drng)});
  });
  EXPECT_NE(m.find("attention: inner dimensions differ"), std::string::npos) << m;
  const auto ok =
      df({testing::random_tensor(f, {2, 4, 8}, drng), testing::random_tensor(f, {2, 8, 5}, drng),
          testing::random_tensor(f, {2, 5, 3}, drng)});
  EXPECT_EQ(ok[0].shape(), (Shape{2, 4, 3}));
  // A hand-written step computes what the three would.
  g.set_outputs({apply("attention", {q, k, v}, {{"alpha", 0.5}}).var()});
  std::mt19937 rng(22);
  expect_same_results(
      g,
      {testing::random_tensor(f, {2, 4, 8}, rng), testing::random_tensor(f, {2, 8, 5}, rng),
       testing::random_tensor(f, {2, 5, 3}, rng), testing::random_tensor(f, {2, 9, 5}, rng),
       testing::random_tensor(f, {3, 8, 5}, rng),
       testing::random_tensor(DType::kFloat64, {2, 5, 3}, rng),
       Tensor::zeros(DType::kBool, {5, 4})},
      "none");
}

// Reshapes and transposes that end in their source's element order copy nothing: a patch
// embedding's NHWC -> NCHW -> (1, C, HW) -> (1, HW, C) round trip is one reshape. A chain
// that does reorder keeps its transpose; a chain from a graph input still becomes a reshape
// (a reshape copies an input that arrives strided).
TEST(Rewrite, ViewsTurnOrderKeepingTransposeChainsIntoReshapes) {
  std::mt19937 rng(9);
  const DType f = DType::kFloat32;
  Graph g("round_trips");
  Var x = input(g, "x", f, {1, 3, 5, 4});
  Var z = relu(x);  // (1, H, W, C) made by a step
  auto round_trip = [&](Var v) {
    return transpose(reshape(transpose(v, {0, 3, 1, 2}), {1, 4, 15}), {0, 2, 1});
  };
  Var kept = round_trip(z);        // (1, 15, 4): z's order
  Var from_input = round_trip(x);  // the same from the input
  Var moved = transpose(reshape(transpose(z, {0, 3, 1, 2}), {1, 4, 15}), {1, 0, 2});  // (4,1,15)
  g.set_outputs({relu(kept), relu(from_input), relu(moved)});
  const Graph p = optimized_graph(g, CompileOptions{});
  // moved keeps the copy that reorders (its trailing transpose only moves a size-1 axis).
  EXPECT_EQ(count_ops(p, "transpose"), 1) << p.to_string();
  Tensor in = testing::random_tensor(f, {1, 3, 5, 4}, rng);
  in.store(7, -0.0);
  expect_same_results(g, {in}, "");
  expect_same_results(g, {in}, "-views");
}

// A view that reads past its input, or is malformed, is named with the attribute.
TEST(Rewrite, MatmulViewsOutsideTheirInputAreNamed) {
  Graph g("bad_view");
  Var a = input(g, "a", DType::kFloat32, {4, 6});
  Var b = input(g, "b", DType::kFloat32, {6, 2});
  // (4, 6) at strides (6, 1) from offset 1 reads element 24 of 24.
  const std::string past = testing::error_of([&] {
    apply("matmul", {a, b}, {{"a_view", std::vector<int64_t>{1, 2, 4, 6, 6, 1}}});
  });
  EXPECT_NE(past.find("a_view: the view reads element 24 of an input of 24"), std::string::npos)
      << past;
  const std::string malformed = testing::error_of([&] {
    apply("matmul", {a, b}, {{"b_view", std::vector<int64_t>{0, 2, 6, 2, 2}}});
  });
  EXPECT_NE(malformed.find("b_view"), std::string::npos) << malformed;
  const std::string negative = testing::error_of([&] {
    apply("matmul", {a, b}, {{"b_view", std::vector<int64_t>{0, 2, 6, 2, -2, 1}}});
  });
  EXPECT_NE(negative.find("negative dimension or stride at axis 0"), std::string::npos) << negative;
  // out_perm must be a permutation of the product's axes that keeps the last one last, and
  // alpha needs float operands.
  const std::vector<std::pair<Attrs, std::string>> bad = {
      {{{"out_perm", std::vector<int64_t>{0, 0}}}, "attribute 'out_perm': is no permutation"},
      {{{"out_perm", std::vector<int64_t>{1, 0}}},
       "attribute 'out_perm': must keep the last axis last"},
      {{{"out_perm", std::vector<int64_t>{1, 0, 2}}}, "out_perm has 3 axes, the product 2"},
  };
  for (const auto& [props, want] : bad) {
    const std::string got = testing::error_of([&] { apply("matmul", {a, b}, props); });
    EXPECT_NE(got.find(want), std::string::npos) << got;
  }
  Var ia = input(g, "ia", DType::kInt32, {4, 6});
  Var ib = input(g, "ib", DType::kInt32, {6, 2});
  const std::string ints = testing::error_of([&] { apply("matmul", {ia, ib}, {{"alpha", 0.5}}); });
  EXPECT_NE(ints.find("alpha needs float operands"), std::string::npos) << ints;
}

}  // namespace
}  // namespace kiln

namespace kiln {
namespace {

// The Winograd weight transform a plan records is replayed from data: a weight that is not a
// blocked 3x3 one, or a tile other than 2 or 4, is an error naming the transform and what it
// got, and a right one comes back ((T + 2)^2, M/8, C, 8) with G g G^T's corner elements g's
// own corner taps (scaled by 1/16 at the first corner of F(4x4)).
// A plan's bfloat16 rounding takes float32 panels of its n columns and nothing else, named;
// each value lands at its pair's place, rounded to nearest with ties to even, NaN kept quiet,
// an odd K's last pair and the columns past n zero.
TEST(Recipe, BfloatPanelsRejectOtherInputsAndRoundEachValue) {
  std::mt19937 rng(78);
  const Tensor f32 = pack_gemm_panels(testing::random_tensor(DType::kFloat32, {5, 20}, rng), false);
  const Tensor f64 = pack_gemm_panels(testing::random_tensor(DType::kFloat64, {5, 20}, rng), false);
  for (const auto& [panels, n] : std::vector<std::pair<Tensor, int64_t>>{
           {f64, 20}, {f32, 40}, {testing::random_tensor(DType::kFloat32, {5, 20}, rng), 20}}) {
    const std::string m = testing::error_of([&] {
      run_transform(kGemmPanelsBf16, {{"n", n}}, 0, {panels});
    });
    EXPECT_NE(m.find("gemm_panels_to_bf16 takes float32 GEMM panels of " + std::to_string(n) +
                     " columns"),
              std::string::npos)
        << m;
    EXPECT_NE(m.find(dims_to_string(panels.shape())), std::string::npos) << m;
  }
  EXPECT_NE(testing::error_of([&] {
              run_transform(kGemmPanelsBf16, {{"n", int64_t{20}}}, 0, {});
            }).find("gemm_panels_bf16 takes one packed matrix"),
            std::string::npos);

  Tensor b = Tensor::zeros(DType::kFloat32, {5, 20});  // K = 5: the third pair is half padding
  auto* v = static_cast<float*>(b.data());
  v[0] = 1.0f + 0x1p-8f;       // a tie: to the even 1.0 (0x3f80)
  v[1] = 1.0f + 3 * 0x1p-8f;   // a tie: up to the even 0x3f82
  v[20 + 17] = -2.5f;          // row 1, column 17: the second panel
  v[80 + 19] = std::nanf("");  // row 4 (the last, odd K), column 19
  const Tensor h =
      run_transform(kGemmPanelsBf16, {{"n", int64_t{20}}}, 0, {pack_gemm_panels(b, false)});
  ASSERT_EQ(h.dtype(), DType::kBFloat16);
  ASSERT_EQ(h.shape(), (Shape{2, 3, 32}));
  const auto* bits = static_cast<const uint16_t*>(h.data());
  // (k, column) sits at panel column/16 (3 rows of 32 apart), row k/2, lane (column%16)*2 + k%2.
  auto at = [&](int k, int j) { return bits[j / 16 * 3 * 32 + k / 2 * 32 + j % 16 * 2 + k % 2]; };
  EXPECT_EQ(at(0, 0), 0x3f80);
  EXPECT_EQ(at(0, 1), 0x3f82);
  EXPECT_EQ(at(1, 17), 0xc020);
  EXPECT_EQ(at(4, 19) & 0x7fc0, 0x7fc0);  // a quiet NaN
  EXPECT_EQ(at(5, 19), 0);                // an odd K's padding
  EXPECT_EQ(at(4, 20), 0);                // a column past n
}

// A packed stem weight's recipe (c4: three channels packed as four) re-derives the packing
// the pass made, and a recipe asking c4 of another weight (a corrupt or forged entry) is an
// error naming the transform and the weight, not a wrong packing.
TEST(Recipe, WidenedStemPackingRejectsOtherWeights) {
  std::mt19937 rng(79);
  const Tensor w = testing::random_tensor(DType::kInt8, {5, 3, 3, 3}, rng, -100, 100);
  const Tensor packed =
      run_transform(kPackQconv, {{"group", int64_t{1}}, {"c4", int64_t{1}}}, 0, {w});
  EXPECT_EQ(packed.numel(), qgemm_packed_bytes(36, 5));
  for (int64_t m = 0; m < 5; ++m) {
    for (int64_t t = 0; t < 36; ++t) {
      const int64_t want = t % 4 == 3 ? 0 : w.load_int((m * 3 + t % 4) * 9 + t / 4);
      ASSERT_EQ(qgemm_packed_at(static_cast<const int8_t*>(packed.data()), 36, t, m), want)
          << "tap row " << t << ", channel " << m;
    }
  }
  const Tensor four = testing::random_tensor(DType::kInt8, {5, 4, 3, 3}, rng, -100, 100);
  const std::string m = testing::error_of([&] {
    run_transform(kPackQconv, {{"group", int64_t{1}}, {"c4", int64_t{1}}}, 0, {four});
  });
  EXPECT_NE(m.find("pack_qconv with c4 takes a three-channel weight of group 1"), std::string::npos)
      << m;
  EXPECT_NE(m.find(dims_to_string(four.shape())), std::string::npos) << m;
}

TEST(Recipe, WinogradTransformRejectsOtherWeightsAndKeepsCornerTaps) {
  std::mt19937 rng(77);
  for (const Shape& bad : {Shape{2, 16, 8}, Shape{2, 144, 4}, Shape{2, 144}}) {
    const std::string m = testing::error_of([&] {
      run_transform(kWinogradWeights, {}, 0, {testing::random_tensor(DType::kFloat32, bad, rng)});
    });
    EXPECT_NE(m.find("winograd_weights takes one blocked float32 3x3 weight"), std::string::npos)
        << m;
    EXPECT_NE(m.find(dims_to_string(bad)), std::string::npos) << m;
  }
  const Tensor w = testing::random_tensor(DType::kFloat32, {2, 144, 8}, rng);
  const Tensor u = run_transform(kWinogradWeights, {}, 0, {w});
  ASSERT_EQ(u.shape(), (Shape{16, 2, 16, 8}));
  // Element 0 (row 0, column 0) of output block 1, input channel 9, lane 5: tap (1, 0, 0)
  // of input lane 1 in the blocked order.
  EXPECT_EQ(u.load(((0 * 2 + 1) * 16 + 9) * 8 + 5), w.load((1 * 144 + 1 * 9 * 8 + 1) * 8 + 5));
  // Tile 4 (F(4x4)): (36, M/8, C, 8); G's first row is {1/4, 0, 0} and its last {0, 0, 1}, so
  // element 0 is the corner tap over 16 and element 35 (row 5, column 5) the opposite corner.
  const Tensor u4 = run_transform(kWinogradWeights, {{"tile", int64_t{4}}}, 0, {w});
  ASSERT_EQ(u4.shape(), (Shape{36, 2, 16, 8}));
  EXPECT_EQ(u4.load(((0 * 2 + 1) * 16 + 9) * 8 + 5),
            w.load((1 * 144 + 1 * 9 * 8 + 1) * 8 + 5) / 16);
  EXPECT_EQ(u4.load(((35 * 2 + 1) * 16 + 9) * 8 + 5),
            w.load((1 * 144 + (1 * 9 + 8) * 8 + 1) * 8 + 5));
  const std::string m = testing::error_of([&] {
    run_transform(kWinogradWeights, {{"tile", int64_t{3}}}, 0, {w});
  });
  EXPECT_NE(m.find("winograd_weights takes tile 2 or 4, got 3"), std::string::npos) << m;
}

}  // namespace
}  // namespace kiln
