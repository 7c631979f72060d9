// Autodiff: every op's gradient against central finite differences in float64 (random
// shapes, broadcasting, non-contiguous inputs), computed by the compiled module; the
// finite differences come from the reference interpreter (ops/reference.h), so neither side
// checks itself. Also: ties, zero and summed gradients, and the errors.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <functional>
#include <random>

#include "compiler/compile.h"
#include "frontend/json/json_model.h"
#include "ops/builders.h"
#include "ops/control_builders.h"
#include "ops/reference.h"
#include "ops/scalar_table.h"
#include "rewrite/autodiff/grad.h"
#include "runtime/io/npy.h"
#include "tests/helpers.h"

namespace kiln {
namespace {

using testing::error_of;
using testing::non_contiguous;
using testing::random_tensor;

struct In {
  std::string name;
  Shape shape;
  double lo = -2, hi = 2;
  DType dtype = DType::kFloat64;
  bool differentiate = true;  // false: an index, a mask, a bound we hold still
};

using Body = std::function<std::vector<Var>(const std::vector<Var>&)>;

// cost = sum_k sum(out_k * r_k) with random r_k, so every output element has its own weight.
Var build(Graph& g, const std::vector<In>& ins, const Body& body, std::vector<Var>& xs,
          std::vector<Var>& rs) {
  for (const In& in : ins) xs.push_back(input(g, in.name, in.dtype, in.shape));
  std::vector<Var> outs = body(xs);
  Var cost;
  for (size_t k = 0; k < outs.size(); ++k) {
    rs.push_back(input(g, "r" + std::to_string(k), outs[k].dtype(), outs[k].type().dims));
    Var term = sum(outs[k] * rs.back());
    cost = cost.var() ? cost + term : term;
  }
  g.set_outputs({cost.var()});
  return cost;
}

// The analytic gradients (compiled, non-contiguous inputs) against central differences.
void check_gradients(const std::string& what, const std::vector<In>& ins, const Body& body,
                     double tol = 1e-6) {
  SCOPED_TRACE(what);
  Graph fwd(what);
  std::vector<Var> fx, fr;
  build(fwd, ins, body, fx, fr);
  Graph bwd(what + "_grad");
  std::vector<Var> bx, br;
  Var cost = build(bwd, ins, body, bx, br);
  std::vector<Variable*> wrt;
  std::vector<size_t> which;
  for (size_t i = 0; i < ins.size(); ++i) {
    if (ins[i].differentiate) {
      wrt.push_back(bx[i].var());
      which.push_back(i);
    }
  }
  std::vector<Variable*> grads = grad(bwd, cost.var(), wrt);
  bwd.set_outputs(grads);

  std::mt19937 rng(static_cast<unsigned>(std::hash<std::string>{}(what)));
  std::vector<Tensor> values;
  for (const In& in : ins) values.push_back(random_tensor(in.dtype, in.shape, rng, in.lo, in.hi));
  for (const Var& r : fr) {
    values.push_back(random_tensor(DType::kFloat64, r.type().dims, rng, -1.5, 1.5));
  }
  std::vector<Tensor> strided;
  for (const Tensor& v : values) strided.push_back(non_contiguous(v));
  const std::vector<Tensor> analytic = compile(bwd)(strided);

  const double h = 1e-6;
  for (size_t w = 0; w < which.size(); ++w) {
    const size_t i = which[w];
    Tensor x = values[i].clone();
    values[i] = x;
    for (int64_t j = 0; j < x.numel(); ++j) {
      const double x0 = x.load(j);
      x.store(j, x0 + h);
      const double up = evaluate_reference(fwd, values)[0].load(0);
      x.store(j, x0 - h);
      const double down = evaluate_reference(fwd, values)[0].load(0);
      x.store(j, x0);
      const double fd = (up - down) / (2 * h);
      const double got = analytic[w].load(j);
      EXPECT_NEAR(got, fd, tol * std::max(1.0, std::fabs(fd)))
          << "d cost / d " << ins[i].name << "[" << j << "] at " << x0;
    }
  }
}

std::vector<double> values_of(const Tensor& t) { return t.to_doubles(); }

// The value range each elementwise op is smooth on.
In unary_input(const std::string& op) {
  In in{op, {3, 4}};
  if (op == "log" || op == "sqrt" || op == "reciprocal") in.lo = 0.3;
  if (op == "log1p") in.lo = -0.7;
  if (op == "asin" || op == "acos" || op == "atanh") in.lo = -0.9, in.hi = 0.9;
  if (op == "acosh") in.lo = 1.2, in.hi = 3;
  return in;
}

TEST(Grad, EveryUnaryElementwiseOpMatchesFiniteDifferences) {
  std::vector<In> ins;
  std::vector<std::string> ops;
  for (const ScalarOpDef& def : scalar_ops()) {
    if (def.arity != 1 || def.derivative.empty() || def.domain == Domain::kBool || def.name == "cast") continue;
    ops.emplace_back(def.name);
    ins.push_back(unary_input(ops.back()));
  }
  ASSERT_GE(ops.size(), 30u);
  check_gradients("unary", ins, [&](const std::vector<Var>& x) {
    std::vector<Var> out;
    for (size_t k = 0; k < ops.size(); ++k) out.push_back(apply(ops[k], {x[k]}));
    return out;
  });
}

TEST(Grad, BinaryOpsWithBroadcastingMatchFiniteDifferences) {
  std::vector<In> ins;
  std::vector<std::string> ops;
  for (const ScalarOpDef& def : scalar_ops()) {
    if (def.arity != 2 || def.derivative.empty()) continue;
    const std::string op(def.name);
    ops.push_back(op);
    In a{op + "_a", {2, 1, 3}}, b{op + "_b", {4, 3}};
    if (op == "pow") a.lo = 0.5;
    if (op == "div" || op == "mod" || op == "fmod") b.lo = 0.5, a.lo = -5, a.hi = 5;
    ins.push_back(a);
    ins.push_back(b);
  }
  ASSERT_EQ(ops.size(), 9u);  // add sub mul div pow mod fmod maximum minimum
  check_gradients("binary", ins, [&](const std::vector<Var>& x) {
    std::vector<Var> out;
    for (size_t k = 0; k < ops.size(); ++k) out.push_back(apply(ops[k], {x[2 * k], x[2 * k + 1]}));
    return out;
  });
}

TEST(Grad, ClipWhereAndCastMatchFiniteDifferences) {
  check_gradients("clip_where",
                  {{"x", {3, 4}},
                   {"lo", {4}, -1.5, 0},
                   {"hi", {3, 1}, 0, 1.5},
                   {"cond", {3, 4}, 0, 2, DType::kBool, false},
                   {"a", {3, 4}},
                   {"b", {4}}},
                  [](const std::vector<Var>& x) {
                    return std::vector<Var>{clip(x[0], x[1], x[2]), where(x[3], x[4], x[5]),
                                            cast(cast(x[4], DType::kFloat64), DType::kFloat64)};
                  });
}

TEST(Grad, ReductionsMatchFiniteDifferences) {
  check_gradients("reduce",
                  {{"sum", {2, 3, 4}}, {"mean", {2, 3, 4}}, {"max", {2, 3, 4}}, {"min", {3, 5}},
                   {"prod", {2, 3}, 0.5, 1.5}, {"all", {3, 4}}},
                  [](const std::vector<Var>& x) {
                    return std::vector<Var>{sum(x[0], {0, 2}), mean(x[1], {1}, true),
                                            max(x[2], {2}), min(x[3], {0}, true),
                                            prod(x[4], {1}), mean(x[5])};
                  });
}

TEST(Grad, SoftmaxAndLogSoftmaxMatchFiniteDifferences) {
  check_gradients("softmax", {{"a", {3, 5}}, {"b", {2, 4, 3}}, {"c", {3, 5}}},
                  [](const std::vector<Var>& x) {
                    return std::vector<Var>{softmax(x[0]), softmax(x[1], 1), log_softmax(x[2], 0)};
                  });
}

TEST(Grad, LayerNormMatchesFiniteDifferences) {
  check_gradients("layer_norm", {{"a", {3, 7}}, {"b", {2, 3, 4}}}, [](const std::vector<Var>& x) {
    return std::vector<Var>{apply("layer_norm", {x[0]}, {{"epsilon", 1e-3}}),
                            apply("layer_norm", {x[1]}, {{"axis", int64_t{1}}, {"epsilon", 1e-5}})};
  });
}

TEST(Grad, MatmulAndGemmMatchFiniteDifferences) {
  check_gradients("matmul",
                  {{"a", {3, 4}}, {"b", {4, 5}}, {"ba", {2, 3, 4}}, {"bb", {4, 2}},
                   {"c", {2, 1, 3, 4}}, {"d", {3, 4, 2}}, {"v", {4}}, {"m", {3, 4}}, {"u", {4}}},
                  [](const std::vector<Var>& x) {
                    return std::vector<Var>{matmul(x[0], x[1]), matmul(x[2], x[3]),
                                            matmul(x[4], x[5]), matmul(x[6], x[1]),
                                            matmul(x[7], x[6]), matmul(x[8], x[6])};
                  });
  for (int ta = 0; ta < 2; ++ta) {
    for (int tb = 0; tb < 2; ++tb) {
      const Shape a = ta ? Shape{4, 3} : Shape{3, 4}, b = tb ? Shape{5, 4} : Shape{4, 5};
      check_gradients("gemm" + std::to_string(ta) + std::to_string(tb),
                      {{"a", a}, {"b", b}, {"c", {5}}}, [&](const std::vector<Var>& x) {
                        return std::vector<Var>{gemm(x[0], x[1], x[2], 0.7, 1.3, ta, tb)};
                      });
    }
  }
}

TEST(Grad, MovementOpsMatchFiniteDifferences) {
  check_gradients(
      "movement",
      {{"t", {2, 3, 4}}, {"r", {2, 6}}, {"f", {2, 3, 2}}, {"c0", {2, 1}}, {"c1", {2, 3}},
       {"s", {5, 7}}, {"p", {2, 3}}, {"e", {3, 1}}, {"cs", {3, 4}}},
      [](const std::vector<Var>& x) {
        return std::vector<Var>{
            transpose(x[0], {2, 0, 1}),
            reshape(x[1], {3, 4}),
            flatten(x[2], 2),
            concat({x[3], x[4], x[3]}, 1),
            apply("slice", {x[5]}, {{"starts", std::vector<int64_t>{1, -1}}, {"ends", std::vector<int64_t>{5, -8}},
                                    {"axes", std::vector<int64_t>{0, 1}}, {"steps", std::vector<int64_t>{2, -2}}}),
            apply("pad", {x[6]}, {{"pads", std::vector<int64_t>{1, 0, 0, 2}}, {"value", 0.5}}),
            apply("expand", {x[7]}, {{"shape", std::vector<int64_t>{2, 3, 4}}}),
            apply("cumsum", {x[8]}, {{"axis", int64_t(1)}, {"exclusive", int64_t(1)}}),
            apply("cumsum", {x[8]}, {{"axis", int64_t(0)}, {"reverse", int64_t(1)}}),
        };
      });
}

TEST(Grad, IndexingOpsMatchFiniteDifferences) {
  // Indices repeat (their gradients add) and count from the end.
  check_gradients(
      "indexing",
      {{"g", {5, 3}}, {"gi", {2, 3}, -5, 4.4, DType::kInt64, false},
       {"ge", {3, 4}}, {"gei", {3, 2}, 0, 3.4, DType::kInt64, false},
       {"nd", {3, 4}}, {"ndi", {5, 2}, 0, 2.4, DType::kInt64, false},
       {"sd", {4, 3}}, {"su", {2, 3}}, {"sa", {4, 3}}, {"sau", {2, 3}},
       {"tk", {3, 6}}},
      [](const std::vector<Var>& x) {
        Tensor si = Tensor::from_doubles(DType::kInt64, {2, 3}, {3, 0, 1, 1, 2, 0});
        Var sidx = constant(x[0].graph(), si);
        return std::vector<Var>{
            apply("gather", {x[0], x[1]}, {{"axis", int64_t(0)}}),
            apply("gather", {x[0], apply("cast", {x[3]}, {{"to", std::string("int64")}})}, {{"axis", int64_t(1)}}),
            apply("gather_elements", {x[2], x[3]}, {{"axis", int64_t(1)}}),
            apply("gather_nd", {x[4], x[5]}),
            apply("scatter_elements", {x[6], sidx, x[7]}, {{"axis", int64_t(0)}}),
            apply("scatter_elements", {x[8], sidx, x[9]}, {{"axis", int64_t(0)}, {"reduction", std::string("add")}}),
            apply_multi("top_k", {x[10]}, {{"k", int64_t(3)}, {"axis", int64_t(1)}})[0],
        };
      });
}

TEST(Grad, ConvolutionsMatchFiniteDifferences) {
  // Stride, asymmetric padding, dilation, groups, a floor-mode tail the forward never reads.
  check_gradients("conv2d", {{"x", {2, 4, 7, 6}}, {"w", {6, 2, 3, 2}}, {"b", {6}}},
                  [](const std::vector<Var>& x) {
                    return std::vector<Var>{apply("conv", {x[0], x[1], x[2]},
                                                  {{"group", int64_t(2)},
                                                   {"strides", std::vector<int64_t>{2, 3}},
                                                   {"dilations", std::vector<int64_t>{1, 2}},
                                                   {"pads", std::vector<int64_t>{1, 0, 2, 1}}})};
                  });
  check_gradients("depthwise", {{"x", {1, 3, 5, 5}}, {"w", {3, 1, 3, 3}}},
                  [](const std::vector<Var>& x) {
                    return std::vector<Var>{apply("conv", {x[0], x[1]},
                                                  {{"group", int64_t(3)},
                                                   {"pads", std::vector<int64_t>{1, 1, 1, 1}}})};
                  });
  // A small image's input gradient goes through conv_input_grad (stride 1).
  check_gradients("small_image", {{"x", {2, 4, 3, 3}}, {"w", {5, 4, 3, 3}}},
                  [](const std::vector<Var>& x) {
                    return std::vector<Var>{
                        apply("conv", {x[0], x[1]}, {{"pads", std::vector<int64_t>{1, 1, 1, 1}}})};
                  });
  check_gradients("conv1d", {{"x", {2, 3, 9}}, {"w", {2, 3, 4}}},
                  [](const std::vector<Var>& x) {
                    return std::vector<Var>{apply("conv", {x[0], x[1]},
                                                  {{"strides", std::vector<int64_t>{2}},
                                                   {"pads", std::vector<int64_t>{3, 0}}})};
                  });
}

// conv_transpose's gradient is conv (for X) and conv_weight_grad with the roles swapped (for
// W): strides, uneven pads, output_padding, dilations, groups, negative pads and 1-D.
TEST(Grad, TransposedConvolutionsMatchFiniteDifferences) {
  using V = std::vector<int64_t>;
  check_gradients("conv_transpose2d", {{"x", {2, 4, 3, 4}}, {"w", {4, 3, 3, 2}}, {"b", {6}}},
                  [](const std::vector<Var>& x) {
                    return std::vector<Var>{apply("conv_transpose", {x[0], x[1], x[2]},
                                                  {{"group", int64_t(2)},
                                                   {"strides", V{2, 3}},
                                                   {"dilations", V{1, 2}},
                                                   {"pads", V{1, 0, 2, 1}},
                                                   {"output_padding", V{1, 0}}})};
                  });
  check_gradients("conv_transpose_negative_pads", {{"x", {1, 2, 3, 3}}, {"w", {2, 2, 2, 3}}},
                  [](const std::vector<Var>& x) {
                    return std::vector<Var>{apply(
                        "conv_transpose", {x[0], x[1]},
                        {{"strides", V{2, 2}}, {"pads", V{-1, 1, 0, -2}}})};
                  });
  check_gradients("conv_transpose1d", {{"x", {2, 3, 5}}, {"w", {3, 2, 4}}},
                  [](const std::vector<Var>& x) {
                    return std::vector<Var>{apply("conv_transpose", {x[0], x[1]},
                                                  {{"strides", V{2}}, {"pads", V{1, 2}}})};
                  });
}

// Pads that read the data send each position's gradient back to the position it read:
// reflections that bounce past both ends, repeated edges, a wrap.
TEST(Grad, ReflectEdgeAndWrapPadsMatchFiniteDifferences) {
  using V = std::vector<int64_t>;
  check_gradients("pad_modes", {{"r", {2, 3, 4}}, {"e", {2, 3, 4}}, {"w", {3, 5}}},
                  [](const std::vector<Var>& x) {
                    return std::vector<Var>{
                        apply("pad", {x[0]},
                              {{"pads", V{0, 2, 7, 1, 0, 3}}, {"mode", std::string("reflect")}}),
                        apply("pad", {x[1]},
                              {{"pads", V{1, 0, 2, 0, 2, 5}}, {"mode", std::string("edge")}}),
                        apply("pad", {x[2]},
                              {{"pads", V{2, 4, 1, 5}}, {"mode", std::string("wrap")}})};
                  });
}

// GridSample's gradient for the image and the grid: bilinear and bicubic under every padding
// and both corner conventions (grids past the edges: clamped coordinates have none, reflected
// ones flip its sign), nearest for the image only.
TEST(Grad, GridSampleMatchesFiniteDifferences) {
  for (const char* mode : {"bilinear", "bicubic", "nearest"}) {
    for (const char* pad : {"zeros", "border", "reflection"}) {
      for (int64_t align : {0, 1}) {
        const bool nearest = std::string(mode) == "nearest";
        In grid{"g", {2, 3, 4, 2}, -1.4, 1.4};
        grid.differentiate = !nearest;
        check_gradients(std::string("grid_sample_") + mode + "_" + pad + std::to_string(align),
                        {{"x", {2, 3, 4, 5}}, grid}, [&](const std::vector<Var>& x) {
                          return std::vector<Var>{apply("grid_sample", {x[0], x[1]},
                                                        {{"mode", std::string(mode)},
                                                         {"padding_mode", std::string(pad)},
                                                         {"align_corners", align}})};
                        });
      }
    }
  }
}

// RoiAlign's gradient for the image (avg mode), boxes held still: adaptive and fixed grids,
// boxes past the edges, both coordinate modes.
TEST(Grad, RoiAlignMatchesFiniteDifferences) {
  for (int64_t half : {0, 1}) {
    for (int64_t ratio : {0, 2}) {
      In rois{"rois", {4, 4}, -1.0, 6.5};
      rois.differentiate = false;
      In batch{"batch", {4}, 0.0, 0.4, DType::kInt64};
      batch.differentiate = false;
      check_gradients("roi_align_" + std::to_string(half) + std::to_string(ratio),
                      {{"x", {1, 2, 6, 7}}, rois, batch}, [&](const std::vector<Var>& x) {
                        return std::vector<Var>{apply("roi_align", {x[0], x[1], x[2]},
                                                      {{"output_height", int64_t{2}},
                                                       {"output_width", int64_t{3}},
                                                       {"sampling_ratio", ratio},
                                                       {"half_pixel", half}})};
                      });
    }
  }
}

TEST(Grad, PoolsMatchFiniteDifferences) {
  check_gradients(
      "pools",
      {{"m", {2, 2, 7, 6}}, {"a", {1, 2, 6, 5}}, {"ai", {1, 2, 6, 5}}, {"m1", {2, 3, 8}},
       {"tm", {2, 2, 6, 4}}, {"ta", {1, 2, 4, 6}}, {"tm1", {2, 3, 8}}},
      [](const std::vector<Var>& x) {
        return std::vector<Var>{
            apply("max_pool", {x[0]}, {{"kernel_shape", std::vector<int64_t>{3, 2}},
                                       {"strides", std::vector<int64_t>{2, 2}},
                                       {"pads", std::vector<int64_t>{1, 0, 1, 1}},
                                       {"ceil_mode", int64_t(1)}}),
            apply("average_pool", {x[1]}, {{"kernel_shape", std::vector<int64_t>{3, 3}},
                                           {"strides", std::vector<int64_t>{2, 2}},
                                           {"pads", std::vector<int64_t>{1, 1, 1, 1}}}),
            apply("average_pool", {x[2]}, {{"kernel_shape", std::vector<int64_t>{2, 3}},
                                            {"pads", std::vector<int64_t>{1, 1, 0, 1}},
                                            {"count_include_pad", int64_t(1)}}),
            apply("max_pool", {x[3]}, {{"kernel_shape", std::vector<int64_t>{3}},
                                       {"strides", std::vector<int64_t>{2}}}),
            // Windows that tile the input (the reshape path).
            apply("max_pool", {x[4]}, {{"kernel_shape", std::vector<int64_t>{2, 2}},
                                       {"strides", std::vector<int64_t>{2, 2}}}),
            apply("average_pool", {x[5]}, {{"kernel_shape", std::vector<int64_t>{2, 3}},
                                           {"strides", std::vector<int64_t>{2, 3}}}),
            apply("max_pool", {x[6]}, {{"kernel_shape", std::vector<int64_t>{2}},
                                       {"strides", std::vector<int64_t>{2}}}),
        };
      });
}

// Exact ties: shared evenly by maximum and the max reduction, taken by the first tap of a
// max pool (as the forward keeps the first maximum).
TEST(Grad, TiesFollowTheForwardsChoice) {
  Graph g("ties");
  Var x = input(g, "x", DType::kFloat64, {1, 1, 2, 2});
  Var c = sum(maximum(x, x)) + sum(max(x)) +
          sum(apply("max_pool", {x}, {{"kernel_shape", std::vector<int64_t>{2, 2}}})) +
          sum(apply("max_pool", {x}, {{"kernel_shape", std::vector<int64_t>{2, 2}},
                                      {"strides", std::vector<int64_t>{2, 2}}}));
  auto gx = grad(g, c.var(), {x.var()});
  g.set_outputs(gx);
  Tensor v = Tensor::from_doubles(DType::kFloat64, {1, 1, 2, 2}, {3, 3, 1, 3});
  // maximum(x, x): 0.5 + 0.5 per element; max: 1/3 to each of the three 3s; each pool
  // (sliding and tiling): the first 3.
  const std::vector<double> want{1 + 1.0 / 3 + 2, 1 + 1.0 / 3, 1, 1 + 1.0 / 3};
  const auto got = values_of(compile(g)({v})[0]);
  for (size_t i = 0; i < want.size(); ++i) EXPECT_NEAR(got[i], want[i], 1e-12) << i;
}

TEST(Grad, UsesAreSummedAndUnusedInputsGetZeros) {
  Graph g("uses");
  Var x = input(g, "x", DType::kFloat32, {3});
  Var unused = input(g, "unused", DType::kFloat32, {2, 2});
  Var c = sum(x * x + x + exp(x) * 0.0);
  auto gs = grad(g, c.var(), {x.var(), unused.var()});
  g.set_outputs(gs);
  // -0.0 and the infinities too: d/dx (x^2 + x) = 2x + 1.
  Tensor xv = Tensor::from_doubles(DType::kFloat32, {3}, {-0.0, 2.5, -4});
  Tensor uv = Tensor::from_doubles(DType::kFloat32, {2, 2}, {NAN, INFINITY, -INFINITY, 1});
  auto out = compile(g)({xv, uv});
  EXPECT_EQ(values_of(out[0]), (std::vector<double>{1, 6, -7}));
  EXPECT_EQ(values_of(out[1]), (std::vector<double>{0, 0, 0, 0}));
  // The backward reads the forward's exp: one exp node, not two.
  int exps = 0;
  for (const auto& n : g.nodes()) exps += n->op->name() == "exp";
  EXPECT_EQ(exps, 1);
}

TEST(Grad, ErrorsNameTheNodeOpAndInput) {
  {
    Graph g("argmax");
    Var x = input(g, "x", DType::kFloat32, {4});
    Var c = sum(cast(apply("arg_max", {x}, {{"axis", int64_t(0)}}), DType::kFloat32));
    const std::string e = error_of([&] { grad(g, c.var(), {x.var()}); });
    EXPECT_NE(e.find("only through values without a gradient"), std::string::npos) << e;
    EXPECT_NE(e.find("cast"), std::string::npos) << e;
    EXPECT_NE(e.find("int64"), std::string::npos) << e;
  }
  {
    Graph g("resize");
    Var x = input(g, "x", DType::kFloat32, {1, 1, 2, 2});
    Var y = apply("resize", {x}, {{"scales", std::vector<double>{1, 1, 2, 2}}, {"mode", std::string("nearest")}});
    Var c = sum(y);
    const std::string e = error_of([&] { grad(g, c.var(), {x.var()}); });
    EXPECT_NE(e.find("resize"), std::string::npos) << e;
    EXPECT_NE(e.find("input 0 'x' is not differentiable"), std::string::npos) << e;
  }
  {
    Graph g("vector_cost");
    Var x = input(g, "x", DType::kFloat32, {4});
    const std::string e = error_of([&] { grad(g, exp(x).var(), {x.var()}); });
    EXPECT_NE(e.find("must be a scalar"), std::string::npos) << e;
    Var i = input(g, "i", DType::kInt64, {4});
    const std::string e2 = error_of([&] { grad(g, sum(x).var(), {i.var()}); });
    EXPECT_NE(e2.find("only floating-point values have gradients"), std::string::npos) << e2;
  }
  {
    Graph g("packed_conv");  // as the pack pass leaves it, read back from kiln's JSON
    Var x = input(g, "x", DType::kFloat32, {1, 8, 5, 5});
    Var w = input(g, "w", DType::kFloat32, {1, 72, 16});
    Var c = sum(apply("conv", {x, w},
                      {{"packed_m", int64_t{16}}, {"kernel_shape", std::vector<int64_t>{3, 3}}}));
    const std::string e = error_of([&] { grad(g, c.var(), {x.var()}); });
    EXPECT_NE(e.find("packed-weight convolution"), std::string::npos) << e;
  }
}

TEST(Grad, JsonGraphsNameTheirGradients) {
  const std::string text = R"({
    "inputs": [{"name": "x", "dtype": "float64", "shape": [3]},
               {"name": "w", "dtype": "float64", "shape": [3]}],
    "nodes": [{"op": "mul", "inputs": ["x", "w"], "outputs": ["xw"]},
              {"op": "tanh", "inputs": ["xw"], "outputs": ["t"]},
              {"op": "reduce_sum", "inputs": ["t"], "outputs": ["y"], "attrs": {"keepdims": 0}}],
    "gradients": [{"cost": "y", "wrt": ["w", "x"], "outputs": ["dy_dw", "dy_dx"]}],
    "outputs": ["y", "dy_dw", "dy_dx"]
  })";
  Graph g = parse_json_model(text, "grad.json", ".");
  const std::vector<double> x{0.5, -1, 2}, w{1.5, 0.25, -0.75};
  auto out = compile(g)({Tensor::from_doubles(DType::kFloat64, {3}, x),
                         Tensor::from_doubles(DType::kFloat64, {3}, w)});
  for (int i = 0; i < 3; ++i) {
    const double d = 1 - std::tanh(x[i] * w[i]) * std::tanh(x[i] * w[i]);
    EXPECT_NEAR(out[1].load(i), d * x[i], 1e-14);
    EXPECT_NEAR(out[2].load(i), d * w[i], 1e-14);
  }
  std::string bad = text;
  bad.replace(bad.find(R"("cost": "y")"), 11, R"("cost": "z")");
  const std::string e = error_of([&] { parse_json_model(bad, "grad.json", "."); });
  EXPECT_NE(e.find("gradients[0].cost"), std::string::npos) << e;
  EXPECT_NE(e.find("unknown variable 'z'"), std::string::npos) << e;
}

// `kiln grad` on the ONNX examples against PyTorch autograd's gradients of y.sum()
// (examples/onnx/export_gradients.py). The MLP ends in a softmax, whose sum is constant:
// both sides' gradients there are rounding noise below 1e-7, which the tolerance admits.
TEST(Grad, CliGradientsOfTheOnnxExamplesMatchPyTorch) {
  namespace fs = std::filesystem;
  for (const std::string model : {"mlp", "lenet", "resblock", "attention"}) {
    SCOPED_TRACE(model);
    const fs::path dir = fs::path(KILN_EXAMPLES_DIR) / "onnx" / model;
    const std::string out = testing::temp_dir("grad_" + model);
    const auto r = testing::kiln_env({}, {"grad", (dir / "model.onnx").string(), "--input",
                                          "x=" + (dir / "x.npy").string(), "--output-dir", out});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    int compared = 0;
    for (const auto& e : fs::directory_iterator(dir / "expected")) {
      const std::string name = e.path().filename().string();
      if (name.rfind("grad_", 0) != 0) continue;
      const Tensor want = read_npy(e.path()), got = read_npy(fs::path(out) / name);
      ASSERT_EQ(got.shape(), want.shape()) << name;
      double scale = 0;
      for (double v : want.to_doubles()) scale = std::max(scale, std::fabs(v));
      const auto w = want.to_doubles(), g = got.to_doubles();
      for (size_t i = 0; i < w.size(); ++i) {
        ASSERT_NEAR(g[i], w[i], 1e-4 * scale + 1e-6) << name << "[" << i << "]";
      }
      ++compared;
    }
    EXPECT_GE(compared, 6);
  }
}

TEST(Grad, CliErrorsNameTheValue) {
  const std::string model = std::string(KILN_EXAMPLES_DIR) + "/onnx/mlp/model.onnx";
  const std::string x = std::string(KILN_EXAMPLES_DIR) + "/onnx/mlp/x.npy";
  const std::string out = testing::temp_dir("grad_errors");
  auto r = testing::kiln_env({}, {"grad", model, "-i", "x=" + x, "-o", out, "--wrt", "nope"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("--wrt nope"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("net.0.weight"), std::string::npos) << r.err;
  r = testing::kiln_env({}, {"grad", model, "-o", out});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("'x'"), std::string::npos) << r.err;
  // The gradient with respect to the input too, by name.
  r = testing::kiln_env({}, {"grad", model, "-i", "x=" + x, "-o", out, "--wrt", "x"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(std::filesystem::exists(std::filesystem::path(out) / "grad_x.npy"));
}

// An Elman RNN written with scan: h_t = tanh(x_t Wx + h_{t-1} Wh), every h_t stacked.
std::vector<Var> elman(const std::vector<Var>& x, bool reverse, std::optional<int64_t> steps) {
  ScanResult r = scan(
      [&](int64_t, const std::vector<Var>& xt, const std::vector<Var>& h) {
        Var next = tanh(matmul(xt[0], x[2]) + matmul(h[0], x[3]));
        return std::vector<Var>{next, next * 2.0};
      },
      {x[0]}, {x[1]}, steps, reverse);
  return {r.states[0], r.outputs[0]};
}

const std::vector<In> kRnnInputs{
    {"xs", {5, 2, 3}}, {"h0", {2, 4}}, {"wx", {3, 4}, -0.8, 0.8}, {"wh", {4, 4}, -0.8, 0.8}};

TEST(Scan, BackpropagationThroughTimeMatchesFiniteDifferences) {
  check_gradients("scan_forward", kRnnInputs,
                  [](const std::vector<Var>& x) { return elman(x, false, std::nullopt); });
  check_gradients("scan_reverse_partial", kRnnInputs,
                  [](const std::vector<Var>& x) { return elman(x, true, 3); });
}

// The compiled scan against the recurrence computed here, step by step in plain C++.
TEST(Scan, MatchesTheRecurrenceComputedByHand) {
  for (const bool reverse : {false, true}) {
    Graph g(reverse ? "rnn_reverse" : "rnn");
    std::vector<Var> x;
    for (const In& in : kRnnInputs) x.push_back(input(g, in.name, DType::kFloat64, in.shape));
    const std::vector<Var> out = elman(x, reverse, std::nullopt);
    g.set_outputs({out[0].var(), out[1].var()});
    std::mt19937 rng(7);
    std::vector<Tensor> v;
    for (const In& in : kRnnInputs)
      v.push_back(random_tensor(DType::kFloat64, in.shape, rng, -1, 1));
    const std::vector<Tensor> got = compile(g)(v);
    ASSERT_EQ(got[1].shape(), (Shape{5, 2, 4}));
    std::vector<double> h = v[1].to_doubles();
    for (int64_t k = 0; k < 5; ++k) {
      const int64_t t = reverse ? 4 - k : k;
      std::vector<double> next(8);
      for (int b = 0; b < 2; ++b) {
        for (int j = 0; j < 4; ++j) {
          double a = 0;
          for (int i = 0; i < 3; ++i) a += v[0].load(t * 6 + b * 3 + i) * v[2].load(i * 4 + j);
          for (int i = 0; i < 4; ++i) a += h[static_cast<size_t>(b * 4 + i)] * v[3].load(i * 4 + j);
          next[static_cast<size_t>(b * 4 + j)] = std::tanh(a);
        }
      }
      h = next;
      // Outputs are stacked in step order, whatever the direction.
      for (int64_t e = 0; e < 8; ++e)
        EXPECT_NEAR(got[1].load(k * 8 + e), 2 * h[static_cast<size_t>(e)], 1e-12) << "step " << k;
    }
    for (int64_t e = 0; e < 8; ++e) EXPECT_NEAR(got[0].load(e), h[static_cast<size_t>(e)], 1e-12);
  }
}

TEST(Scan, ErrorsNameTheStepAndValue) {
  Graph g("bad_scan");
  Var seq = input(g, "seq", DType::kFloat32, {kDynamic, 3});
  Var fixed = input(g, "fixed", DType::kFloat32, {4, 3});
  Var h0 = input(g, "h0", DType::kFloat32, {3});
  auto same = [](int64_t, const std::vector<Var>& s, const std::vector<Var>& h) {
    return std::vector<Var>{h[0] + s[0]};
  };
  EXPECT_NE(error_of([&] { scan(same, {seq}, {h0}); }).find("known only at run time"),
            std::string::npos);
  const std::string grown = error_of([&] {
    scan(
        [](int64_t t, const std::vector<Var>& s, const std::vector<Var>& h) {
          return std::vector<Var>{t == 2 ? concat({h[0], s[0]}, 0) : h[0] + s[0]};
        },
        {fixed}, {h0});
  });
  EXPECT_NE(grown.find("scan step 2 turned state 0 from float32 (3,) into float32 (6,)"),
            std::string::npos)
      << grown;
  EXPECT_NE(error_of([&] { scan(same, {}, {h0}); }).find("n_steps is needed"), std::string::npos);
}

TEST(Cond, ARunTimeConditionSelectsAndDifferentiatesBothBranches) {
  // pred = sum(p) > 0 is computed at run time; p is held still.
  check_gradients("cond", {{"x", {3, 4}}, {"p", {2}, 0.5, 2, DType::kFloat64, false}},
                  [](const std::vector<Var>& x) {
                    Var pred = gt(sum(x[1]), scalar(x[1].graph(), DType::kFloat64, 0));
                    return cond(
                        pred, [&] { return std::vector<Var>{x[0] * x[0]}; },
                        [&] { return std::vector<Var>{sin(x[0])}; });
                  });
  Graph g("cond_values");
  Var x = input(g, "x", DType::kFloat64, {3});
  Var p = input(g, "p", DType::kFloat64, {});
  const std::vector<Var> y = cond(
      gt(p, scalar(g, DType::kFloat64, 0)), [&] { return std::vector<Var>{x * 3.0}; },
      [&] { return std::vector<Var>{x - 1.0}; });
  g.set_outputs({y[0].var()});
  Function f = compile(g);
  Tensor xv = Tensor::from_doubles(DType::kFloat64, {3}, {1, -2, 0.5});
  for (const double pv : {1.0, -1.0}) {
    const Tensor out = f({xv, Tensor::from_doubles(DType::kFloat64, {}, {pv})})[0];
    for (int64_t i = 0; i < 3; ++i)
      EXPECT_EQ(out.load(i), pv > 0 ? xv.load(i) * 3 : xv.load(i) - 1) << pv;
  }
}

TEST(Cond, AConditionKnownWhenBuiltKeepsOneBranch) {
  Graph g("cond_const");
  Var x = input(g, "x", DType::kFloat32, {3});
  Tensor yes = Tensor::empty(DType::kBool, Shape{});
  yes.store_int(0, 1);
  const std::vector<Var> y = cond(
      constant(g, yes), [&] { return std::vector<Var>{exp(x)}; },
      [&] { return std::vector<Var>{sin(x)}; });
  g.set_outputs({y[0].var()});
  for (const auto& n : g.nodes()) EXPECT_NE(n->op->name(), "sin");
  const std::string bad = error_of([&] {
    cond(
        gt(sum(x), scalar(g, DType::kFloat32, 0)), [&] { return std::vector<Var>{x}; },
        [&] { return std::vector<Var>{sum(x)}; });
  });
  EXPECT_NE(bad.find("output 0 is float32 (3,) in the then branch, float32 () in the else"),
            std::string::npos)
      << bad;
}

}  // namespace
}  // namespace kiln
