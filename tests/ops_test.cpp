// Every op's compiled C code against its `perform` reference, on random inputs with
// broadcasting, size-1, empty and non-contiguous cases. One module per op serves all
// shape cases (dimensions are dynamic), and every module must compile without warnings.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <iterator>
#include <limits>
#include <map>
#include <random>
#include <regex>
#include <set>
#include <thread>

#include "compiler/compile.h"
#include "ops/builders.h"
#include "ops/host_call.h"
#include "ops/reference.h"
#include "ops/registry.h"
#include "ops/scalar_table.h"
#include "ops/slice.h"
#include "runtime/engine/engine.h"
#include "tests/helpers.h"
#include "util/strings.h"

namespace kiln {
namespace {

using testing::error_of;
using testing::non_contiguous;
using testing::random_tensor;
using testing::tensors_close;

struct Range {
  double lo = -2, hi = 2;
};

// Value ranges that keep each op inside its domain (logs of positives, etc.).
Range range_for(const std::string& op, size_t input) {
  if (op == "log" || op == "sqrt" || op == "reciprocal") return {0.05, 4};
  if (op == "log1p") return {-0.9, 4};
  if (op == "asin" || op == "acos" || op == "atanh") return {-0.95, 0.95};
  if (op == "acosh") return {1.05, 4};
  if (op == "pow") return input == 0 ? Range{0.1, 3} : Range{-2, 2};
  if (op == "cast") return {-100, 100};
  if (op == "div" || op == "mod" || op == "fmod") return input == 0 ? Range{-9, 9} : Range{-4, 4};
  // x2 stands for 1/x1 only roughly: x1 x2 kept from 2, where the correction would cancel.
  if (op == "div_rcp")
    return input == 0 ? Range{-9, 9} : input == 1 ? Range{0.5, 2} : Range{0.4, 0.9};
  // Shifts by 0..70: past 63 the result is 0.
  if (op == "shift_left" || op == "shift_right")
    return input == 0 ? Range{-300, 300} : Range{0, 70};
  if (op == "mod_u") return input == 0 ? Range{-300, 300} : Range{-4, 4};
  return {};
}

// Three workers and parts of a few elements: every splittable thunk is cut into up to 6
// parts, with boundaries inside rows, and the parts run on several threads.
const CompileOptions& split_options() {
  static Engine* engine = make_engine(EngineKind::kThreaded, 3).release();
  static CompileOptions options = [] {
    CompileOptions o;
    o.engine = engine;
    o.split_grain = 4;
    o.poison_buffers = true;
    return o;
  }();
  return options;
}

// The C source a compiled function's module was built from (to check what the code took).
std::string module_source(const Function& f) {
  std::ifstream in(f.info().source_path);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

// Compiles graph once, then checks every input set against the reference, both with each
// thunk called whole and with splittable thunks split into parts. Returns how the split
// function's calls were divided. `passes`: the rewrite passes (default: all).
ExecutorStats check_graph(const Graph& g, const std::vector<std::vector<Tensor>>& cases,
                          double rtol = 1e-5, double atol = 1e-6,
                          const std::optional<std::string>& passes = std::nullopt) {
  CompileOptions whole_options;
  whole_options.poison_buffers = true;
  whole_options.passes = passes;
  Function f = compile(g, whole_options);
  CompileOptions split_opts = split_options();
  split_opts.passes = passes;
  Function split = compile(g, split_opts);
  EXPECT_EQ(f.info().compiler_log, "") << "generated module compiled with warnings";
  for (size_t c = 0; c < cases.size(); ++c) {
    std::string desc;
    for (const auto& t : cases[c])
      desc += t.describe() + (t.is_contiguous() ? "" : " (strided)") + "; ";
    SCOPED_TRACE("graph " + g.name() + ", case " + std::to_string(c) + ": " + desc);
    auto want = evaluate_reference(g, cases[c]);
    for (Function* fn : {&f, &split}) {
      SCOPED_TRACE(fn == &f ? "whole thunks" : "split thunks");
      auto got = (*fn)(cases[c]);
      EXPECT_EQ(got.size(), want.size());
      if (got.size() != want.size()) continue;
      for (size_t k = 0; k < got.size(); ++k)
        EXPECT_TRUE(tensors_close(got[k], want[k], rtol, atol));
    }
  }
  return split.stats();
}

std::vector<DType> dtypes_for(const ScalarOpDef& def) {
  switch (def.domain) {
    case Domain::kFloat:
      return {DType::kFloat32, DType::kFloat64};
    case Domain::kBool:
      return {DType::kBool};
    case Domain::kAny:
      return {DType::kFloat32, DType::kInt32};
    case Domain::kInteger:
      return {DType::kUInt8, DType::kInt32, DType::kInt64};
    default:
      return {DType::kFloat32, DType::kFloat64, DType::kInt32, DType::kInt64};
  }
}

class ElementwiseTest : public ::testing::TestWithParam<std::string> {};

TEST_P(ElementwiseTest, MatchesReference) {
  const ScalarOpDef& def = *find_scalar_op(GetParam());
  std::mt19937 rng(42);
  for (DType dt : dtypes_for(def)) {
    Graph g(std::string(def.name) + "_" + std::string(dtype_name(dt)));
    // Input 0 is 2-D, the rest 1-D or 2-D, all dynamic: broadcasting against a dimension
    // that is 1 only at run time is exercised by the same module.
    std::vector<Var> ins;
    std::vector<DType> in_dtypes;
    for (int k = 0; k < def.arity; ++k) {
      DType idt = (def.out == OutRule::kWhere && k == 0) ? DType::kBool : dt;
      std::vector<int64_t> dims =
          (k == 1) ? std::vector<int64_t>{kDynamic} : std::vector<int64_t>{kDynamic, kDynamic};
      ins.push_back(input(g, "x" + std::to_string(k), idt, dims));
      in_dtypes.push_back(idt);
    }
    Attrs attrs;
    if (def.out == OutRule::kCast)
      attrs["to"] = std::string(dt == DType::kFloat32 ? "int32" : "float64");
    for (const auto& p : def.params) attrs[std::string(p.name)] = p.fallback * 1.5;
    g.set_outputs({apply(std::string(def.name), ins, attrs).var()});

    auto make = [&](const std::vector<Shape>& shapes, bool strided) {
      std::vector<Tensor> ts;
      for (int k = 0; k < def.arity; ++k) {
        Range r = range_for(std::string(def.name), static_cast<size_t>(k));
        Tensor t = random_tensor(in_dtypes[static_cast<size_t>(k)], shapes[static_cast<size_t>(k)],
                                 rng, r.lo, r.hi);
        ts.push_back(strided ? non_contiguous(t) : t);
      }
      return ts;
    };
    // Shapes per case: input 1 is 1-D (broadcast along rows), the others 2-D.
    auto shapes = [&](Shape a, Shape b) {
      std::vector<Shape> s;
      for (int k = 0; k < def.arity; ++k) s.push_back(k == 1 ? b : a);
      return s;
    };
    std::vector<std::vector<Tensor>> cases = {
        make(shapes({3, 5}, {5}), false),     // plain broadcasting of a row
        make(shapes({3, 5}, {1}), false),     // a dimension that is 1 only at run time
        make(shapes({1, 7}, {7}), false),     // size-1 leading dimension
        make(shapes({4, 1}, {6}), false),     // both sides broadcast
        make(shapes({0, 5}, {5}), false),     // empty
        make(shapes({37, 65}, {65}), false),  // odd sizes, vector remainders
        make(shapes({6, 9}, {9}), true),      // non-contiguous inputs
    };
    ExecutorStats split = check_graph(g, cases, dt == DType::kFloat32 ? 2e-5 : 1e-9,
                                      dt == DType::kFloat32 ? 1e-5 : 1e-12);
    EXPECT_GT(split.split_calls, 0) << "no call was split into parts";
  }
}

std::vector<std::string> scalar_op_names() {
  std::vector<std::string> names;
  for (const auto& d : scalar_ops()) names.emplace_back(d.name);
  return names;
}

INSTANTIATE_TEST_SUITE_P(AllScalarOps, ElementwiseTest, ::testing::ValuesIn(scalar_op_names()),
                         [](const auto& info) { return info.param; });

TEST(Elementwise, IntegerDivisionByZeroAndModuloSigns) {
  Graph g("intdiv");
  Var a = input(g, "a", DType::kInt32, {kDynamic});
  Var b = input(g, "b", DType::kInt32, {kDynamic});
  g.set_outputs({div(a, b), mod(a, b)});
  Tensor av = Tensor::from_doubles(DType::kInt32, {6}, {7, -7, 7, -7, 5, -2147483648.0});
  Tensor bv = Tensor::from_doubles(DType::kInt32, {6}, {2, 2, -2, 0, 0, -1});
  check_graph(g, {{av, bv}});
  auto out = compile(g)({av, bv});
  EXPECT_EQ(out[0].to_doubles(), (std::vector<double>{3, -3, -3, 0, 0, -2147483648.0}));
  EXPECT_EQ(out[1].to_doubles(), (std::vector<double>{1, 1, -1, 0, 0, 0}));  // sign of the divisor
}

TEST(Elementwise, RoundHalfToEvenAndScalarConstantsInlined) {
  Graph g("round");
  Var x = input(g, "x", DType::kFloat32, {kDynamic});
  g.set_outputs({round(x * 2.0 * 0.5)});
  Tensor xv = Tensor::from_doubles(DType::kFloat32, {6}, {0.5, 1.5, 2.5, -0.5, -1.5, 2.4});
  auto out = compile(g)({xv});
  EXPECT_EQ(out[0].to_doubles(), (std::vector<double>{0, 2, 2, -0.0, -2, 2}));
  std::string src = generate_source(g);
  EXPECT_NE(src.find("((float)0.5)"), std::string::npos) << "scalar constant was not inlined";
}

TEST(Elementwise, Int64ScalarConstantsKeepAllBits) {
  Graph g("int64lit");
  Var x = input(g, "x", DType::kInt64, {kDynamic});
  const int64_t big = (int64_t(1) << 62) + 1;  // not representable as a double
  Tensor c = Tensor::zeros(DType::kInt64, {});
  c.store_int(0, big);
  g.set_outputs({add(x, constant(g, c))});
  Tensor xv = Tensor::zeros(DType::kInt64, {2});
  EXPECT_EQ(compile(g)({xv})[0].load_int(1), big);
}

TEST(Elementwise, RejectsBadDtypesAndShapesAtBuildTime) {
  Graph g("bad");
  Var a = input(g, "a", DType::kFloat32, {3, 4});
  Var b = input(g, "b", DType::kFloat64, {3, 4});
  Var c = input(g, "c", DType::kFloat32, {5});
  Var i = input(g, "i", DType::kInt32, {3, 4});
  {
    std::string m = testing::error_of([&] { add(a, b); });
    EXPECT_NE(m.find("(add)"), std::string::npos) << m;
    EXPECT_NE(m.find("float32 (3, 4) vs float64 (3, 4)"), std::string::npos) << m;
  }
  {
    std::string m = testing::error_of([&] { mul(a, c); });
    EXPECT_NE(m.find("(mul)"), std::string::npos) << m;
    EXPECT_NE(m.find("cannot broadcast (3, 4) with (5,)"), std::string::npos) << m;
  }
  EXPECT_THROW(exp(i), UserError);
  EXPECT_THROW(logical_and(a, a), UserError);
  EXPECT_THROW(where(a, a, a), UserError);
}

TEST(Elementwise, RunTimeBroadcastMismatchIsAnErrorNotACrash) {
  Graph g("rtbcast");
  Var a = input(g, "a", DType::kFloat32, {kDynamic});
  Var b = input(g, "b", DType::kFloat32, {kDynamic});
  g.set_outputs({a + b});
  Function f = compile(g);
  std::mt19937 rng(1);
  {
    std::string m = testing::error_of([&] {
      f({random_tensor(DType::kFloat32, {3}, rng), random_tensor(DType::kFloat32, {4}, rng)});
    });
    EXPECT_NE(m.find("node 0 (add)"), std::string::npos) << m;
    EXPECT_NE(m.find("(3,) with (4,)"), std::string::npos) << m;
  }
}

class ReduceTest : public ::testing::TestWithParam<std::string> {};

TEST_P(ReduceTest, MatchesReferenceOverAxes) {
  std::mt19937 rng(7);
  const std::string op = GetParam();
  const std::vector<std::vector<int64_t>> axes_sets = {{}, {0}, {1}, {2}, {0, 2}, {-1}, {-3, 1}};
  for (DType dt : {DType::kFloat32, DType::kInt64}) {
    if (op == "reduce_mean" && dt == DType::kInt64) continue;
    Graph g(op + "_" + std::string(dtype_name(dt)));
    Var x = input(g, "x", dt, {kDynamic, kDynamic, kDynamic});
    std::vector<Variable*> outs;
    for (const auto& axes : axes_sets) {
      for (int64_t keep : {0, 1})
        outs.push_back(apply(op, {x}, {{"axes", axes}, {"keepdims", keep}}).var());
    }
    g.set_outputs(outs);
    double lo = op == "reduce_prod" ? 0.5 : -3, hi = op == "reduce_prod" ? 1.5 : 3;
    std::vector<std::vector<Tensor>> cases = {
        {random_tensor(dt, {2, 3, 4}, rng, lo, hi)},
        {random_tensor(dt, {1, 5, 1}, rng, lo, hi)},
        {random_tensor(dt, {7, 33, 9}, rng, lo, hi)},
        // Axis 1 of this is a blocked layout's global pool: 300 positions of 8 lanes.
        {random_tensor(dt, {5, 300, 8}, rng, lo, hi)},
        // Runs of 7 and 10 rows of 8: whole groups of four rows and a tail.
        {random_tensor(dt, {3, 7, 8}, rng, lo, hi)},
        {non_contiguous(random_tensor(dt, {3, 4, 5}, rng, lo, hi))},
    };
    if (dt == DType::kFloat32) {
      Tensor special = random_tensor(dt, {2, 10, 8}, rng, lo, hi);
      special.store((1 * 10 + 6) * 8 + 3, NAN);       // in the second row of a group of four
      special.store((0 * 10 + 9) * 8 + 2, INFINITY);  // in the tail
      special.store((0 * 10 + 1) * 8 + 5, -INFINITY);
      cases.push_back({special});
    }
    if (op != "reduce_max" && op != "reduce_min")
      cases.push_back({random_tensor(dt, {0, 3, 2}, rng)});
    ExecutorStats split = check_graph(g, cases, 1e-4, 1e-5);
    EXPECT_GT(split.split_calls, 0) << "no call was split into parts";
  }
}

INSTANTIATE_TEST_SUITE_P(AllReductions, ReduceTest,
                         ::testing::Values("reduce_sum", "reduce_mean", "reduce_max", "reduce_min",
                                           "reduce_prod"));

TEST(Reduce, MaxOverEmptyDimensionIsAClearError) {
  Graph g("emptymax");
  Var x = input(g, "x", DType::kFloat32, {kDynamic, kDynamic});
  g.set_outputs({max(x, {1})});
  Function f = compile(g);
  {
    std::string m = testing::error_of([&] { f({Tensor::zeros(DType::kFloat32, {3, 0})}); });
    EXPECT_NE(std::string(m).find("empty dimension"), std::string::npos) << m;
  }
}

// Batched products of static shape run on kiln's packed kernel, a run of whole matrices per
// part: broadcast batches, 67 and 130 columns (panels and a ragged last one), a transposed
// B read through its strides, NaN and inf in the operands.
TEST(MatMul, StaticBatchesRunOnThePackedKernelSplitByMatrix) {
  std::mt19937 rng(31);
  for (DType dt : {DType::kFloat32, DType::kFloat64}) {
    Graph g("mm_static_batches");
    Var a = input(g, "a", dt, {2, 3, 5, 70});
    Var b = input(g, "b", dt, {3, 70, 67});
    Var c = input(g, "c", dt, {1, 70, 130});
    g.set_outputs({matmul(a, b), matmul(a, c)});
    Tensor special = random_tensor(dt, {2, 3, 5, 70}, rng);
    special.store(0, std::nan(""));
    special.store(3 * 5 * 70 + 2 * 70 + 9, INFINITY);
    const double tol = dt == DType::kFloat32 ? 1e-4 : 1e-10;
    ExecutorStats split = check_graph(
        g,
        {{special, random_tensor(dt, {3, 70, 67}, rng), random_tensor(dt, {1, 70, 130}, rng)},
         {non_contiguous(random_tensor(dt, {2, 3, 5, 70}, rng)),
          non_contiguous(random_tensor(dt, {3, 70, 67}, rng)),
          non_contiguous(random_tensor(dt, {1, 70, 130}, rng))}},
        tol, tol);
    EXPECT_GT(split.split_calls, 0) << "the batched products were never split";
    Function f = compile(g);
    const std::string source = module_source(f);
    EXPECT_NE(source.find("kiln_gemm_packed_"), std::string::npos);
  }
}

// Two matrices (a training step's X^T dY) on kiln's kernel, parts taking tiles of whole
// panels, each packing its own columns of B: NaN and inf in A, 67 columns ending in a part
// panel, B read through a transpose, a float64 run.
TEST(MatMul, TwoMatricesRunOnThePackedKernelSplitByTiles) {
  std::mt19937 rng(37);
  for (DType dt : {DType::kFloat32, DType::kFloat64}) {
    Graph g("mm_tiles");
    Var a = input(g, "a", dt, {130, 300});
    Var b = input(g, "b", dt, {300, 67});
    Var bt = input(g, "bt", dt, {67, 300});
    // 8 rows by 130 columns: the parts split the columns (each its own panels of B).
    Var few = input(g, "few", dt, {8, 300});
    Var wide = input(g, "wide", dt, {300, 130});
    g.set_outputs({matmul(a, b), matmul(a, transpose(bt, {1, 0})), matmul(few, wide)});
    Tensor special = random_tensor(dt, {130, 300}, rng);
    special.store(0, std::nan(""));
    special.store(77 * 300 + 9, INFINITY);
    const double tol = dt == DType::kFloat32 ? 1e-4 : 1e-10;
    ExecutorStats split =
        check_graph(g,
                    {{special, random_tensor(dt, {300, 67}, rng), random_tensor(dt, {67, 300}, rng),
                      random_tensor(dt, {8, 300}, rng), random_tensor(dt, {300, 130}, rng)},
                     {non_contiguous(random_tensor(dt, {130, 300}, rng)),
                      non_contiguous(random_tensor(dt, {300, 67}, rng)),
                      non_contiguous(random_tensor(dt, {67, 300}, rng)),
                      non_contiguous(random_tensor(dt, {8, 300}, rng)),
                      non_contiguous(random_tensor(dt, {300, 130}, rng))}},
                    tol, tol);
    EXPECT_GT(split.split_calls, 0) << "the products were never split";
    EXPECT_NE(module_source(compile(g)).find("kiln_gemm_packed_"), std::string::npos);
  }
}

TEST(MatMul, MatchesReferenceWithBatchingBroadcastAndStrides) {
  std::mt19937 rng(3);
  for (DType dt : {DType::kFloat32, DType::kFloat64, DType::kInt32}) {
    double tol = dt == DType::kFloat32 ? 1e-4 : 1e-10;
    {
      Graph g("mm2d");
      Var a = input(g, "a", dt, {kDynamic, kDynamic});
      Var b = input(g, "b", dt, {kDynamic, kDynamic});
      g.set_outputs({matmul(a, b)});
      check_graph(
          g,
          {
              {random_tensor(dt, {3, 4}, rng), random_tensor(dt, {4, 5}, rng)},
              {random_tensor(dt, {1, 4}, rng), random_tensor(dt, {4, 1}, rng)},
              {random_tensor(dt, {0, 4}, rng), random_tensor(dt, {4, 5}, rng)},  // empty M
              {random_tensor(dt, {3, 0}, rng), random_tensor(dt, {0, 5}, rng)},  // K = 0: zeros
              {non_contiguous(random_tensor(dt, {6, 7}, rng)),
               non_contiguous(random_tensor(dt, {7, 3}, rng))},  // BLAS transposes
              {random_tensor(dt, {8, 12}, rng).slice(1, 0, 12, 2),
               random_tensor(dt, {6, 5}, rng)},  // packed
              {random_tensor(dt, {65, 70}, rng), random_tensor(dt, {70, 33}, rng)},
          },
          tol, tol);
    }
    {
      Graph g("mmbatch");
      Var a = input(g, "a", dt, {kDynamic, kDynamic, kDynamic, kDynamic});
      Var b = input(g, "b", dt, {kDynamic, kDynamic, kDynamic});
      Var v = input(g, "v", dt, {kDynamic});  // length = columns of b
      Var u = input(g, "u", dt, {kDynamic});  // length = rows of b
      g.set_outputs({matmul(a, b), matmul(b, v), matmul(u, b)});
      check_graph(g,
                  {
                      {random_tensor(dt, {2, 1, 3, 4}, rng), random_tensor(dt, {5, 4, 6}, rng),
                       random_tensor(dt, {6}, rng), random_tensor(dt, {4}, rng)},
                      {random_tensor(dt, {1, 2, 3, 4}, rng), random_tensor(dt, {2, 4, 4}, rng),
                       random_tensor(dt, {4}, rng), random_tensor(dt, {4}, rng)},
                      {non_contiguous(random_tensor(dt, {2, 3, 3, 4}, rng)),
                       non_contiguous(random_tensor(dt, {3, 4, 4}, rng)),
                       non_contiguous(random_tensor(dt, {4}, rng)),
                       non_contiguous(random_tensor(dt, {4}, rng))},
                  },
                  tol, tol);
    }
  }
}

TEST(MatMul, InnerDimensionMismatchNamesBothShapes) {
  Graph g("mmbad");
  Var a = input(g, "a", DType::kFloat32, {2, 3});
  Var b = input(g, "b", DType::kFloat32, {4, 5});
  {
    std::string m = testing::error_of([&] { matmul(a, b); });
    EXPECT_NE(m.find("(matmul)"), std::string::npos) << m;
    EXPECT_NE(m.find("float32 (2, 3) @ float32 (4, 5)"), std::string::npos) << m;
  }
}

TEST(Gemm, AllTransposesAlphaBetaAndBiasShapes) {
  std::mt19937 rng(5);
  for (int ta = 0; ta < 2; ++ta) {
    for (int tb = 0; tb < 2; ++tb) {
      Graph g("gemm_" + std::to_string(ta) + std::to_string(tb));
      Var a = input(g, "a", DType::kFloat32, {kDynamic, kDynamic});
      Var b = input(g, "b", DType::kFloat32, {kDynamic, kDynamic});
      Var c = input(g, "c", DType::kFloat32, {kDynamic});
      Var c2 = input(g, "c2", DType::kFloat32, {kDynamic, kDynamic});
      g.set_outputs({gemm(a, b, c, 0.5, 2.0, ta, tb), gemm(a, b, c2, 1.0, -1.0, ta, tb),
                     gemm(a, b, 1.5, ta, tb)});
      auto shp = [](bool t, int64_t r, int64_t c) { return t ? Shape{c, r} : Shape{r, c}; };
      check_graph(g,
                  {
                      {random_tensor(DType::kFloat32, shp(ta, 3, 4), rng),
                       random_tensor(DType::kFloat32, shp(tb, 4, 5), rng),
                       random_tensor(DType::kFloat32, {5}, rng),
                       random_tensor(DType::kFloat32, {3, 5}, rng)},
                      {random_tensor(DType::kFloat32, shp(ta, 3, 4), rng),
                       random_tensor(DType::kFloat32, shp(tb, 4, 5), rng),
                       random_tensor(DType::kFloat32, {1}, rng),
                       random_tensor(DType::kFloat32, {3, 1}, rng)},
                      {non_contiguous(random_tensor(DType::kFloat32, shp(ta, 9, 7), rng)),
                       non_contiguous(random_tensor(DType::kFloat32, shp(tb, 7, 2), rng)),
                       random_tensor(DType::kFloat32, {2}, rng),
                       non_contiguous(random_tensor(DType::kFloat32, {1, 2}, rng))},
                  },
                  1e-4, 1e-5);
    }
  }
}

// Constant weights are packed into panels at compile time and run through kiln's own GEMM
// kernel, split over output rows. The shapes reach every edge of it: one-row products, a
// last panel one column wide (65 = 64 + 1) or partial vectors inside a panel (130, 17, 20),
// row blocks of 6 with remainders (7, 13 rows), k walked in blocks of 256 (300), transposed
// and strided A, biases of every broadcast shape, and an epilogue.
TEST(Gemm, PackedConstantWeightsMatchReferenceAcrossShapes) {
  std::mt19937 rng(41);
  for (DType dt : {DType::kFloat32, DType::kFloat64}) {
    Graph g(std::string("gemm_packed_") + std::string(dtype_name(dt)));
    Var a = input(g, "a", dt, {kDynamic, 300});
    Var at = input(g, "at", dt, {5, kDynamic});  // A transposed: (K, M)
    Var c2 = input(g, "c2", dt, {kDynamic, 20});
    Var w1 = constant(g, random_tensor(dt, {300, 65}, rng), "w1");
    Var w2 = constant(g, random_tensor(dt, {130, 300}, rng), "w2");
    Var w3 = constant(g, random_tensor(dt, {300, 17}, rng), "w3");
    Var w4 = constant(g, random_tensor(dt, {20, 5}, rng), "w4");
    Var b1 = constant(g, random_tensor(dt, {65}, rng), "b1");
    Var b2 = constant(g, random_tensor(dt, {130}, rng), "b2");
    Var b3 = constant(g, random_tensor(dt, {1}, rng), "b3");
    g.set_outputs({gemm(a, w1, b1, 0.5, 2.0), relu(gemm(a, w2, b2, 1.0, 1.0, false, true)),
                   gemm(a, w3, b3, -1.0, 0.25), gemm(a, w3, 1.5),
                   gemm(at, w4, c2, 1.0, -1.0, true, true)});
    Function f = compile(g);
    const std::string source = module_source(f);
    EXPECT_NE(source.find("kiln_gemm_packed_"), std::string::npos) << "the weights were not packed";
    auto inputs = [&](int64_t m, bool strided) {
      Tensor x = random_tensor(dt, {m, 300}, rng);
      return std::vector<Tensor>{strided ? non_contiguous(x) : x, random_tensor(dt, {5, m}, rng),
                                 random_tensor(dt, {m, 20}, rng)};
    };
    const double rtol = dt == DType::kFloat32 ? 1e-4 : 1e-10,
                 atol = dt == DType::kFloat32 ? 1e-4 : 1e-11;
    ExecutorStats split = check_graph(
        g, {inputs(13, false), inputs(1, false), inputs(7, true), inputs(0, false)}, rtol, atol);
    EXPECT_GT(split.split_calls, 0) << "no packed gemm was split over rows";
  }
}

// Parts take tiles of whole panels (16 float columns) by rows, but a call gets no more parts than
// its output has rows: a one-row product is never split, however large its weights.
// A packed product splits by column panels, a quarter MiB of weights or more per part: a
// one-row product over a 1 MiB weight streams it on several cores; a small one stays whole.
TEST(Gemm, PackedSplitTakesPanelsWorthTheirWeights) {
  std::mt19937 rng(43);
  Graph g("gemm_rows");
  Var a = input(g, "a", DType::kFloat32, {kDynamic, 512});
  g.set_outputs({gemm(a, constant(g, random_tensor(DType::kFloat32, {512, 512}, rng), "w"))});
  Function f = compile(g, split_options());
  const Tensor one = random_tensor(DType::kFloat32, {1, 512}, rng);
  const auto want = evaluate_reference(g, {one});
  EXPECT_TRUE(tensors_close(f({one})[0], want[0], 1e-4, 1e-4));
  EXPECT_EQ(f.stats().split_calls, 1);
  // 512 columns in units of 128 (128 x 512 floats = 256 KiB): 4 units, one part per each of
  // the 3 workers (units of 256 would give only 2).
  EXPECT_EQ(f.stats().parts, 3);
  Graph small("gemm_small");
  Var s = input(small, "a", DType::kFloat32, {kDynamic, 64});
  small.set_outputs({gemm(s, constant(small, random_tensor(DType::kFloat32, {64, 64}, rng), "w"))});
  Function fs = compile(small, split_options());
  fs({random_tensor(DType::kFloat32, {1, 64}, rng)});
  EXPECT_EQ(fs.stats().split_calls, 0);
}

TEST(Gemm, PackedOperandErrorsNameTheShapes) {
  Graph g("gemm_packed_bad");
  Var a = input(g, "a", DType::kFloat32, {kDynamic, 8});
  Var bp = input(g, "bp", DType::kFloat32, {2, 8, 16});
  std::string err = testing::error_of([&] {
    apply("gemm", {a, bp}, {{"packed_n", int64_t{100}}, {"transB", int64_t{1}}});
  });
  EXPECT_NE(err.find("transB must be 0"), std::string::npos) << err;
  err = testing::error_of([&] { apply("gemm", {a, bp}, {{"packed_n", int64_t{200}}}); });
  EXPECT_NE(err.find("B packed as (13, K, 16), got float32 (?, 8) and float32 (2, 8, 16)"),
            std::string::npos)
      << err;
  err = testing::error_of([&] {
    apply("gemm", {a, input(g, "b32", DType::kFloat32, {2, 8, 32})}, {{"packed_n", int64_t{100}}});
  });
  EXPECT_NE(err.find("(7, K, 16)"), std::string::npos) << err;
  err = testing::error_of([&] {
    apply("gemm",
          {input(g, "ai", DType::kInt32, {3, 8}), input(g, "bi", DType::kInt32, {2, 8, 64})},
          {{"packed_n", int64_t{100}}});
  });
  EXPECT_NE(err.find("packed B needs float32 or float64"), std::string::npos) << err;
  // Built by hand with the right layout, a packed gemm computes what the plain one does.
  std::mt19937 rng(47);
  Graph h("gemm_packed_by_hand");
  Var ha = input(h, "a", DType::kFloat64, {kDynamic, 8});
  Var hb = input(h, "bp", DType::kFloat64, {13, 8, 8});
  h.set_outputs({apply("gemm", {ha, hb}, {{"packed_n", int64_t{100}}})});
  check_graph(h,
              {{random_tensor(DType::kFloat64, {9, 8}, rng),
                non_contiguous(random_tensor(DType::kFloat64, {13, 8, 8}, rng))}},
              1e-12, 1e-12);
}

// With static sizes from the axis on, softmax splits over slices (rows): parts read a
// contiguous input in place and copy a strided one slice by slice; rows whose length is not
// a multiple of the 16 lanes, all -inf rows, NaN and rows far below 0 must come out as the
// reference's.
TEST(Softmax, SplitOverRowsMatchesReference) {
  std::mt19937 rng(61);
  for (DType dt : {DType::kFloat32, DType::kFloat64}) {
    Graph g(std::string("softmax_rows_") + std::string(dtype_name(dt)));
    Var x = input(g, "x", dt, {kDynamic, 5, 37});
    Var r = input(g, "r", dt, {kDynamic, 40});
    // Rows shorter than one vector of 8, one vector, and one plus a tail.
    Var s3 = input(g, "s3", dt, {kDynamic, 3});
    Var s8 = input(g, "s8", dt, {kDynamic, 8});
    Var s13 = input(g, "s13", dt, {kDynamic, 13});
    g.set_outputs({softmax(x), softmax(x, 1), log_softmax(x), softmax(r), log_softmax(r),
                   softmax(s3), softmax(s8), softmax(s13)});
    Tensor special = random_tensor(dt, {6, 40}, rng, -30, 30);
    for (int64_t l = 0; l < 40; ++l) special.store(40 + l, -INFINITY);
    special.store(2 * 40 + 17, NAN);
    special.store(3 * 40 + 39, INFINITY);
    // Far below 0: exp without the max shift would underflow to 0 / 0.
    for (int64_t l = 0; l < 40; ++l)
      special.store(4 * 40 + l, -1000.0 + 0.25 * static_cast<double>(l));
    // NaN, +inf and an all -inf row in the short rows too, one in the padded tail.
    Tensor s3v = random_tensor(dt, {5, 3}, rng, -30, 30);
    for (int64_t l = 0; l < 3; ++l) s3v.store(3 + l, -INFINITY);
    s3v.store(2 * 3 + 1, NAN);
    s3v.store(3 * 3 + 2, INFINITY);
    Tensor s13v = random_tensor(dt, {4, 13}, rng, -30, 30);
    s13v.store(13 + 11, NAN);
    s13v.store(2 * 13 + 4, NAN);
    ExecutorStats split =
        check_graph(g,
                    {{random_tensor(dt, {7, 5, 37}, rng, -20, 20), special, s3v,
                      random_tensor(dt, {6, 8}, rng, -20, 20), s13v},
                     {non_contiguous(random_tensor(dt, {3, 5, 37}, rng)),
                      non_contiguous(random_tensor(dt, {9, 40}, rng)),
                      non_contiguous(random_tensor(dt, {4, 3}, rng)),
                      non_contiguous(random_tensor(dt, {3, 8}, rng)),
                      non_contiguous(random_tensor(dt, {5, 13}, rng))},
                     {random_tensor(dt, {0, 5, 37}, rng), random_tensor(dt, {1, 40}, rng),
                      random_tensor(dt, {1, 3}, rng), random_tensor(dt, {0, 8}, rng),
                      random_tensor(dt, {2, 13}, rng)}},
                    dt == DType::kFloat32 ? 1e-5 : 1e-12, dt == DType::kFloat32 ? 1e-6 : 1e-14);
    EXPECT_GT(split.split_calls, 0) << "softmax was not split over rows";
  }
}

// Scores far below a row's maximum (a masked window adds -100) give probabilities of 0, never
// subnormal ones: multiplying a subnormal costs a microcode assist on x86 cores, in the row
// and in the product with V after it (kiln_softmax.h). Against a float64 softmax computed
// here: every probability of 2^-125 and more matches it; the rest are exactly 0; rows of 40
// (vectors of 16 and 8) and 13 (a padded tail), and an all -inf row that stays NaN.
TEST(Softmax, MaskedScoresGiveZerosNotSubnormals) {
  const std::vector<double> scores{0,   -1,   -20,  -86,  -86.9, -87.1, -87.5,     -90,
                                   -95, -100, -103, -104, -110,  -200,  -INFINITY, 3};
  for (int64_t len : {int64_t{40}, int64_t{13}}) {
    Graph g("softmax_masked_" + std::to_string(len));
    Var x = input(g, "x", DType::kFloat32, {kDynamic, len});
    g.set_outputs({softmax(x)});
    const int64_t rows = 3;
    Tensor in = Tensor::empty(DType::kFloat32, {rows, len});
    for (int64_t r = 0; r < 2; ++r)
      for (int64_t l = 0; l < len; ++l)
        in.store(r * len + l, scores[static_cast<size_t>(l + 5 * r) % scores.size()]);
    for (int64_t l = 0; l < len; ++l) in.store(2 * len + l, -INFINITY);
    const std::vector<double> got = compile(g)({in})[0].to_doubles();
    for (int64_t r = 0; r < 2; ++r) {
      double mx = -INFINITY, sum = 0;
      for (int64_t l = 0; l < len; ++l) mx = std::max(mx, in.load(r * len + l));
      for (int64_t l = 0; l < len; ++l) sum += std::exp(in.load(r * len + l) - mx);
      for (int64_t l = 0; l < len; ++l) {
        const double want = std::exp(in.load(r * len + l) - mx) / sum;
        const double v = got[static_cast<size_t>(r * len + l)];
        const std::string at = "row " + std::to_string(r) + " of " + std::to_string(len) +
                               ", score " + std::to_string(in.load(r * len + l));
        EXPECT_NE(std::fpclassify(static_cast<float>(v)), FP_SUBNORMAL) << at;
        if (want >= std::ldexp(1.0, -125)) {
          EXPECT_NEAR(v, want, 1e-6 * want + 1e-12) << at;
        } else if (want < std::ldexp(1.0, -126) / len) {
          EXPECT_EQ(v, 0.0) << at;
        }
      }
    }
    for (int64_t l = 0; l < len; ++l)
      EXPECT_TRUE(std::isnan(got[static_cast<size_t>(2 * len + l)]));
  }
}

// The importer's layer-norm chain, as convert_layer_norm writes it, over the trailing axes.
Var layer_norm_chain(Var x, const std::vector<int64_t>& axes, double eps) {
  Var d = x - mean(x, axes, true);
  return d * reciprocal(sqrt(mean(d * d, axes, true) + eps));
}

// The norm pass turns the chain into one layer_norm step; the reference is the chain's own
// ops. Rows shorter than a vector, one vector, two plus a tail and a transformer's width; a
// NaN row and an infinite one; a constant row (variance 0: the output is 0, not NaN); two
// trailing axes; a strided input; rows whose mean is large against their spread, which a
// one-pass sum of squares loses to cancellation. A chain whose mean is also an output stays
// as it is.
TEST(LayerNorm, FusedChainMatchesTheUnfusedReference) {
  std::mt19937 rng(67);
  for (DType dt : {DType::kFloat32, DType::kFloat64}) {
    Graph g(std::string("layer_norm_") + std::string(dtype_name(dt)));
    const std::vector<int64_t> widths = {3, 8, 37, 384};
    std::vector<Var> xs, outs;
    for (int64_t w : widths) {
      xs.push_back(input(g, "x" + std::to_string(w), dt, {kDynamic, w}));
      outs.push_back(layer_norm_chain(xs.back(), {1}, 1e-5));
    }
    Var cube = input(g, "cube", dt, {kDynamic, 5, 13});
    outs.push_back(layer_norm_chain(cube, {1, 2}, 1e-3));
    Var kept = input(g, "kept", dt, {kDynamic, 16});
    Var kept_mean = mean(kept, {1}, true);
    Var kd = kept - kept_mean;
    outs.push_back(kd * reciprocal(sqrt(mean(kd * kd, {1}, true) + 1e-5)));
    outs.push_back(kept_mean);
    std::vector<Variable*> out_vars;
    for (Var& v : outs) out_vars.push_back(v.var());
    g.set_outputs(out_vars);
    Function f = compile(g);
    const std::string source = module_source(f);
    // Distinct nodes: a node's banner shows above its kernel and above its thunk.
    std::set<std::string> fused_nodes;
    const std::regex banner("node ([0-9]+): layer_norm\\{");
    for (auto it = std::sregex_iterator(source.begin(), source.end(), banner);
         it != std::sregex_iterator(); ++it) {
      fused_nodes.insert((*it)[1].str());
    }
    const size_t fused = fused_nodes.size();
    EXPECT_EQ(fused, widths.size() + 1) << "not every plain chain was fused";
    EXPECT_NE(source.find("reduce_mean"), std::string::npos)
        << "the chain whose mean is an output was fused";
    if (dt == DType::kFloat32) {
      EXPECT_NE(source.find("kiln_layer_norm_row_f32("), std::string::npos) << "no vector row";
    }
    std::vector<Tensor> special;
    for (int64_t w : widths) {
      Tensor t = random_tensor(dt, {6, w}, rng, -3, 3);
      t.store(0 * w + w - 1, NAN);
      t.store(1 * w + w / 2, INFINITY);
      for (int64_t l = 0; l < w; ++l) t.store(2 * w + l, 1.5);  // constant
      special.push_back(t);
    }
    special.push_back(random_tensor(dt, {3, 5, 13}, rng));
    special.push_back(random_tensor(dt, {4, 16}, rng));
    std::vector<Tensor> strided;
    for (int64_t w : widths) strided.push_back(non_contiguous(random_tensor(dt, {5, w}, rng)));
    strided.push_back(non_contiguous(random_tensor(dt, {2, 5, 13}, rng)));
    strided.push_back(non_contiguous(random_tensor(dt, {3, 16}, rng)));
    std::vector<Tensor> empty;
    for (int64_t w : widths) empty.push_back(random_tensor(dt, {0, w}, rng));
    empty.push_back(random_tensor(dt, {0, 5, 13}, rng));
    empty.push_back(random_tensor(dt, {1, 16}, rng));
    check_graph(g, {special, strided, empty}, dt == DType::kFloat32 ? 1e-5 : 1e-12,
                dt == DType::kFloat32 ? 1e-5 : 1e-12);
    // Mean 1e3, spread 1: a one-pass variance (sum of squares less the squared mean) is off
    // by 100%. float32 means of values near 1e3 round differently in the lanes and in the
    // reference: up to 3e-4 of the unit deviation, hence the absolute 1e-3 here.
    Graph big(std::string("layer_norm_large_mean_") + std::string(dtype_name(dt)));
    Var xb = input(big, "x", dt, {kDynamic, 384});
    big.set_outputs({layer_norm_chain(xb, {1}, 1e-5).var()});
    Tensor rows = random_tensor(dt, {2, 384}, rng);
    for (int64_t l = 0; l < 2 * 384; ++l) rows.store(l, 1e3 + std::sin(static_cast<double>(l) + 1));
    check_graph(big, {{rows}}, dt == DType::kFloat32 ? 2e-3 : 1e-9,
                dt == DType::kFloat32 ? 1e-3 : 1e-12);
    // An epsilon that is a parameter (a run may replace it) is not baked into a prop.
    Graph param(std::string("layer_norm_eps_param_") + std::string(dtype_name(dt)));
    Var xp = input(param, "x", dt, {kDynamic, 16});
    Var eps(&param, param.add_parameter(Tensor::scalar(dt, 1e-5), "eps"));
    Var dp = xp - mean(xp, {1}, true);
    param.set_outputs({(dp * reciprocal(sqrt(mean(dp * dp, {1}, true) + eps))).var()});
    EXPECT_EQ(module_source(compile(param)).find(": layer_norm{"), std::string::npos)
        << "a parameter epsilon was baked into the op";
  }
}

// layer_norm written by hand (a JSON model, a C++ graph): bad props and inputs are errors
// that name the op and what was wrong.
TEST(LayerNorm, BadPropsAndInputsAreClearErrors) {
  Graph g("layer_norm_errors");
  Var x = input(g, "x", DType::kFloat32, {2, 3});
  Var i = input(g, "i", DType::kInt32, {2, 3});
  auto error = [](auto fn) { return error_of(fn); };
  std::string m = error([&] { apply("layer_norm", {x}, {{"epsilon", -1.0}}); });
  EXPECT_NE(m.find("layer_norm: epsilon must be finite and >= 0"), std::string::npos) << m;
  m = error([&] { apply("layer_norm", {x}, {{"epsilon", INFINITY}}); });
  EXPECT_NE(m.find("epsilon"), std::string::npos) << m;
  m = error([&] { apply("layer_norm", {x}, {{"axes", int64_t{1}}}); });
  EXPECT_NE(m.find("axes"), std::string::npos) << m;
  m = error([&] { apply("layer_norm", {i}); });
  EXPECT_NE(m.find("layer_norm requires float32 or float64, got int32"), std::string::npos) << m;
  m = error([&] { apply("layer_norm", {x}, {{"axis", int64_t{2}}}); });
  EXPECT_NE(m.find("layer_norm"), std::string::npos) << m;
  EXPECT_NE(m.find("axis"), std::string::npos) << m;
  m = error([&] { apply("layer_norm", {x, x}); });
  EXPECT_NE(m.find("layer_norm takes 1 input"), std::string::npos) << m;
}

TEST(ShapeOps, TransposeReshapeFlattenConcat) {
  std::mt19937 rng(11);
  Graph g("shapeops");
  Var x = input(g, "x", DType::kFloat32, {kDynamic, kDynamic, kDynamic});
  Var y = input(g, "y", DType::kFloat32, {kDynamic, kDynamic, kDynamic});
  g.set_outputs({transpose(x), transpose(x, {1, 0, 2}), transpose(x, {0, 2, 1}), reshape(x, {-1}),
                 reshape(x, {0, -1}), reshape(x, {2, -1, 1}), flatten(x, 0), flatten(x, 1),
                 flatten(x, 2), flatten(x, -1), flatten(x, 3), concat({x, y, x}, 1),
                 concat({x, y}, -1), concat({y, x}, 0)});
  check_graph(g, {
                     {random_tensor(DType::kFloat32, {2, 3, 4}, rng),
                      random_tensor(DType::kFloat32, {2, 3, 4}, rng)},
                     {non_contiguous(random_tensor(DType::kFloat32, {2, 5, 2}, rng)),
                      random_tensor(DType::kFloat32, {2, 5, 2}, rng)},
                     {random_tensor(DType::kFloat32, {2, 0, 3}, rng),
                      random_tensor(DType::kFloat32, {2, 0, 3}, rng)},
                 });
  Graph gi("shapeops_int");
  Var xi = input(gi, "x", DType::kInt64, {kDynamic, 4});
  gi.set_outputs({transpose(xi), reshape(xi, {2, -1}), concat({xi, xi}, 0)});
  check_graph(gi, {{random_tensor(DType::kInt64, {6, 4}, rng, -1e6, 1e6)}});
}

// Transposes of every element size: the copy goes by 8 x 8 tiles when the output's rows are
// contiguous and the input runs down its columns (2-, 4- and 8-byte elements), and row by
// row otherwise (1-byte elements, a batch transpose). The sizes leave partial tiles on both
// sides; strided inputs, a size-1 dimension, and split parts (by the first dimension longer
// than 1) are covered, against perform.
TEST(ShapeOps, TransposesOfEveryElementSizeMatchPerform) {
  std::mt19937 rng(12);
  for (DType dt :
       {DType::kFloat32, DType::kFloat64, DType::kFloat16, DType::kInt8, DType::kInt64}) {
    Graph g(std::string("transposes_") + std::string(dtype_name(dt)));
    Var x = input(g, "x", dt, {kDynamic, kDynamic, kDynamic});
    g.set_outputs({transpose(x, {0, 2, 1}), transpose(x, {2, 1, 0}), transpose(x, {1, 0, 2}),
                   transpose(x, {2, 0, 1}), transpose(x, {1, 2, 0})});
    ExecutorStats split =
        check_graph(g, {
                           {random_tensor(dt, {3, 19, 21}, rng, -100, 100)},
                           {random_tensor(dt, {1, 8, 16}, rng, -100, 100)},
                           {non_contiguous(random_tensor(dt, {2, 13, 9}, rng, -100, 100))},
                           {random_tensor(dt, {4, 1, 11}, rng, -100, 100)},
                           {random_tensor(dt, {2, 0, 5}, rng, -100, 100)},
                       });
    EXPECT_GT(split.split_calls, 0) << "no transpose was split into parts";
  }
}

TEST(ShapeOps, ReshapeErrors) {
  Graph g("reshapebad");
  Var x = input(g, "x", DType::kFloat32, {2, 3});
  EXPECT_THROW(reshape(x, {4, 2}), UserError);
  EXPECT_THROW(reshape(x, {-1, -1}), UserError);
  Graph gd("reshape_dynamic");
  Var d = input(gd, "d", DType::kFloat32, {kDynamic, 3});
  gd.set_outputs({reshape(d, {4, -1})});
  Function f = compile(gd);
  EXPECT_THROW(f({Tensor::zeros(DType::kFloat32, {3, 3})}), UserError);  // 9 elements into (4, ?)
  EXPECT_NO_THROW(f({Tensor::zeros(DType::kFloat32, {4, 3})}));
}

TEST(Softmax, StableOverAnyAxis) {
  std::mt19937 rng(13);
  for (DType dt : {DType::kFloat32, DType::kFloat64}) {
    Graph g(std::string("softmax_") + std::string(dtype_name(dt)));
    Var x = input(g, "x", dt, {kDynamic, kDynamic, kDynamic});
    g.set_outputs({softmax(x, 0), softmax(x, 1), softmax(x), log_softmax(x, 0), log_softmax(x, 1),
                   log_softmax(x, -1)});
    Tensor huge =
        random_tensor(dt, {2, 3, 4}, rng, 1000, 1010);  // exp would overflow without the max shift
    check_graph(g,
                {
                    {random_tensor(dt, {2, 3, 4}, rng, -5, 5)},
                    {huge},
                    {non_contiguous(random_tensor(dt, {3, 1, 5}, rng))},
                    {random_tensor(dt, {2, 0, 3}, rng)},
                },
                1e-5, 1e-6);
    auto out = compile(g)({huge});
    for (double v : out[2].to_doubles()) EXPECT_TRUE(std::isfinite(v));
  }
}

TEST(ShapeOps, SliceWithNegativeStepsClampedBoundsAndStrides) {
  std::mt19937 rng(21);
  struct Case {
    std::vector<int64_t> starts, ends, axes, steps;
  };
  const int64_t big = std::numeric_limits<int64_t>::max(),
                small = std::numeric_limits<int64_t>::min();
  for (const Case& c : {Case{{1, 0}, {3, -1}, {}, {}}, Case{{-1}, {small}, {1}, {-1}},
                        Case{{0, 5}, {big, 1}, {2, 0}, {2, -2}}, Case{{10}, {20}, {-1}, {}},
                        // Both trailing axes reversed (a weight's flip): reversed rows.
                        Case{{-1, -1}, {small, small}, {1, 2}, {-1, -1}}}) {
    Graph g("slice");
    Var x = input(g, "x", DType::kFloat32, {kDynamic, kDynamic, kDynamic});
    Attrs a{{"starts", c.starts}, {"ends", c.ends}};
    if (!c.axes.empty()) a["axes"] = c.axes;
    if (!c.steps.empty()) a["steps"] = c.steps;
    g.set_outputs({apply("slice", {x}, a)});
    check_graph(g, {{random_tensor(DType::kFloat32, {6, 5, 4}, rng)},
                    {non_contiguous(random_tensor(DType::kFloat32, {3, 7, 2}, rng))},
                    {random_tensor(DType::kFloat32, {0, 3, 1}, rng)}});
  }
  int64_t first = 0, count = 0;
  slice_dim(5, -1, small, -1, &first, &count);  // the whole axis reversed
  EXPECT_EQ(first, 4);
  EXPECT_EQ(count, 5);
  slice_dim(5, 1, big, 2, &first, &count);
  EXPECT_EQ(first, 1);
  EXPECT_EQ(count, 2);
  Graph bad("slice_step_0");
  Var x = input(bad, "x", DType::kFloat32, {3});
  EXPECT_THROW(apply("slice", {x},
                     Attrs{{"starts", std::vector<int64_t>{0}},
                           {"ends", std::vector<int64_t>{1}},
                           {"steps", std::vector<int64_t>{0}}}),
               UserError);
}

TEST(ShapeOps, ExpandPadAndGather) {
  std::mt19937 rng(22);
  {
    Graph g("expand");
    Var x = input(g, "x", DType::kFloat64, {kDynamic, kDynamic});
    g.set_outputs({apply("expand", {x}, {{"shape", std::vector<int64_t>{2, 1, 4}}})});
    check_graph(g, {{random_tensor(DType::kFloat64, {3, 1}, rng)},
                    {random_tensor(DType::kFloat64, {1, 4}, rng)},
                    {non_contiguous(random_tensor(DType::kFloat64, {5, 4}, rng))}});
  }
  for (DType dt : {DType::kFloat32, DType::kInt64, DType::kBool}) {
    Graph g("pad");
    Var x = input(g, "x", dt, {kDynamic, kDynamic});
    g.set_outputs({apply("pad", {x}, {{"pads", std::vector<int64_t>{1, 0, 2, 3}}, {"value", 1.0}}),
                   apply("pad", {x}, {{"pads", std::vector<int64_t>{-1, 2, 0, -2}}})});
    check_graph(
        g, {{random_tensor(dt, {3, 4}, rng)}, {non_contiguous(random_tensor(dt, {4, 5}, rng))}});
  }
  for (DType it : {DType::kInt64, DType::kInt32}) {
    Graph g("gather");
    Var x = input(g, "x", DType::kFloat32, {kDynamic, kDynamic, kDynamic});
    Var i = input(g, "i", it, {kDynamic, kDynamic});
    g.set_outputs({apply("gather", {x, i}, {{"axis", int64_t{1}}}), apply("gather", {x, i}),
                   apply("gather", {x, i}, {{"axis", int64_t{-1}}})});
    Tensor idx = Tensor::from_doubles(it, {2, 2}, {0, -1, 1, -2});
    check_graph(g, {{random_tensor(DType::kFloat32, {3, 4, 5}, rng), idx},
                    {non_contiguous(random_tensor(DType::kFloat32, {2, 3, 2}, rng)), idx}});
    Function f = compile(g);
    Tensor bad = Tensor::from_doubles(it, {1, 1}, {7});
    EXPECT_NE(testing::error_of([&] {
                f({random_tensor(DType::kFloat32, {3, 4, 5}, rng), bad});
              }).find("gather: index 7 is out of range"),
              std::string::npos);
  }
}

// Hand-computed values (the ONNX spec's examples and numpy's NaN rule), then the compiled
// code against perform on strided inputs with tails.
TEST(IndexOps, GatherElementsAndArgMaxMinAgainstHandValues) {
  auto run1 = [](const std::string& op, const Attrs& props, std::vector<Tensor> ins) {
    Graph g(op);
    std::vector<Var> vars;
    for (size_t i = 0; i < ins.size(); ++i)
      vars.push_back(input(g, "x" + std::to_string(i), ins[i].dtype(), ins[i].shape()));
    g.set_outputs({apply(op, vars, props)});
    return compile(g)(ins)[0];
  };
  auto values = [](const Tensor& t) {
    std::vector<double> v;
    for (int64_t i = 0; i < t.numel(); ++i) v.push_back(t.load(i));
    return v;
  };
  Tensor d2 = Tensor::from_doubles(DType::kFloat32, {2, 2}, {1, 2, 3, 4});
  Tensor i2 = Tensor::from_doubles(DType::kInt64, {2, 2}, {0, 0, 1, 0});
  EXPECT_EQ(values(run1("gather_elements", {{"axis", int64_t{1}}}, {d2, i2})),
            (std::vector<double>{1, 1, 4, 3}));
  Tensor d3 = Tensor::from_doubles(DType::kInt32, {3, 3}, {1, 2, 3, 4, 5, 6, 7, 8, 9});
  Tensor i3 = Tensor::from_doubles(DType::kInt32, {2, 3}, {1, 2, 0, 2, 0, -3});
  EXPECT_EQ(values(run1("gather_elements", {}, {d3, i3})), (std::vector<double>{4, 8, 3, 7, 2, 3}));
  Tensor bad = Tensor::from_doubles(DType::kInt32, {1, 1}, {3});
  EXPECT_NE(testing::error_of([&] {
              run1("gather_elements", {}, {d3, bad});
            }).find("gather_elements: index 3 is out of range for axis 0 of size 3"),
            std::string::npos);

  const double nan = std::nan("");
  Tensor x = Tensor::from_doubles(DType::kFloat32, {3, 4},
                                  {1, nan, 3, nan, /* ties */ 3, 1, 3, 1, -0.0, 0.0, -1, 2});
  const Attrs last{
      {"axis", int64_t{1}}, {"select_last_index", int64_t{1}}, {"keepdims", int64_t{0}}};
  const Attrs first{{"axis", int64_t{1}}, {"keepdims", int64_t{0}}};
  EXPECT_EQ(values(run1("arg_max", first, {x})), (std::vector<double>{1, 0, 3}));
  EXPECT_EQ(values(run1("arg_max", last, {x})), (std::vector<double>{3, 2, 3}));
  EXPECT_EQ(values(run1("arg_min", first, {x})), (std::vector<double>{1, 1, 2}));
  EXPECT_EQ(values(run1("arg_min", last, {x})), (std::vector<double>{3, 3, 2}));
  // -0.0 and 0.0 tie: the first (or last) of them wins, never by sign.
  Tensor z = Tensor::from_doubles(DType::kFloat64, {1, 3}, {-0.0, 0.0, -0.0});
  EXPECT_EQ(values(run1("arg_max", first, {z})), (std::vector<double>{0}));
  EXPECT_EQ(values(run1("arg_max", last, {z})), (std::vector<double>{2}));
  Tensor ints = Tensor::from_doubles(DType::kInt64, {2, 3}, {5, -2, 5, 9, 9, -7});
  EXPECT_EQ(values(run1("arg_max", {{"axis", int64_t{0}}}, {ints})),
            (std::vector<double>{1, 1, 0}));
  EXPECT_EQ(run1("arg_max", {{"axis", int64_t{0}}}, {ints}).shape(), (Shape{1, 3}));

  std::mt19937 rng(31);
  for (const char* op : {"arg_max", "arg_min"}) {
    Graph g(op);
    Var v = input(g, "x", DType::kFloat32, {kDynamic, kDynamic, kDynamic});
    g.set_outputs({apply(op, {v}, {{"axis", int64_t{1}}}),
                   apply(op, {v}, {{"axis", int64_t{-1}}, {"keepdims", int64_t{0}}})});
    check_graph(g, {{random_tensor(DType::kFloat32, {3, 17, 5}, rng)},
                    {non_contiguous(random_tensor(DType::kFloat32, {2, 9, 33}, rng))}});
  }
  Graph g("gather_elements");
  Var v = input(g, "x", DType::kFloat64, {kDynamic, kDynamic});
  Var i = input(g, "i", DType::kInt64, {kDynamic, kDynamic});
  g.set_outputs({apply("gather_elements", {v, i}, {{"axis", int64_t{-1}}})});
  Tensor idx = Tensor::from_doubles(DType::kInt64, {2, 3}, {0, -1, 2, 4, 1, -5});
  check_graph(g, {{non_contiguous(random_tensor(DType::kFloat64, {3, 5}, rng)), idx}});
}

// The recurrent engine (OpenBLAS projections, per-step gates) against perform's direct
// transcription of ONNX's equations: every direction, sequence lengths (0, partial, full)
// with reverse starting at each sequence's last step, clip, the activations with alpha and
// beta, GRU's two reset placements, LSTM's peepholes and coupled input-forget gate.
TEST(Recurrent, EngineMatchesTheEquationsAcrossDirectionsLengthsAndActivations) {
  std::mt19937 rng(41);
  struct Case {
    std::string kind, direction, activations;
    double clip;
    int64_t flag;  // input_forget (lstm) / linear_before_reset (gru)
    bool lens;
    DType dtype;
  };
  const std::vector<Case> cases{
      {"lstm", "forward", "Sigmoid,Tanh,Tanh", 0, 0, false, DType::kFloat32},
      {"lstm", "bidirectional", "Sigmoid,Tanh,Tanh,HardSigmoid,Elu,Softsign", 0, 0, true,
       DType::kFloat32},
      {"lstm", "reverse", "Sigmoid,Tanh,Relu", 0.7, 1, true, DType::kFloat64},
      {"gru", "forward", "Sigmoid,Tanh", 0, 0, true, DType::kFloat32},
      {"gru", "bidirectional", "Sigmoid,Tanh,LeakyRelu,ScaledTanh", 0, 1, false, DType::kFloat64},
      {"gru", "reverse", "HardSigmoid,Softplus", 1.5, 0, true, DType::kFloat32},
      {"rnn", "bidirectional", "Tanh,Affine", 0, 0, true, DType::kFloat32},
      {"rnn", "reverse", "ThresholdedRelu", 0, 0, false, DType::kFloat64},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.kind + " " + c.direction + " " + c.activations);
    const int64_t seq = 7, batch = 5, in = 6, hidden = 9;
    const int64_t dirs = c.direction == "bidirectional" ? 2 : 1;
    const int64_t g = c.kind == "lstm" ? 4 : c.kind == "gru" ? 3 : 1;
    Graph gr(c.kind);
    std::vector<Var> ins{input(gr, "x", c.dtype, {kDynamic, kDynamic, in}),
                         input(gr, "w", c.dtype, {dirs, g * hidden, in}),
                         input(gr, "r", c.dtype, {dirs, g * hidden, hidden}),
                         input(gr, "b", c.dtype, {dirs, 2 * g * hidden}),
                         input(gr, "h0", c.dtype, {dirs, kDynamic, hidden})};
    if (c.kind == "lstm") {
      ins.push_back(input(gr, "c0", c.dtype, {dirs, kDynamic, hidden}));
      ins.push_back(input(gr, "p", c.dtype, {dirs, 3 * hidden}));
    }
    if (c.lens) ins.push_back(input(gr, "lens", DType::kInt32, {kDynamic}));
    std::vector<double> alpha, beta;
    const size_t count = std::count(c.activations.begin(), c.activations.end(), ',') + 1;
    for (size_t i = 0; i < count; ++i) {
      alpha.push_back(0.3 + 0.1 * static_cast<double>(i));
      beta.push_back(0.5 - 0.05 * static_cast<double>(i));
    }
    Attrs p{{"hidden_size", hidden},        {"direction", c.direction},
            {"activations", c.activations}, {"activation_alpha", alpha},
            {"activation_beta", beta},      {"clip", c.clip},
            {"has_lens", int64_t{c.lens}}};
    if (c.kind == "lstm") p["input_forget"] = c.flag;
    if (c.kind == "gru") p["linear_before_reset"] = c.flag;
    Node* node = gr.add_node(OpRegistry::instance().create(c.kind, p), [&] {
      std::vector<Variable*> v;
      for (const Var& x : ins) v.push_back(x.var());
      return v;
    }());
    gr.set_outputs(node->outputs);
    std::vector<Tensor> values{non_contiguous(random_tensor(c.dtype, {seq, batch, in}, rng)),
                               random_tensor(c.dtype, {dirs, g * hidden, in}, rng, -0.5, 0.5),
                               random_tensor(c.dtype, {dirs, g * hidden, hidden}, rng, -0.5, 0.5),
                               random_tensor(c.dtype, {dirs, 2 * g * hidden}, rng, -0.5, 0.5),
                               random_tensor(c.dtype, {dirs, batch, hidden}, rng)};
    if (c.kind == "lstm") {
      values.push_back(random_tensor(c.dtype, {dirs, batch, hidden}, rng));
      values.push_back(random_tensor(c.dtype, {dirs, 3 * hidden}, rng, -0.5, 0.5));
    }
    if (c.lens) values.push_back(Tensor::from_doubles(DType::kInt32, {batch}, {7, 0, 3, 1, 6}));
    check_graph(gr, {values});
    if (c.lens) {
      // A length past the sequence is the run's clear error.
      values.back() = Tensor::from_doubles(DType::kInt32, {batch}, {7, 8, 3, 1, 6});
      EXPECT_NE(testing::error_of([&] {
                  compile(gr)(values);
                }).find(c.kind + ": sequence_lens[1] is 8, outside [0, 7]"),
                std::string::npos);
    }
  }
}

// Every pair of dtypes the convert op joins, on the values that break conversions: NaN,
// infinities, -0.0, ties, values past float16's range and past the narrow integers'.
TEST(Convert, EveryDtypePairMatchesPerformOnEdgeValues) {
  const std::vector<DType> all{DType::kBool,   DType::kInt8,    DType::kUInt8,    DType::kInt16,
                               DType::kUInt16, DType::kInt32,   DType::kUInt32,   DType::kInt64,
                               DType::kUInt64, DType::kFloat16, DType::kBFloat16, DType::kFloat32,
                               DType::kFloat64};
  const std::vector<double> floats{0.0,      -0.0,      0.5,      1.5,    -2.5,  1.0 + 1.0 / 2048,
                                   65504,    65520,     -70000.5, 1e-8,   3e38,  -1e10,
                                   INFINITY, -INFINITY, NAN,      300.75, -129.0};
  const std::vector<double> ints{
      0,     1,      -1,    127,   128,          -129,         255, 256, 32767,
      32768, -32769, 65535, 65536, 4294967295.0, 4294967296.0, -5,  1e15};
  for (DType from : all) {
    // One graph per source type, one output per target type.
    Graph g("convert");
    Var x = input(g, "x", from, {kDynamic});
    std::vector<Variable*> outs;
    for (DType to : all)
      outs.push_back(apply("convert", {x}, {{"to", std::string(dtype_name(to))}}).var());
    g.set_outputs(outs);
    const auto& vals = is_float(from) ? floats : ints;
    Tensor t = Tensor::empty(from, {static_cast<int64_t>(vals.size())});
    for (size_t i = 0; i < vals.size(); ++i) {
      if (is_float(from)) {
        t.store(static_cast<int64_t>(i), vals[i]);
      } else {
        t.store_int(static_cast<int64_t>(i), static_cast<int64_t>(vals[i]));
      }
    }
    Function f = compile(g);
    EXPECT_EQ(f.info().compiler_log, "") << "generated module compiled with warnings";
    auto got = f({t});
    auto want = evaluate_reference(g, {t});
    for (size_t k = 0; k < all.size(); ++k) {
      SCOPED_TRACE(std::string(dtype_name(from)) + " -> " + std::string(dtype_name(all[k])));
      ASSERT_EQ(got[k].nbytes(), want[k].nbytes());
      // Bit for bit (NaN patterns included): both paths share one set of rules.
      EXPECT_EQ(std::memcmp(got[k].data(), want[k].data(), got[k].nbytes()), 0);
    }
  }
  // Spot values by hand: float16 saturates to infinity, integers wrap, floats truncate.
  auto one = [](DType from, double v, DType to) {
    Tensor t = Tensor::from_doubles(from, {1}, {v});
    Tensor out = Tensor::empty(to, {1});
    std::vector<Tensor> outs{out};
    OpRegistry::instance()
        .create("convert", {{"to", std::string(dtype_name(to))}})
        ->perform({t}, outs);
    return out;
  };
  EXPECT_TRUE(std::isinf(one(DType::kFloat32, 65520, DType::kFloat16).load(0)));
  EXPECT_EQ(one(DType::kInt32, 65536 + 7, DType::kUInt16).load_int(0), 7);
  EXPECT_EQ(one(DType::kInt32, 32768, DType::kInt16).load_int(0), -32768);
  EXPECT_EQ(one(DType::kFloat32, -2.75, DType::kInt32).load_int(0), -2);
  EXPECT_EQ(one(DType::kFloat64, NAN, DType::kInt64).load_int(0), 0);
}

// Running sums and top-k against hand values, then the compiled code against perform on
// strided inputs with NaN and ties, every flag.
TEST(ScanOps, CumSumAndTopKAgainstHandValuesAndPerform) {
  auto run1 = [](const std::string& op, const Attrs& props, const Tensor& x) {
    Graph g(op);
    Var v = input(g, "x", x.dtype(), x.shape());
    Node* node = g.add_node(OpRegistry::instance().create(op, props), {v.var()});
    g.set_outputs(node->outputs);
    return compile(g)({x});
  };
  Tensor x = Tensor::from_doubles(DType::kInt64, {2, 3}, {1, 2, 3, 4, 5, 6});
  EXPECT_EQ(run1("cumsum", {{"axis", int64_t{1}}}, x)[0].to_doubles(),
            (std::vector<double>{1, 3, 6, 4, 9, 15}));
  EXPECT_EQ(run1("cumsum",
                 {{"axis", int64_t{0}}, {"exclusive", int64_t{1}}, {"reverse", int64_t{1}}}, x)[0]
                .to_doubles(),
            (std::vector<double>{4, 5, 6, 0, 0, 0}));
  const double nan = std::nan("");
  Tensor f = Tensor::from_doubles(DType::kFloat32, {1, 6}, {3, nan, 5, 3, -1, 5});
  auto top = run1("top_k", {{"k", int64_t{4}}}, f);
  EXPECT_TRUE(std::isnan(top[0].load(0)));                            // NaN ranks first for largest
  EXPECT_EQ(top[1].to_doubles(), (std::vector<double>{1, 2, 5, 0}));  // ties: lower index first
  auto low = run1("top_k", {{"k", int64_t{3}}, {"largest", int64_t{0}}}, f);
  EXPECT_EQ(low[1].to_doubles(), (std::vector<double>{4, 0, 3}));
  EXPECT_NE(testing::error_of([&] {
              run1("top_k", {{"k", int64_t{7}}}, f);
            }).find("k = 7 exceeds"),
            std::string::npos);

  std::mt19937 rng(53);
  for (DType dt : {DType::kFloat32, DType::kFloat64, DType::kInt32}) {
    Graph g("scan");
    Var v = input(g, "x", dt, {kDynamic, kDynamic, kDynamic});
    std::vector<Variable*> outs;
    for (int64_t flags = 0; flags < 4; ++flags) {
      outs.push_back(
          apply("cumsum", {v},
                {{"axis", int64_t{1}}, {"exclusive", flags & 1}, {"reverse", flags >> 1}})
              .var());
    }
    for (int64_t largest : {0, 1}) {
      Node* node =
          g.add_node(OpRegistry::instance().create(
                         "top_k", {{"k", int64_t{3}}, {"axis", int64_t{-1}}, {"largest", largest}}),
                     {v.var()});
      outs.insert(outs.end(), node->outputs.begin(), node->outputs.end());
    }
    g.set_outputs(outs);
    Tensor a = random_tensor(dt, {3, 5, 7}, rng, -3, 3);  // integers: many ties
    if (is_float(dt)) {
      a.store(4, nan);
      a.store(9, nan);
    }
    check_graph(g, {{a}, {non_contiguous(random_tensor(dt, {2, 9, 4}, rng, -3, 3))}});
  }

  // The heap's paths: k of 0, a half, all of a long row with many ties and NaNs.
  for (int64_t k : {int64_t{0}, int64_t{150}, int64_t{300}}) {
    for (int64_t largest : {0, 1}) {
      Graph g("top_k_long");
      Var v = input(g, "x", DType::kFloat32, {kDynamic, 300});
      Node* node = g.add_node(OpRegistry::instance().create(
                                  "top_k", {{"k", k}, {"axis", int64_t{1}}, {"largest", largest}}),
                              {v.var()});
      g.set_outputs(node->outputs);
      Tensor a = random_tensor(DType::kFloat32, {2, 300}, rng, -20, 20);
      for (int64_t i = 0; i < 600; i += 37) a.store(i, nan);
      for (int64_t i = 0; i < 600; i += 5) a.store(i, std::round(a.load(i)));  // ties
      check_graph(g, {{a}});
    }
  }
  // k from the run-time dimensions: min(5, the rows of input 1), as a detector's min(k, n).
  {
    Graph g("top_k_dims");
    Var v = input(g, "x", DType::kFloat32, {kDynamic});
    Var n = input(g, "n", DType::kFloat32, {kDynamic});
    const DimExpr k = DimExpr::binary('m', DimExpr::constant(5), DimExpr::dim(1, 0));
    Node* node = g.add_node(OpRegistry::instance().create("top_k", {{"k_dims", k.str()}}),
                            {v.var(), n.var()});
    g.set_outputs(node->outputs);
    EXPECT_EQ(node->outputs[0]->type.dims[0], kDynamic);
    Tensor a = Tensor::from_doubles(DType::kFloat32, {6}, {4, 9, 1, 7, 7, 2});
    auto got = compile(g)({a, Tensor::zeros(DType::kFloat32, {3})});
    EXPECT_EQ(got[1].to_doubles(), (std::vector<double>{1, 3, 4}));
    got = compile(g)({a, Tensor::zeros(DType::kFloat32, {9})});
    EXPECT_EQ(got[1].to_doubles(), (std::vector<double>{1, 3, 4, 0, 5}));
    check_graph(
        g, {{a, Tensor::zeros(DType::kFloat32, {2})}, {a, Tensor::zeros(DType::kFloat32, {0})}});
    EXPECT_NE(
        testing::error_of([&] {
          compile(g)({Tensor::zeros(DType::kFloat32, {2}), Tensor::zeros(DType::kFloat32, {4})});
        }).find("k = 4 is outside axis 0"),
        std::string::npos);
  }
}

// Resize's C engine against perform for every mode and coordinate transform, strided
// inputs, dynamic dimensions (scales) and fixed sizes; a hand-checked bilinear value.
TEST(Resize, EveryModeAndTransformMatchesPerform) {
  std::mt19937 rng(71);
  for (const char* mode : {"nearest", "linear", "cubic"}) {
    for (const char* ctm : {"half_pixel", "asymmetric", "pytorch_half_pixel", "align_corners",
                            "tf_half_pixel_for_nn"}) {
      Graph g(std::string("resize_") + mode + "_" + ctm);
      Var x = input(g, "x", DType::kFloat32, {kDynamic, kDynamic, kDynamic, kDynamic});
      Attrs p{{"mode", std::string(mode)}, {"coordinate_transformation_mode", std::string(ctm)}};
      Attrs up = p, down = p;
      up["scales"] = std::vector<double>{1.0, 1.0, 2.5, 1.75};
      down["scales"] = std::vector<double>{1.0, 1.0, 0.6, 0.5};
      down["exclude_outside"] = int64_t{1};
      down["nearest_mode"] = std::string("ceil");
      g.set_outputs({apply("resize", {x}, up).var(), apply("resize", {x}, down).var()});
      check_graph(g,
                  {{random_tensor(DType::kFloat32, {2, 3, 5, 4}, rng)},
                   {non_contiguous(random_tensor(DType::kFloat32, {1, 2, 7, 9}, rng))}},
                  1e-4, 1e-5);
    }
  }
  Graph g("resize_crop");
  Var x = input(g, "x", DType::kFloat64, {1, 1, 4, 4});
  g.set_outputs({apply("resize", {x},
                       {{"mode", std::string("linear")},
                        {"coordinate_transformation_mode", std::string("tf_crop_and_resize")},
                        {"roi", std::vector<double>{0, 0, 0.4, 0.6, 1, 1, 1.2, 1.7}},
                        {"extrapolation_value", 10.0},
                        {"sizes", std::vector<int64_t>{1, 1, 3, 3}}})
                     .var()});
  check_graph(g, {{random_tensor(DType::kFloat64, {1, 1, 4, 4}, rng)}});
  // Bilinear, half_pixel, 2x2 -> 4x4: output (1, 1) sits at input (0.25, 0.25).
  Graph h("resize_hand");
  Var v = input(h, "x", DType::kFloat64, {1, 1, 2, 2});
  h.set_outputs(
      {apply("resize", {v},
             {{"mode", std::string("linear")}, {"scales", std::vector<double>{1, 1, 2, 2}}})
           .var()});
  Tensor y = compile(h)({Tensor::from_doubles(DType::kFloat64, {1, 1, 2, 2}, {1, 2, 3, 4})})[0];
  EXPECT_EQ(y.shape(), (Shape{1, 1, 4, 4}));
  EXPECT_DOUBLE_EQ(y.load(5),
                   0.75 * 0.75 * 1 + 0.75 * 0.25 * 2 + 0.25 * 0.75 * 3 + 0.25 * 0.25 * 4);
  EXPECT_DOUBLE_EQ(y.load(0), 1.0);  // past the border: the edge value
}

// Resize splits its output across parts (three workers, a small grain: every part starts
// mid-row) and matches perform; a dimension it leaves alone reads one input, so an infinity in
// one channel stays out of its neighbours (not 0 * inf = NaN), and the interpolated plane
// equals a bilinear computed here by hand.
TEST(Resize, PartsAndUntouchedDimensionsMatchPerformAndAHandBilinear) {
  static Engine* engine = make_engine(EngineKind::kThreaded, 3).release();
  CompileOptions split;
  split.engine = engine;
  split.split_grain = 7;
  std::mt19937 rng(73);
  Graph g("resize_parts");
  Var x = input(g, "x", DType::kFloat32, {2, 3, 9, 11});
  g.set_outputs(
      {apply("resize", {x},
             {{"mode", std::string("linear")}, {"sizes", std::vector<int64_t>{2, 3, 17, 6}}})
           .var()});
  Tensor xv = random_tensor(DType::kFloat32, {2, 3, 9, 11}, rng);
  xv.store(1 * 99 + 4 * 11 + 5, INFINITY);  // batch 0, channel 1
  Function f = compile(g, split);
  const Tensor y = f({xv})[0];
  const Tensor want = evaluate_reference(g, {xv})[0];
  EXPECT_TRUE(testing::tensors_close(y, want, 1e-5, 1e-6));
  EXPECT_GT(f.stats().split_calls, 0);
  // Channels 0 and 2 of batch 0: finite, and the half-pixel bilinear of their own plane.
  for (const int64_t c : {int64_t{0}, int64_t{2}}) {
    for (int64_t oy = 0; oy < 17; ++oy) {
      for (int64_t ox = 0; ox < 6; ++ox) {
        const double sy = std::clamp((oy + 0.5) * 9.0 / 17 - 0.5, 0.0, 8.0);
        const double sx = std::clamp((ox + 0.5) * 11.0 / 6 - 0.5, 0.0, 10.0);
        const auto y0 = static_cast<int64_t>(sy), x0 = static_cast<int64_t>(sx);
        const int64_t y1 = std::min<int64_t>(y0 + 1, 8), x1 = std::min<int64_t>(x0 + 1, 10);
        const double fy = sy - static_cast<double>(y0), fx = sx - static_cast<double>(x0);
        auto at = [&](int64_t yy, int64_t xx) { return xv.load((c * 9 + yy) * 11 + xx); };
        const double ref = (1 - fy) * ((1 - fx) * at(y0, x0) + fx * at(y0, x1)) +
                           fy * ((1 - fx) * at(y1, x0) + fx * at(y1, x1));
        const double got = y.load((c * 17 + oy) * 6 + ox);
        ASSERT_TRUE(std::isfinite(got)) << "channel " << c;
        EXPECT_NEAR(got, ref, 1e-5 * std::max(1.0, std::fabs(ref))) << c << " " << oy << " " << ox;
      }
    }
  }
}

// ScatterElements on contiguous inputs whose indices cover data but along the axis (as
// PyTorch's scatter with an expanded index exports): three workers split the columns around
// the axis; every axis and reduction, negative and repeated indices (applied in order), against
// perform; an index out of range fails naming it.
TEST(IndexOps, ScatterElementsColumnsSplitAcrossPartsMatchPerform) {
  static Engine* engine = make_engine(EngineKind::kThreaded, 3).release();
  CompileOptions split;
  split.engine = engine;
  split.split_grain = 3;
  std::mt19937 rng(79);
  const Shape data_shape{4, 5, 6};
  for (int64_t axis = 0; axis < 3; ++axis) {
    for (const char* red : {"none", "add", "mul", "max", "min"}) {
      Shape ishape = data_shape;
      ishape[static_cast<size_t>(axis)] = 7;  // more updates than the axis: repeats
      Graph g("scatter_cols");
      Var d = input(g, "d", DType::kFloat32, data_shape);
      Var i = input(g, "i", DType::kInt64, ishape);
      Var u = input(g, "u", DType::kFloat32, ishape);
      g.set_outputs(
          {apply("scatter_elements", {d, i, u}, {{"axis", axis}, {"reduction", std::string(red)}})
               .var()});
      const int64_t len = data_shape[static_cast<size_t>(axis)];
      const std::vector<Tensor> in{random_tensor(DType::kFloat32, data_shape, rng),
                                   random_tensor(DType::kInt64, ishape, rng, -len, len - 1),
                                   random_tensor(DType::kFloat32, ishape, rng)};
      Function f = compile(g, split);
      EXPECT_TRUE(testing::tensors_close(f(in)[0], evaluate_reference(g, in)[0], 1e-6, 1e-6))
          << "axis " << axis << " " << red;
      EXPECT_GT(f.stats().split_calls, 0);
      if (axis == 1 && std::string(red) == "none") {
        Tensor bad = in[1].clone();
        bad.store_int(17, len);
        EXPECT_NE(error_of([&] {
                    f({in[0], bad, in[2]});
                  })
                      .find("index " + std::to_string(len) +
                            " is out of range for a dimension of "
                            "size " +
                            std::to_string(len)),
                  std::string::npos);
      }
    }
  }
}

// GatherND / ScatterND / ScatterElements: the ONNX spec's examples by hand, then compiled
// code against perform on strided data with negative and repeated indices, every reduction.
TEST(IndexOps, GatherNDAndScattersAgainstHandValuesAndPerform) {
  auto run = [](const std::string& op, const Attrs& props, const std::vector<Tensor>& ins) {
    Graph g(op);
    std::vector<Var> vars;
    for (size_t i = 0; i < ins.size(); ++i)
      vars.push_back(input(g, "x" + std::to_string(i), ins[i].dtype(), ins[i].shape()));
    g.set_outputs({apply(op, vars, props)});
    return compile(g)(ins)[0].to_doubles();
  };
  Tensor d = Tensor::from_doubles(DType::kInt32, {2, 2}, {0, 1, 2, 3});
  EXPECT_EQ(run("gather_nd", {}, {d, Tensor::from_doubles(DType::kInt64, {2, 1}, {1, 0})}),
            (std::vector<double>{2, 3, 0, 1}));
  EXPECT_EQ(run("gather_nd", {}, {d, Tensor::from_doubles(DType::kInt64, {2, 2}, {0, 0, -1, 1})}),
            (std::vector<double>{0, 3}));
  Tensor data = Tensor::from_doubles(DType::kFloat32, {8}, {1, 2, 3, 4, 5, 6, 7, 8});
  EXPECT_EQ(run("scatter_nd", {},
                {data, Tensor::from_doubles(DType::kInt64, {4, 1}, {4, 3, 1, 7}),
                 Tensor::from_doubles(DType::kFloat32, {4}, {9, 10, 11, 12})}),
            (std::vector<double>{1, 11, 3, 10, 9, 6, 7, 12}));
  EXPECT_EQ(run("scatter_elements", {{"axis", int64_t{1}}, {"reduction", std::string("add")}},
                {Tensor::from_doubles(DType::kFloat32, {1, 5}, {1, 2, 3, 4, 5}),
                 Tensor::from_doubles(DType::kInt64, {1, 2}, {1, 1}),
                 Tensor::from_doubles(DType::kFloat32, {1, 2}, {1.1, 2.1})}),
            (std::vector<double>{1, 2 + 1.1f + 2.1f, 3, 4, 5}));
  EXPECT_NE(testing::error_of([&] {
              run("gather_nd", {}, {d, Tensor::from_doubles(DType::kInt64, {1, 1}, {2})});
            }).find("gather_nd: index 2 is out of range for a dimension of size 2"),
            std::string::npos);

  std::mt19937 rng(83);
  for (const char* red : {"none", "add", "mul", "max", "min"}) {
    Graph g(std::string("scatter_") + red);
    Var x = input(g, "x", DType::kFloat64, {kDynamic, kDynamic, kDynamic});
    Var i = input(g, "i", DType::kInt64, {kDynamic, kDynamic, kDynamic});
    Var u = input(g, "u", DType::kFloat64, {kDynamic, kDynamic, kDynamic});
    Var ind = input(g, "n", DType::kInt32, {kDynamic, 2});
    Var v = input(g, "v", DType::kFloat64, {kDynamic, kDynamic});
    g.set_outputs({apply("scatter_elements", {x, i, u},
                         {{"axis", int64_t{-2}}, {"reduction", std::string(red)}})
                       .var(),
                   apply("scatter_nd", {x, ind, v}, {{"reduction", std::string(red)}}).var(),
                   apply("gather_nd", {x, ind}).var()});
    Tensor idx =
        Tensor::from_doubles(DType::kInt64, {2, 2, 3}, {0, -1, 2, 3, 1, 0, -4, 2, 2, 1, 1, 0});
    Tensor nd = Tensor::from_doubles(DType::kInt32, {3, 2}, {0, 1, -1, -2, 1, 3});
    check_graph(g, {{non_contiguous(random_tensor(DType::kFloat64, {2, 4, 3}, rng)), idx,
                     random_tensor(DType::kFloat64, {2, 2, 3}, rng), nd,
                     random_tensor(DType::kFloat64, {3, 3}, rng)}});
  }
}

// The layout ops passes create (im2col for bf16 convolutions, max_pool_nhwc for int8
// regions) and max_pool on bytes refuse what they do not take, naming it.
TEST(LayoutOps, BadInputsAreNamed) {
  Graph g("layout_errors");
  Var f4 = input(g, "f4", DType::kFloat32, {1, 5, 6, 3});
  Var f3 = input(g, "f3", DType::kFloat32, {1, 5, 6});
  Var u4 = input(g, "u4", DType::kUInt8, {1, 5, 6, 3});
  Var i32 = input(g, "i32", DType::kInt32, {1, 3, 5, 6});
  const Attrs k3{{"kernel_shape", std::vector<int64_t>{3, 3}}};
  auto expect_error = [](const std::function<void()>& f, const std::vector<std::string>& words) {
    const std::string m = error_of(f);
    for (const auto& w : words) EXPECT_NE(m.find(w), std::string::npos) << w << " not in: " << m;
  };
  expect_error([&] { kiln::apply("im2col", {f3}, k3); }, {"im2col", "(N, H, W, C)", "(1, 5, 6)"});
  expect_error([&] { kiln::apply("im2col", {u4}, k3); }, {"im2col", "uint8"});
  expect_error([&] { kiln::apply("im2col", {f4}, {{"kernel_shape", std::vector<int64_t>{3}}}); },
               {"kernel_shape", "2 entries"});
  expect_error([&] { kiln::apply("max_pool_nhwc", {f4}, k3); },
               {"max_pool_nhwc", "float32", "uint8 and int8"});
  expect_error([&] { kiln::apply("average_pool", {kiln::apply("transpose", {u4},
                                                                {{"perm", std::vector<int64_t>{
                                                                      0, 3, 1, 2}}})},
                                 k3); },
               {"average_pool", "uint8"});
  expect_error([&] { kiln::apply("max_pool", {i32}, k3); }, {"max_pool", "int32"});
  // What they take: shapes by hand.
  EXPECT_EQ(kiln::apply("im2col", {f4}, k3).type().dims, (std::vector<int64_t>{1, 3, 4, 27}));
  EXPECT_EQ(kiln::apply("max_pool_nhwc", {u4}, k3).type().dims,
            (std::vector<int64_t>{1, 3, 4, 3}));
}

// A host function the module binds when it loads and calls as a step: what control flow of
// static shapes becomes (frontend/control_node.h). Here it scales by 3, or gives a wrong shape.
TEST(HostCall, RunsAsAStepOfTheModuleAndNamesWhatWentWrong) {
  struct Scale : HostFunction {
    bool wrong = false;
    std::vector<Tensor> operator()(const std::vector<Tensor>& in) override {
      Tensor out = Tensor::empty(DType::kFloat32, wrong ? Shape{2} : in.at(0).shape());
      for (int64_t i = 0; i < out.numel(); ++i) out.store(i, 3 * in[0].load(i));
      return {out};
    }
  };
  auto fn = std::make_shared<Scale>();
  const TensorType t{DType::kFloat32, {2, 3}};
  const Attrs props{{"key", std::string("host-call-test-scale")}, {"kind", std::string("Scale")}};
  Graph g("host_call");
  Var x = input(g, "x", DType::kFloat32, {2, 3});
  Var h(&g, g.add_node(std::make_shared<HostCallOp>(props, std::vector<TensorType>{t},
                                                    std::vector<TensorType>{t}, fn),
                       {kiln::apply("neg", {x}).var()})
                ->outputs[0]);
  g.set_outputs({kiln::apply("exp", {h})});
  Tensor xv = Tensor::from_doubles(DType::kFloat32, {2, 3}, {0, -0.5, 1, 2, -1, 0.25});
  Function f = compile(g);
  const std::vector<double> got = f({xv})[0].to_doubles();
  for (int64_t i = 0; i < 6; ++i) EXPECT_NEAR(got[i], std::exp(-3 * xv.load(i)), 1e-5) << i;
  // The registry's factory gives the same op (passes that copy a node use it) ...
  EXPECT_EQ(*OpRegistry::instance().create("host_call", props), *g.nodes()[1]->op);
  // ... and names a key no function of this process computes.
  const std::string missing = error_of([&] {
    OpRegistry::instance().create("host_call", {{"key", std::string("no-such-host-call")}});
  });
  EXPECT_NE(missing.find("no function of this process computes it"), std::string::npos) << missing;
  // A result of another shape than the node's fails the run naming both.
  fn->wrong = true;
  const std::string wrong = error_of([&] { f({xv}); });
  for (const char* w : {"Scale", "float32 (2,)", "float32 (2, 3)"})
    EXPECT_NE(wrong.find(w), std::string::npos) << w << " not in: " << wrong;
}

// A node whose output size comes from the values it computes (the positive elements of its
// input, as a Loop's trip count or an If's branch decides a size): the executor runs it as a
// step sized by its run and plans the steps after it from its result, per size. `a` is
// written before the node and read after it, so its bytes must outlive the first plan's
// temporaries; the sizes alternate (none, some, all) so later plans are found again.
TEST(HostCall, ASizedStepPlansTheStepsAfterItFromItsResults) {
  struct Positives : HostFunction {
    bool wrong = false;
    std::vector<Tensor> operator()(const std::vector<Tensor>& in) override {
      std::vector<double> kept;
      for (int64_t i = 0; i < in.at(0).numel(); ++i)
        if (in[0].load(i) > 0) kept.push_back(in[0].load(i));
      const auto k = static_cast<int64_t>(kept.size());
      if (wrong) return {Tensor::from_doubles(DType::kFloat32, {k, 1}, kept)};
      return {Tensor::from_doubles(DType::kFloat32, {k}, kept)};
    }
  };
  const int64_t n = int64_t{1} << 18;  // past the split grain: steps on either side split
  auto fn = std::make_shared<Positives>();
  Graph g("sized");
  Var x = input(g, "x", DType::kFloat32, {n});
  // A temporary the steps after the host call read (a scan: not fused into them).
  Var a = kiln::apply("cumsum", {x}, {{"axis", int64_t{0}}});
  Var p(&g, g.add_node(std::make_shared<HostCallOp>(
                           Attrs{{"key", std::string("host-call-test-positives")},
                                 {"kind", std::string("Positives")}},
                           std::vector<TensorType>{{DType::kFloat32, {n}}},
                           std::vector<TensorType>{{DType::kFloat32, {kDynamic}}}, fn),
                       {kiln::apply("neg", {kiln::apply("tanh", {x})}).var()})
                ->outputs[0]);
  const Var s = kiln::apply("reduce_sum", {kiln::apply("mul", {p, p})}, {{"keepdims", int64_t{0}}});
  g.set_outputs({kiln::apply("add", {a, s}), kiln::apply("exp", {p})});
  Function f = compile(g);
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> u(-1, 1);
  for (int pattern : {1, 0, 2, 1, 2, 0, 1}) {
    // 0: no element of -tanh(x) positive, 1: about half, 2: all.
    Tensor xv = Tensor::empty(DType::kFloat32, {n});
    for (int64_t i = 0; i < n; ++i) {
      const float v = u(rng);
      xv.store(i, pattern == 0 ? std::fabs(v) + 0.01f : pattern == 2 ? -std::fabs(v) - 0.01f : v);
    }
    const std::vector<Tensor> y = f({xv});
    std::vector<double> kept;
    double sum = 0;
    for (int64_t i = 0; i < n; ++i) {
      const double t = -std::tanh(static_cast<double>(xv.load(i)));
      if (static_cast<float>(t) > 0) kept.push_back(t), sum += t * t;
    }
    ASSERT_EQ(y[1].shape(), Shape{static_cast<int64_t>(kept.size())}) << pattern;
    for (size_t i = 0; i < kept.size(); i += 997)
      EXPECT_NEAR(y[1].load(static_cast<int64_t>(i)), std::exp(kept[i]), 1e-5)
          << pattern << " " << i;
    double run = 0;
    for (int64_t i = 0; i < n; ++i) {
      run += xv.load(i);
      if (i % 4099 == 0) {
        EXPECT_NEAR(y[0].load(i), run + sum, 0.05 + 1e-5 * sum) << pattern << " " << i;
      }
    }
  }
  // Two threads calling at once, each with its own sizes: each plans its rest from its own
  // results (the memo is shared).
  auto kept_of = [&](const Tensor& xv) {
    int64_t k = 0;
    for (int64_t i = 0; i < n; ++i) k += static_cast<float>(-std::tanh(double{xv.load(i)})) > 0;
    return k;
  };
  std::vector<Tensor> xs;
  for (int t = 0; t < 2; ++t) {
    xs.push_back(Tensor::empty(DType::kFloat32, {n}));
    for (int64_t i = 0; i < n; ++i)
      xs.back().store(i, t == 0 ? u(rng) : -std::fabs(u(rng)) - 0.01f);
  }
  std::vector<int64_t> got(2, -1), want{kept_of(xs[0]), kept_of(xs[1])};
  std::vector<std::thread> threads;
  for (int t = 0; t < 2; ++t) {
    threads.emplace_back([&, t] {
      for (int r = 0; r < 4; ++r) {
        const int64_t k = f({xs[static_cast<size_t>(t)]})[1].shape().at(0);
        if (r == 0 || k != want[static_cast<size_t>(t)]) got[static_cast<size_t>(t)] = k;
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(got, want);
  // A result of another rank than the node's type fails the run naming the node and both.
  fn->wrong = true;
  Tensor ones = Tensor::empty(DType::kFloat32, {n});
  for (int64_t i = 0; i < n; ++i) ones.store(i, -1.0);
  const std::string wrong = error_of([&] { f({ones}); });
  for (const char* w : {"Positives", "float32 (262144, 1)", "float32 (?,)"})
    EXPECT_NE(wrong.find(w), std::string::npos) << w << " not in: " << wrong;
}

// A host function that runs a compiled function of parallel branches, called from a step the
// engine pushed (the outer program is branched too): the inner run must run its steps on that
// thread, not wait on the engine from inside a pushed function (which the engine refuses).
TEST(HostCall, ANestedRunOfBranchesFromAPushedStepRunsOnItsThread) {
  const Shape dims{256, 512};
  auto running_sums = [](Var x) {
    return kiln::apply("add", {kiln::apply("cumsum", {x}, {{"axis", int64_t{0}}}),
                               kiln::apply("cumsum", {x}, {{"axis", int64_t{1}}})});
  };
  Graph inner("inner");
  inner.set_outputs({running_sums(input(inner, "x", DType::kFloat32, dims))});
  struct Nested : HostFunction {
    Function f;
    explicit Nested(Function fn) : f(std::move(fn)) {}
    std::vector<Tensor> operator()(const std::vector<Tensor>& in) override { return f(in); }
  };
  auto fn = std::make_shared<Nested>(compile(inner));
  const TensorType t{DType::kFloat32, dims};
  Graph outer("outer");
  Var a = input(outer, "a", DType::kFloat32, dims);
  Var b = input(outer, "b", DType::kFloat32, dims);
  Var h(&outer, outer
                    .add_node(std::make_shared<HostCallOp>(
                                  Attrs{{"key", std::string("host-call-test-nested")},
                                        {"kind", std::string("Nested")}},
                                  std::vector<TensorType>{t}, std::vector<TensorType>{t}, fn),
                              {a.var()})
                    ->outputs[0]);
  outer.set_outputs({kiln::apply("sub", {h, running_sums(b)})});
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> u(-1, 1);
  Tensor av = Tensor::empty(DType::kFloat32, dims), bv = Tensor::empty(DType::kFloat32, dims);
  for (int64_t i = 0; i < av.numel(); ++i) av.store(i, u(rng)), bv.store(i, u(rng));
  Function f = compile(outer);
  const Tensor y = f({av, bv})[0];
  EXPECT_GT(f.stats().stepwise_runs, 0) << "the outer steps were not pushed";
  // By hand: running sums of each (row, column) prefix, in double.
  auto sums = [&](const Tensor& x, int64_t r, int64_t c) {
    double down = 0, across = 0;
    for (int64_t k = 0; k <= r; ++k) down += x.load(k * 512 + c);
    for (int64_t k = 0; k <= c; ++k) across += x.load(r * 512 + k);
    return down + across;
  };
  for (int64_t r : {0, 1, 130, 255})
    for (int64_t c : {0, 7, 300, 511})
      EXPECT_NEAR(y.load(r * 512 + c), sums(av, r, c) - sums(bv, r, c), 2e-3) << r << ", " << c;
}

TEST(Conv, MatchesDirectReferenceAcrossGeometry) {
  std::mt19937 rng(23);
  struct Case {
    std::string name;
    std::vector<int64_t> x, w;
    Attrs attrs;
    bool bias;
  };
  using V = std::vector<int64_t>;
  const std::vector<Case> cases{
      {"plain", {2, 3, 7, 6}, {4, 3, 3, 3}, {}, true},
      {"pads_strides",
       {1, 2, 9, 8},
       {3, 2, 3, 2},
       {{"pads", V{1, 0, 2, 1}}, {"strides", V{2, 3}}},
       false},
      {"groups_dilations",
       {2, 4, 8, 8},
       {6, 2, 2, 3},
       {{"group", int64_t{2}}, {"dilations", V{2, 1}}},
       true},
      {"depthwise_same",
       {1, 3, 5, 6},
       {3, 1, 3, 3},
       {{"group", int64_t{3}}, {"auto_pad", std::string("SAME_UPPER")}, {"strides", V{2, 2}}},
       true},
      {"pointwise", {2, 5, 4, 3}, {7, 5, 1, 1}, {}, true},
      // 360 taps go in blocks of 128, 128 and 104, each adding to the last one's sums; 13
      // rows, padded rows that overhang, a bias only in the first block.
      {"many_taps", {2, 40, 9, 11}, {13, 40, 3, 3}, {{"pads", V{1, 1, 1, 1}}}, true},
      // A 7 x 7 map under 360 taps: few column blocks (61 positions), so row blocks go
      // outside and each column block keeps its sums apart across the tap blocks.
      {"many_taps_small_map", {1, 40, 7, 7}, {13, 40, 3, 3}, {{"pads", V{1, 1, 1, 1}}}, true},
      {"many_taps_pointwise_stride",
       {1, 300, 6, 7},
       {10, 300, 1, 1},
       {{"strides", V{2, 2}}},
       false},
      // Pointwise convolutions run on the packed GEMM: 150 positions fill nine 16-column
      // panels and part of a tenth, 11 rows leave a tail of the kernel's row blocks; groups
      // repack per group; 1-D; without a bias the output starts unread.
      {"pointwise_panels", {2, 6, 10, 15}, {11, 6, 1, 1}, {}, true},
      {"pointwise_groups", {2, 6, 9, 9}, {9, 2, 1, 1}, {{"group", int64_t{3}}}, false},
      {"pointwise_one_d", {3, 4, 70}, {5, 4, 1}, {}, true},
      {"one_d",
       {2, 3, 10},
       {4, 3, 3},
       {{"pads", V{1, 2}}, {"strides", V{2}}, {"dilations", V{2}}},
       true},
      // 13 output channels: a full 8-row register block and a 5-row one; 355 positions per
      // plane end in a partial vector; pads make each padded row overhang by 2.
      {"blocks_and_tails", {3, 5, 17, 19}, {13, 5, 3, 3}, {{"pads", V{1, 1, 1, 1}}}, true},
      {"one_d_flat", {2, 3, 40}, {9, 3, 5}, {{"pads", V{2, 2}}, {"dilations", V{3}}}, false},
      // A weight past 1 MB over 5x5 images: blocks of 48 channels outside the images, the
      // last block short; with groups of 55 channels the blocks end inside a group.
      {"channel_blocks_small_images",
       {3, 300, 5, 5},
       {100, 300, 3, 3},
       {{"pads", V{1, 1, 1, 1}}},
       true},
      {"channel_blocks_across_groups",
       {2, 600, 4, 5},
       {110, 300, 3, 3},
       {{"group", int64_t{2}}, {"pads", V{1, 1, 1, 1}}},
       false},
      // Images of 16 positions or fewer run as one GEMM over the batch's positions: 45
      // columns end in a part panel; strides and uneven pads; groups of 3 channels; 1-D with
      // dilation; 4608 taps take one image per chunk, six chunks.
      {"small_images", {5, 40, 3, 3}, {24, 40, 3, 3}, {{"pads", V{1, 1, 1, 1}}}, true},
      {"small_images_strided",
       {3, 16, 5, 7},
       {12, 16, 3, 3},
       {{"strides", V{2, 2}}, {"pads", V{1, 0, 2, 1}}},
       false},
      {"small_images_groups",
       {2, 12, 4, 4},
       {9, 4, 3, 3},
       {{"group", int64_t{3}}, {"pads", V{1, 1, 1, 1}}},
       true},
      {"small_images_one_d", {3, 5, 10}, {4, 5, 3}, {{"dilations", V{2}}}, true},
      {"small_images_chunks", {6, 512, 4, 4}, {8, 512, 3, 3}, {{"pads", V{1, 1, 1, 1}}}, true},
      // A ResNet stem in small: 7x7 over 2x2 stride phases, rows of output split into
      // column units and 16 channels into row blocks of 8.
      {"stem_phases",
       {2, 3, 23, 21},
       {16, 3, 7, 7},
       {{"pads", V{3, 3, 3, 3}}, {"strides", V{2, 2}}},
       true},
      // Three by two phases whose taps land in every phase, with dilations and uneven pads.
      {"stride3_dilated",
       {1, 4, 19, 20},
       {9, 4, 3, 2},
       {{"strides", V{3, 2}}, {"dilations", V{2, 3}}, {"pads", V{2, 1, 0, 3}}},
       true},
      // Depthwise 5x5: strided and dilated, the taps as flat runs over the stride phases.
      {"depthwise_5x5_strided",
       {1, 6, 29, 31},
       {6, 1, 5, 5},
       {{"group", int64_t{6}}, {"pads", V{2, 2, 2, 2}}, {"strides", V{2, 2}}},
       true},
      {"depthwise_5x5_dilated",
       {2, 4, 21, 40},
       {4, 1, 5, 5},
       {{"group", int64_t{4}}, {"pads", V{4, 3, 4, 5}}, {"dilations", V{2, 2}}},
       false},
      // One channel per group, split by rows and by single channels.
      {"depthwise_rows",
       {2, 12, 30, 9},
       {12, 1, 3, 3},
       {{"group", int64_t{12}}, {"pads", V{1, 1, 1, 1}}},
       false},
      // Rows of 67 and 70 split into even and odd columns two vectors at a time, then a tail;
      // an odd leading pad puts the even image columns in the odd phase, an even one not.
      {"depthwise_stride2_wide",
       {1, 9, 11, 67},
       {9, 1, 3, 3},
       {{"group", int64_t{9}}, {"pads", V{1, 1, 1, 1}}, {"strides", V{2, 2}}},
       true},
      {"depthwise_stride2_even_pad",
       {2, 8, 6, 70},
       {8, 1, 3, 3},
       {{"group", int64_t{8}}, {"pads", V{0, 2, 1, 0}}, {"strides", V{1, 2}}},
       false},
      // Small images: the fixed 3x3 and 5x5 kernels run whole 16-float (8-double) vectors
      // only, rounding 73 flat outputs (7 x 7 in rows of 11) up to 4 + 1 vectors and 22
      // (4 x 4 in rows of 6) to 2 (3); the rounded outputs are never kept.
      {"depthwise_5x5_small",
       {1, 10, 7, 7},
       {10, 1, 5, 5},
       {{"group", int64_t{10}}, {"pads", V{2, 2, 2, 2}}},
       true},
      {"depthwise_3x3_tiny",
       {2, 9, 4, 4},
       {9, 1, 3, 3},
       {{"group", int64_t{9}}, {"pads", V{1, 1, 1, 1}}},
       false},
      {"depthwise_3x3_small_stride2",
       {1, 8, 14, 14},
       {8, 1, 3, 3},
       {{"group", int64_t{8}}, {"pads", V{1, 1, 1, 1}}, {"strides", V{2, 2}}},
       true},
      {"strided_wide",
       {1, 3, 9, 40},
       {5, 3, 3, 3},
       {{"pads", V{1, 1, 1, 1}}, {"strides", V{2, 2}}},
       true},
  };
  for (const auto& c : cases) {
    for (DType dt : {DType::kFloat32, DType::kFloat64}) {
      Graph g("conv_" + c.name);
      V xdims = c.x;
      xdims[0] = kDynamic;
      Var x = input(g, "x", dt, xdims);
      Var w = input(g, "w", dt, c.w);
      std::vector<Var> ins{x, w};
      if (c.bias) ins.push_back(input(g, "b", dt, {c.w[0]}));
      g.set_outputs({apply("conv", ins, c.attrs)});
      std::vector<Tensor> one{random_tensor(dt, c.x, rng), random_tensor(dt, c.w, rng)};
      std::vector<Tensor> strided{non_contiguous(random_tensor(dt, c.x, rng)),
                                  non_contiguous(random_tensor(dt, c.w, rng))};
      if (c.bias) {
        one.push_back(random_tensor(dt, {c.w[0]}, rng));
        strided.push_back(non_contiguous(random_tensor(dt, {c.w[0]}, rng)));
      }
      SCOPED_TRACE(c.name);
      // A float32 sum of thousands of taps (the channel blocks' 2700) rounds further.
      const double taps = static_cast<double>(shape_numel(c.w) / c.w[0]);
      check_graph(g, {one, strided}, dt == DType::kFloat32 ? 1e-4 : 1e-10,
                  dt == DType::kFloat32 ? 1e-5 + taps * 5e-8 : 1e-12);
    }
  }
}

// t with +inf at element `first`, -inf a third of the way in, NaN halfway and -0.0 last:
// the values that break convolution kernels (padding must never read them as data).
Tensor with_special_values(Tensor t, int64_t first) {
  const double inf = std::numeric_limits<double>::infinity();
  const int64_t n = t.numel();
  t.store(first, inf);
  t.store(n / 3, -inf);
  t.store(n / 2, std::nan(""));
  t.store(n - 1, -0.0);
  return t;
}

// Convolutions over a constant weight run packed (the pack pass): blocks of 16 output
// channels, the conv_blocks kernel over each part's own positions. The cases end blocks
// early (20 and 33 channels), end position groups early (99 positions, 6 per group under
// AVX2), stride, dilate and pad unevenly, run 1-D, and put NaN, +-inf and -0.0 in the
// image (the padding must stay zero: a tap over it reads nothing).
TEST(Conv, PackedWeightsMatchReferenceAcrossGeometry) {
  std::mt19937 rng(61);
  // The plain layout's kernel: the layout pass would block a lone convolution this heavy.
  const std::optional<std::string> plain = "-layout";
  using V = std::vector<int64_t>;
  // A sum of T products of values in [-1, 1] rounds to about T ulps of its terms.
  auto taps_error = [](const V& w, DType dt) {
    const double taps = static_cast<double>(shape_numel(w) / w[0]);
    return taps * (dt == DType::kFloat32 ? 1e-6 : 1e-14);
  };
  struct Case {
    std::string name;
    V x, w;
    Attrs attrs;
    bool bias;
  };
  const std::vector<Case> cases{
      {"tail_block_and_positions", {2, 8, 9, 11}, {20, 8, 3, 3}, {{"pads", V{1, 1, 1, 1}}}, true},
      {"strided_dilated",
       {1, 16, 13, 10},
       {16, 16, 3, 3},
       {{"strides", V{2, 2}}, {"dilations", V{2, 2}}, {"pads", V{2, 1, 1, 2}}},
       false},
      {"stem",
       {2, 3, 23, 21},
       {16, 3, 7, 7},
       {{"pads", V{3, 3, 3, 3}}, {"strides", V{2, 2}}},
       true},
      {"one_d", {3, 16, 30}, {33, 16, 5}, {{"pads", V{2, 2}}}, true},
      {"blocks_over_a_small_map", {1, 64, 7, 7}, {48, 64, 3, 3}, {{"pads", V{1, 1, 1, 1}}}, true},
      // A strided 1x1 window is gathered, not phase-copied: 24 channels end in a half block,
      // 42 positions in a part group, and 600 channels need several chunks per part.
      {"strided_1x1", {2, 64, 13, 11}, {24, 64, 1, 1}, {{"strides", V{2, 2}}}, true},
      {"strided_1x1_one_d", {2, 64, 31}, {16, 64, 1}, {{"strides", V{3}}}, false},
      {"strided_1x1_chunks", {1, 600, 40, 40}, {16, 600, 1, 1}, {{"strides", V{2, 2}}}, true},
      // Blocks of 48 channels (three packed blocks) outside the images, 112 ending in a half.
      {"channel_blocks", {3, 300, 2, 2}, {112, 300, 3, 3}, {{"pads", V{1, 1, 1, 1}}}, true},
  };
  for (const auto& c : cases) {
    for (DType dt : {DType::kFloat32, DType::kFloat64}) {
      SCOPED_TRACE(c.name + " " + std::string(dtype_name(dt)));
      Graph g("conv_packed_" + c.name);
      V xdims = c.x;
      xdims[0] = kDynamic;
      std::vector<Var> ins{input(g, "x", dt, xdims), constant(g, random_tensor(dt, c.w, rng), "w")};
      if (c.bias) ins.push_back(constant(g, random_tensor(dt, {c.w[0]}, rng), "b"));
      g.set_outputs({apply("conv", ins, c.attrs)});
      const Tensor special = with_special_values(random_tensor(dt, c.x, rng), 0);
      check_graph(
          g,
          {{random_tensor(dt, c.x, rng)}, {special}, {non_contiguous(random_tensor(dt, c.x, rng))}},
          dt == DType::kFloat32 ? 1e-4 : 1e-10, taps_error(c.w, dt), plain);
      CompileOptions options;
      options.passes = plain;
      const std::string source = module_source(compile(g, options));
      EXPECT_NE(source.find("kiln_conv_blocks_"), std::string::npos) << "not packed";
    }
  }
}

// Padding is zero, never data: a depthwise filter whose taps overhang an image border of
// +-inf and NaN must give inf or NaN only where a tap reads them (the reference skips the
// padding). Rows of 40 take the vector path of the stride-2 column split.
TEST(Conv, DepthwisePaddingNeverReadsTheBorderAsData) {
  std::mt19937 rng(53);
  for (int64_t k : {int64_t{3}, int64_t{5}}) {
    for (int64_t stride : {int64_t{1}, int64_t{2}}) {
      Graph g("dw_border");
      Var x = input(g, "x", DType::kFloat32, {1, 3, 12, 40});
      Var w = input(g, "w", DType::kFloat32, {3, 1, k, k});
      g.set_outputs({apply("conv", {x, w},
                           {{"group", int64_t{3}},
                            {"pads", std::vector<int64_t>{k / 2, k / 2, k / 2, k / 2}},
                            {"strides", std::vector<int64_t>{stride, stride}}})});
      Tensor xt = random_tensor(DType::kFloat32, {1, 3, 12, 40}, rng);
      const float inf = std::numeric_limits<float>::infinity();
      for (int64_t c = 0; c < 3; ++c) {
        xt.store((c * 12 + 0) * 40 + 5, c == 1 ? -inf : inf);  // top row
        xt.store((c * 12 + 11) * 40 + 39, inf);                // bottom-right corner
        xt.store((c * 12 + 6) * 40 + 0, std::nan(""));         // left column
      }
      SCOPED_TRACE("k " + std::to_string(k) + " stride " + std::to_string(stride));
      check_graph(g, {{xt, random_tensor(DType::kFloat32, {3, 1, k, k}, rng)}}, 1e-4, 1e-5);
    }
  }
}

// The depthwise kernel sums each channel's taps over flat runs of its phase rows, then copies
// the kept columns to the output rows a vector at a time, a vector running on into the rows
// after it: maps narrower than a vector (7, 5, 3, 1 wide), widths a whole number of vectors
// (16), 5x5, generic (7x1, 2x2) and dilated filters, uneven pads, strides, 1-D, 40 channels
// and 3, with NaN, +-inf and -0.0 in the image. A vector past a part's last row lands in
// another part's channel, which may already be written: a race, so the 3-wide case (one
// channel per part, a vector spanning two rows and more) runs ten times over.
TEST(Conv, DepthwiseMatchesReferenceAcrossGeometry) {
  std::mt19937 rng(67);
  using V = std::vector<int64_t>;
  struct Case {
    std::string name;
    V x, w;
    Attrs attrs;
  };
  const std::vector<Case> cases{
      {"small_map", {2, 40, 7, 7}, {40, 1, 3, 3}, {{"pads", V{1, 1, 1, 1}}}},
      {"whole_vectors", {1, 3, 16, 16}, {3, 1, 3, 3}, {{"pads", V{1, 1, 1, 1}}}},
      {"five_wide_5x5", {2, 3, 9, 5}, {3, 1, 5, 5}, {{"pads", V{2, 2, 2, 2}}}},
      {"one_column", {1, 40, 9, 1}, {40, 1, 3, 3}, {{"pads", V{1, 1, 1, 1}}}},
      {"strided_uneven",
       {2, 3, 20, 13},
       {3, 1, 3, 3},
       {{"strides", V{2, 1}}, {"pads", V{0, 1, 2, 1}}}},
      {"dilated",
       {1, 40, 13, 11},
       {40, 1, 3, 3},
       {{"dilations", V{2, 2}}, {"pads", V{2, 2, 2, 2}}}},
      {"generic_7x1", {1, 3, 15, 9}, {3, 1, 7, 1}, {{"pads", V{3, 0, 3, 0}}}},
      {"generic_2x2_strided", {2, 40, 11, 10}, {40, 1, 2, 2}, {{"strides", V{2, 2}}}},
      {"one_d", {2, 3, 37}, {3, 1, 5}, {{"pads", V{2, 2}}, {"strides", V{2}}}},
      {"three_wide_parts",
       {1, 3, 5, 6},
       {3, 1, 3, 3},
       {{"pads", V{1, 1, 1, 1}}, {"strides", V{2, 2}}}},
  };
  for (const auto& c : cases) {
    for (DType dt : {DType::kFloat32, DType::kFloat64}) {
      SCOPED_TRACE(c.name + " " + std::string(dtype_name(dt)));
      Graph g("conv_dw_" + c.name);
      Attrs attrs = c.attrs;
      attrs["group"] = c.x[1];
      V xdims = c.x;
      xdims[0] = kDynamic;
      Var x = input(g, "x", dt, xdims);
      Var w = input(g, "w", dt, c.w);
      Var b = input(g, "b", dt, {c.w[0]});
      g.set_outputs({apply("conv", {x, w, b}, attrs)});
      const Tensor special = with_special_values(random_tensor(dt, c.x, rng), 1);
      auto args = [&](Tensor xt) {
        return std::vector<Tensor>{std::move(xt), random_tensor(dt, c.w, rng),
                                   random_tensor(dt, {c.w[0]}, rng)};
      };
      std::vector<std::vector<Tensor>> runs{args(random_tensor(dt, c.x, rng)), args(special),
                                            args(non_contiguous(random_tensor(dt, c.x, rng)))};
      while (c.name == "three_wide_parts" && runs.size() < 10) {
        runs.push_back(args(random_tensor(dt, c.x, rng)));
      }
      check_graph(g, runs, dt == DType::kFloat32 ? 1e-4 : 1e-10,
                  dt == DType::kFloat32 ? 1e-5 : 1e-12);
      EXPECT_NE(module_source(compile(g)).find("kiln_depthwise_flat_"), std::string::npos)
          << "not the depthwise kernel";
    }
  }
}

// conv -> per-channel scale and shift -> relu, as a folded batch norm exports: the
// epilogue is fused into the conv thunk, which splits over output planes, and the epilogue
// must take exactly the planes its part computed (split thunks poison every output first).
TEST(Conv, EpilogueFollowsTheSplitOverOutputPlanes) {
  std::mt19937 rng(29);
  for (DType dt : {DType::kFloat32, DType::kFloat64}) {
    Graph g("conv_bn_relu");
    Var x = input(g, "x", dt, {kDynamic, 3, 9, 7});
    Var w = input(g, "w", dt, {10, 3, 3, 3});
    Var scale = input(g, "scale", dt, {10, 1, 1});
    Var shift = input(g, "shift", dt, {10, 1, 1});
    Var y = apply("conv", {x, w}, {{"pads", std::vector<int64_t>{1, 1, 1, 1}}});
    g.set_outputs({relu(add(mul(y, scale), shift))});
    std::vector<Tensor> one{random_tensor(dt, {4, 3, 9, 7}, rng),
                            random_tensor(dt, {10, 3, 3, 3}, rng),
                            random_tensor(dt, {10, 1, 1}, rng), random_tensor(dt, {10, 1, 1}, rng)};
    std::vector<Tensor> strided = one;
    strided[2] = non_contiguous(random_tensor(dt, {10, 1, 1}, rng));
    Function f = compile(g);
    const std::string source = module_source(f);
    EXPECT_NE(source.find("/* epilogue: "), std::string::npos) << "the epilogue was not fused";
    ExecutorStats split = check_graph(g, {one, strided}, dt == DType::kFloat32 ? 1e-4 : 1e-10,
                                      dt == DType::kFloat32 ? 1e-5 : 1e-12);
    EXPECT_GT(split.split_calls, 0) << "the conv thunk was not split";
  }
}

// A strided conv whose parts take tiles of channels by output rows, with a residual operand
// that differs per element and a per-channel one: each part's epilogue must walk exactly its
// tile of every image (a planted off-by-one in the tile split leaves poisoned elements).
TEST(Conv, EpilogueFollowsTheTilesOfAStridedConv) {
  std::mt19937 rng(37);
  for (DType dt : {DType::kFloat32, DType::kFloat64}) {
    Graph g("conv_tiles");
    Var x = input(g, "x", dt, {kDynamic, 5, 40, 33});
    Var w = input(g, "w", dt, {20, 5, 3, 3});
    Var shift = input(g, "shift", dt, {20, 1, 1});
    Var res = input(g, "res", dt, {kDynamic, 20, 20, 17});
    Var y = apply(
        "conv", {x, w},
        {{"pads", std::vector<int64_t>{1, 1, 1, 1}}, {"strides", std::vector<int64_t>{2, 2}}});
    g.set_outputs({relu(add(add(y, shift), res))});
    auto inputs = [&](int64_t n) {
      return std::vector<Tensor>{
          random_tensor(dt, {n, 5, 40, 33}, rng), random_tensor(dt, {20, 5, 3, 3}, rng),
          random_tensor(dt, {20, 1, 1}, rng), random_tensor(dt, {n, 20, 20, 17}, rng)};
    };
    Function f = compile(g);
    const std::string source = module_source(f);
    EXPECT_NE(source.find("/* epilogue: "), std::string::npos) << "the epilogue was not fused";
    EXPECT_NE(source.find("kiln_tile_part"), std::string::npos);
    ExecutorStats split =
        check_graph(g, {inputs(1), inputs(3)}, dt == DType::kFloat32 ? 1e-4 : 1e-10,
                    dt == DType::kFloat32 ? 1e-5 : 1e-12);
    EXPECT_GT(split.split_calls, 0) << "the conv thunk was not split";
  }
}

// A pointwise convolution runs its epilogue itself, on each piece of columns it finishes
// (about 128 KB of output), and a depthwise one on runs of channels: 200 output channels
// over 930 positions make pieces of 128
// columns, so a whole call takes eight and a part two with a ragged last one. Images, a
// grouped weight, a strided input (the unpacked row path), a per-element residual and a
// per-channel operand must all land on exactly the elements of their piece.
TEST(Conv, PointwiseAndDepthwiseEpiloguesRunOnEachPiece) {
  std::mt19937 rng(43);
  for (DType dt : {DType::kFloat32, DType::kFloat64}) {
    Graph g(std::string("pointwise_pieces_") + std::string(dtype_name(dt)));
    Var x = input(g, "x", dt, {kDynamic, 12, 30, 31});
    Var w = input(g, "w", dt, {200, 12, 1, 1});
    Var wg = input(g, "wg", dt, {200, 6, 1, 1});
    Var bias = input(g, "bias", dt, {200});
    Var wd = input(g, "wd", dt, {12, 1, 3, 3});
    Var bd = input(g, "bd", dt, {12});
    Var shift = input(g, "shift", dt, {200, 1, 1});
    Var res = input(g, "res", dt, {kDynamic, 200, 30, 31});
    Var y = apply("conv", {x, w, bias}, {});
    Var yg = apply("conv", {x, wg}, {{"group", int64_t{2}}});
    // Depthwise: runs of whole channels of at least 16 KB, 5 of 12 here (930 positions).
    Var yd = apply("conv", {x, wd, bd},
                   {{"group", int64_t{12}}, {"pads", std::vector<int64_t>{1, 1, 1, 1}}});
    g.set_outputs({clip(add(add(y, shift), res), 0.0, 0.5), relu(sub(yg, shift)),
                   clip(add(yd, x), -0.5, 0.5)});
    auto inputs = [&](int64_t n, bool strided) {
      Tensor xt = random_tensor(dt, {n, 12, 30, 31}, rng);
      return std::vector<Tensor>{
          strided ? non_contiguous(xt) : xt,      random_tensor(dt, {200, 12, 1, 1}, rng),
          random_tensor(dt, {200, 6, 1, 1}, rng), random_tensor(dt, {200}, rng),
          random_tensor(dt, {12, 1, 3, 3}, rng),  random_tensor(dt, {12}, rng),
          random_tensor(dt, {200, 1, 1}, rng),    random_tensor(dt, {n, 200, 30, 31}, rng)};
    };
    Function f = compile(g);
    const std::string source = module_source(f);
    EXPECT_NE(source.find("const int64_t e_r0 = r0, e_r1 = r1;"), std::string::npos)
        << "the epilogue did not run inside the pointwise convolution";
    EXPECT_NE(source.find("e_r1 = oc + 1"), std::string::npos)
        << "the epilogue did not run inside the depthwise convolution";
    ExecutorStats split =
        check_graph(g, {inputs(1, false), inputs(3, false), inputs(2, true)},
                    dt == DType::kFloat32 ? 1e-4 : 1e-10, dt == DType::kFloat32 ? 1e-5 : 1e-12);
    EXPECT_GT(split.split_calls, 0) << "the conv thunk was not split";
  }
}

// The layout pass runs chains of convolutions in the blocked layout NCHW8c
// (ops/conv_nchwc.h). Against the NCHW reference: maps whose rows end inside a vector group
// of the depthwise kernel (13 x 11, 7 x 5), stride 2 with unequal pads (the interior
// columns shift), 5 x 5, 7 x 7 and 9 x 9 windows wider than a 4-column map (no interior at
// all; the 9 x 9 with unequal pads), a 67-row window, direct
// convolutions (3x3, strided, 1x1 strided, 5x3 with unequal pads: runs of 6 positions that
// cross output rows), a channel concatenation, a 3-channel stem read in NCHW, max pools
// (padded; rounding up, whose last window overhangs the map; NaN wins), output
// blocks in a pair and an odd one (24 and 40 channels: 3 and 5 blocks), relu and clip in the
// stores, a residual add and an SE-style per-channel scale on the blocked tensors, a global
// mean, a blocked value that is also a graph output, and NaN, +-inf and -0.0 in the image.
TEST(Conv, BlockedLayoutChainsMatchTheReference) {
  std::mt19937 rng(71);
  // At 18 x 17 every direct convolution's image outweighs its weights, so its parts split
  // the positions only (ConvNchwc::c_split_tiles); the smaller maps split the channels. The
  // 16 -> 24 pointwise layer splits the positions down to 13 x 11 (its image four times its
  // weights and more) and the channels at 7 x 5.
  for (const Shape& hw : {Shape{26, 25}, Shape{18, 17}, Shape{13, 11}, Shape{7, 5}, Shape{4, 4}}) {
    Graph g("nchwc_" + dims_to_string(hw));
    Var x = input(g, "x", DType::kFloat32, {kDynamic, 16, hw[0], hw[1]});
    auto cst = [&](const Shape& s, const std::string& name) {
      return constant(g, random_tensor(DType::kFloat32, s, rng, -0.5, 0.5), name);
    };
    Var e = clip(apply("conv", {x, cst({24, 16, 1, 1}, "we"), cst({24}, "be")}, {}), 0.0, 6.0);
    Var d = relu(apply("conv", {e, cst({24, 1, 3, 3}, "wd"), cst({24}, "bd")},
                       {{"group", int64_t{24}}, {"pads", std::vector<int64_t>{1, 1, 1, 1}}}));
    Var s2 = apply("conv", {d, cst({24, 1, 5, 5}, "ws")},
                   {{"group", int64_t{24}},
                    {"strides", std::vector<int64_t>{2, 2}},
                    {"pads", std::vector<int64_t>{2, 1, 1, 2}}});
    // Large windows at stride 1 (ConvNeXt's 7x7, EdgeNeXt's 9x9), wider than the small maps.
    Var d7 = relu(apply("conv", {d, cst({24, 1, 7, 7}, "w7"), cst({24}, "b7")},
                        {{"group", int64_t{24}}, {"pads", std::vector<int64_t>{3, 3, 3, 3}}}));
    Var d9 = apply("conv", {d, cst({24, 1, 9, 9}, "w9")},
                   {{"group", int64_t{24}}, {"pads", std::vector<int64_t>{4, 2, 3, 4}}});
    // A window taller than 64 rows (the tap-at-a-time path tests each row itself).
    Var tall = apply("conv", {d, cst({24, 1, 67, 1}, "wtall")},
                     {{"group", int64_t{24}}, {"pads", std::vector<int64_t>{33, 0, 33, 0}}});
    Var se = sigmoid(mean(s2, {2, 3}, true));
    Var p = apply("conv", {mul(s2, se), cst({40, 24, 1, 1}, "wp"), cst({40}, "bp")}, {});
    Var back = apply("conv", {d, cst({16, 24, 1, 1}, "wb")}, {});
    // Direct convolutions: 3x3 same, 3x3 stride 2, 1x1 stride 2, 5x3 with unequal pads; and
    // a channel concatenation of blocked values.
    Var r1 = relu(apply("conv", {x, cst({16, 16, 3, 3}, "w3"), cst({16}, "b3")},
                        {{"pads", std::vector<int64_t>{1, 1, 1, 1}}}));
    Var r2 = apply(
        "conv", {r1, cst({32, 16, 3, 3}, "w3s")},
        {{"strides", std::vector<int64_t>{2, 2}}, {"pads", std::vector<int64_t>{1, 1, 1, 1}}});
    Var r3 =
        apply("conv", {x, cst({32, 16, 1, 1}, "w1s")}, {{"strides", std::vector<int64_t>{2, 2}}});
    Var r4 = apply("conv", {r1, cst({8, 16, 5, 3}, "w53")},
                   {{"pads", std::vector<int64_t>{2, 0, 2, 2}}});
    Var cat = concat({r1, r4}, 1);
    // A stem: a 3-channel image read in NCHW, one channel per tap, into blocks.
    Var rgb = input(g, "rgb", DType::kFloat32, {kDynamic, 3, hw[0], hw[1]});
    Var stem = relu(apply(
        "conv", {rgb, cst({16, 3, 3, 3}, "wstem"), cst({16}, "bstem")},
        {{"strides", std::vector<int64_t>{2, 2}}, {"pads", std::vector<int64_t>{1, 1, 1, 1}}}));
    g.set_outputs({p, add(back, x), mean(p, {2, 3}, true), d, relu(add(r2, r3)), d7, d9, tall,
                   apply("conv", {cat, cst({16, 24, 1, 1}, "wc")}, {}),
                   apply("conv", {stem, cst({8, 16, 1, 1}, "wsp")}, {}),
                   // Max pools between blocked convolutions: padded, and rounding up.
                   apply("max_pool", {r1},
                         {{"kernel_shape", std::vector<int64_t>{3, 3}},
                          {"strides", std::vector<int64_t>{2, 2}},
                          {"pads", std::vector<int64_t>{1, 1, 1, 1}}}),
                   apply("max_pool", {d},
                         {{"kernel_shape", std::vector<int64_t>{3, 2}},
                          {"strides", std::vector<int64_t>{2, 2}},
                          {"ceil_mode", int64_t{1}}})});
    auto image = [&](int64_t n) {
      Tensor t = random_tensor(DType::kFloat32, {n, 16, hw[0], hw[1]}, rng);
      const double special[] = {std::nan(""), HUGE_VAL, -HUGE_VAL, -0.0};
      for (int k = 0; k < 4; ++k) t.store(7 + 29 * k, special[k]);
      return t;
    };
    const std::string source = module_source(compile(g));
    EXPECT_NE(source.find("kiln_nchwc_pointwise("), std::string::npos) << "no blocked pointwise";
    EXPECT_NE(source.find("kiln_nchwc_depthwise("), std::string::npos) << "no blocked depthwise";
    EXPECT_NE(source.find("kiln_nchwc_direct("), std::string::npos) << "no blocked direct";
    // The 3x3 layer at stride 1 runs by Winograd's F(2x2, 3x3) on maps of 12 x 12 and more
    // and by F(4x4, 3x3) from 24 x 24 (last tiles partly outside: 17 columns in 2x2 tiles, 26
    // rows and 25 columns in 4x4 ones), its infinities still infinities (not NaN).
    const bool f4 = hw[0] >= 24 && hw[1] >= 24, f2 = !f4 && hw[0] >= 12 && hw[1] >= 12;
    EXPECT_EQ(source.find("kiln_nchwc_winograd(") != std::string::npos, f2)
        << "F(2x2) where it should not be, or not where it should";
    EXPECT_EQ(source.find("kiln_nchwc_winograd4(") != std::string::npos, f4)
        << "F(4x4) where it should not be, or not where it should";
    EXPECT_NE(source.find(", 1, d1, "), std::string::npos) << "the stem was not read in NCHW";
    EXPECT_NE(source.find("kiln_nchwc_max_pool("), std::string::npos) << "no blocked max pool";
    EXPECT_NE(source.find("/* epilogue, in the stores: clip"), std::string::npos);
    auto rgb_image = [&](int64_t n) {
      return random_tensor(DType::kFloat32, {n, 3, hw[0], hw[1]}, rng);
    };
    // F(4x4)'s rounding (its transforms scale by up to 8 and 1/24) reaches 2e-5 on these
    // outputs of scale 1-5, about 4x F(2x2)'s; a wrong transform is off by the output's scale.
    check_graph(g, {{image(1), rgb_image(1)}, {image(3), rgb_image(3)}}, 1e-4, f4 ? 1e-4 : 1e-5);
    // The blocked ops' own perform (what folding and reference runs use) agrees too.
    const std::vector<Tensor> in{image(2), rgb_image(2)};
    const auto want = evaluate_reference(g, in);
    const auto got = evaluate_reference(optimized_graph(g, CompileOptions{}), in);
    ASSERT_EQ(got.size(), want.size());
    for (size_t k = 0; k < got.size(); ++k)
      EXPECT_TRUE(tensors_close(got[k], want[k], 1e-4, 1e-5)) << "output " << k;
  }
}

// A blocked convolution's part runs in pieces of about 128 KB of output, each with its epilogue
// while in L2. At 112 x 112 with 16 channels, in four parts, the pointwise and the direct 3x3
// layer each cut a part into two even pieces (1568 positions; 14 rows), and the Winograd 3x3
// layer (F(4x4)) runs a row of 4x4 tiles per piece, with a residual add and relu after each piece:
// every position is computed and its epilogue run once. KILN_PASSES=-winograd keeps the 3x3
// layer direct.
TEST(Conv, BlockedPiecesCoverEveryPosition) {
  for (const bool winograd : {true, false}) {
    SCOPED_TRACE(winograd ? "winograd" : "direct");
    if (!winograd) setenv("KILN_PASSES", "-winograd", 1);
    std::mt19937 rng(74);
    Graph g(winograd ? "nchwc_pieces" : "nchwc_pieces_direct");
    Var x = input(g, "x", DType::kFloat32, {1, 16, 112, 112});
    auto cst = [&](const Shape& s, const std::string& name) {
      return constant(g, random_tensor(DType::kFloat32, s, rng, -0.5, 0.5), name);
    };
    Var p = relu(add(apply("conv", {x, cst({16, 16, 1, 1}, "wp"), cst({16}, "bp")}, {}), x));
    Var d = relu(add(apply("conv", {p, cst({16, 16, 3, 3}, "wd"), cst({16}, "bd")},
                           {{"pads", std::vector<int64_t>{1, 1, 1, 1}}}),
                     p));
    g.set_outputs({apply("conv", {d, cst({8, 16, 1, 1}, "wo")}, {}), p});
    const std::string source = module_source(compile(g));
    EXPECT_NE(source.find("kiln_nchwc_pointwise("), std::string::npos) << "no blocked pointwise";
    EXPECT_NE(source.find(winograd ? "kiln_nchwc_winograd4(" : "kiln_nchwc_direct("),
              std::string::npos)
        << "no blocked 3x3 of that form";
    Tensor image = random_tensor(DType::kFloat32, {1, 16, 112, 112}, rng);
    image.store(1727 * 8 + 3, std::nan(""));
    check_graph(g, {{image}}, 1e-4, winograd ? 1e-4 : 1e-5);  // F(4x4)'s rounding: see above
    unsetenv("KILN_PASSES");
  }
}

// The blocked ops are in the registry (a JSON model may name them): a wrong shape or prop
// is an error naming the op, what was given and what it must be, not a crash.
TEST(Conv, BlockedOpsRejectBadShapesAndProps) {
  Graph g("nchwc_errors");
  Var x = input(g, "x", DType::kFloat32, {1, 2, 5, 5, 8});
  Var w_bad = input(g, "w", DType::kFloat32, {2, 16, 8});
  const Attrs three{{"group", int64_t{1}},
                    {"kernel_shape", std::vector<int64_t>{3, 3}},
                    {"strides", std::vector<int64_t>{1, 1}},
                    {"pads", std::vector<int64_t>{1, 1, 1, 1}}};
  std::string m = error_of([&] { apply("conv_nchwc", {x, w_bad}, three); });
  EXPECT_NE(m.find("conv_nchwc: weight float32 (2, 16, 8)"), std::string::npos) << m;
  EXPECT_NE(m.find("must be (2, 144, 8)"), std::string::npos) << m;
  Var x4 = input(g, "x4", DType::kFloat32, {1, 16, 5, 5});
  Attrs dw = three;
  dw["group"] = int64_t{16};
  m = error_of([&] {
    apply("conv_nchwc", {x4, input(g, "wd", DType::kFloat32, {2, 3, 3, 8})}, dw);
  });
  EXPECT_NE(m.find("is not (N, C/8, H, W, 8)"), std::string::npos) << m;
  // Winograd's form: a 3x3 window at stride 1, pads 1, and the transformed weight.
  Attrs wino = three;
  wino["winograd"] = int64_t{2};
  m = error_of([&] { apply("conv_nchwc", {x, w_bad}, wino); });
  EXPECT_NE(m.find("is not the Winograd transform (16, M/8, C, 8)"), std::string::npos) << m;
  m = error_of([&] {
    apply("conv_nchwc", {x, input(g, "u", DType::kFloat32, {16, 3, 8, 8})}, wino);
  });
  EXPECT_NE(m.find("must be (16, 3, 16, 8)"), std::string::npos) << m;
  // F(4x4) takes 36 transformed elements: F(2x2)'s 16 are the wrong weight for it.
  Attrs wino4 = wino;
  wino4["winograd"] = int64_t{4};
  m = error_of([&] {
    apply("conv_nchwc", {x, input(g, "u2", DType::kFloat32, {16, 3, 16, 8})}, wino4);
  });
  EXPECT_NE(m.find("must be (36, 3, 16, 8)"), std::string::npos) << m;
  for (const int64_t tile : {int64_t{1}, int64_t{3}, int64_t{-2}}) {
    Attrs odd = wino;
    odd["winograd"] = tile;
    m = error_of([&] { apply("conv_nchwc", {x, w_bad}, odd); });
    EXPECT_NE(m.find("winograd"), std::string::npos) << m;
    EXPECT_NE(m.find("2 or 4 (0: direct), got " + std::to_string(tile)), std::string::npos) << m;
  }
  wino["strides"] = std::vector<int64_t>{2, 2};
  m = error_of([&] { apply("conv_nchwc", {x, w_bad}, wino); });
  EXPECT_NE(m.find("winograd"), std::string::npos) << m;
  EXPECT_NE(m.find("stride 1"), std::string::npos) << m;
  Attrs wide = three;
  wide["kernel_shape"] = std::vector<int64_t>{65, 3};
  m = error_of([&] { apply("conv_nchwc", {x, w_bad}, wide); });
  EXPECT_NE(m.find("kernel_shape"), std::string::npos) << m;
  m = error_of([&] {
    apply("max_pool_nchwc", {x4},
          {{"kernel_shape", std::vector<int64_t>{2, 2}},
           {"strides", std::vector<int64_t>{2, 2}},
           {"pads", std::vector<int64_t>{0, 0, 0, 0}}});
  });
  EXPECT_NE(m.find("max_pool_nchwc: input float32 (1, 16, 5, 5)"), std::string::npos) << m;
  m = error_of([&] {
    apply("max_pool_nchwc", {x},
          {{"kernel_shape", std::vector<int64_t>{9, 2}},
           {"strides", std::vector<int64_t>{1, 1}},
           {"pads", std::vector<int64_t>{0, 0, 0, 0}}});
  });
  EXPECT_NE(m.find("window does not fit"), std::string::npos) << m;
}

// A relu or clip after a pointwise or packed convolution, or a packed Gemm, is applied by the
// kernel as it stores (with the bias added there too): no pass of its own. NaN and +-inf in
// the image must come out as the scalar relu and clip give them (a NaN stays NaN), the clip's
// bounds are inputs read at run time (two bound pairs), and the
// clamp must come after the last block of a deep sum (300 deep in the GEMM, 2700 taps in the
// tile kernel), not on a partial one.
TEST(Conv, ReluAndClipClampInTheKernelStores) {
  std::mt19937 rng(89);
  for (DType dt : {DType::kFloat32, DType::kFloat64}) {
    Graph g(std::string("store_clamp_") + std::string(dtype_name(dt)));
    Var x = input(g, "x", dt, {kDynamic, 300, 9, 7});
    Var lo = input(g, "lo", dt, {1});
    Var hi = input(g, "hi", dt, {});
    Var a = input(g, "a", dt, {5, 40});
    Var cm = input(g, "cm", dt, {5, 24});
    Var w1 = input(g, "w1", dt, {24, 300, 1, 1});
    Var b1 = input(g, "b1", dt, {24});
    Var x3 = input(g, "x3", dt, {kDynamic, 3, 30, 17});
    Var wt = input(g, "wt", dt, {10, 300, 3, 3});
    Var wp = constant(g, random_tensor(dt, {20, 300, 3, 3}, rng), "wp");
    Var bp = constant(g, random_tensor(dt, {20}, rng), "bp");
    Var ws = constant(g, random_tensor(dt, {33, 300, 1, 1}, rng), "ws");
    Var wg = constant(g, random_tensor(dt, {40, 24}, rng), "wg");
    Var bg = constant(g, random_tensor(dt, {24}, rng), "bg");
    Var wt3 = constant(g, random_tensor(dt, {32, 3, 3, 3}, rng), "wt3");
    Var bt3 = constant(g, random_tensor(dt, {32}, rng), "bt3");
    const Attrs stride2{{"strides", std::vector<int64_t>{2, 2}}};
    g.set_outputs({relu(apply("conv", {x, w1, b1})),      // pointwise
                   clip(apply("conv", {x, w1}), lo, hi),  // no bias
                   relu(apply("conv", {x, wp, bp}, {{"pads", std::vector<int64_t>{1, 0, 1, 2}}})),
                   clip(apply("conv", {x, ws}, stride2), lo, hi),  // packed 1x1 /2
                   relu(gemm(a, wg, bg)),                          // bias per column
                   clip(gemm(a, wg, cm, 1.0, 1.0), lo, hi),        // C per element
                   // The tile kernel: 2700 taps in blocks of 128, and 27 taps with overhang.
                   relu(apply("conv", {x, wt}, {{"pads", std::vector<int64_t>{1, 1, 1, 1}}})),
                   clip(apply("conv", {x3, wt3, bt3},
                              {{"pads", std::vector<int64_t>{1, 1, 1, 1}},
                               {"strides", std::vector<int64_t>{2, 2}}}),
                        lo, hi)});
    auto inputs = [&](int64_t n, double l, double h) {
      Tensor xt = random_tensor(dt, {n, 300, 9, 7}, rng);
      Tensor at = random_tensor(dt, {5, 40}, rng);
      return std::vector<Tensor>{with_special_values(xt, 0),
                                 Tensor::from_doubles(dt, {1}, {l}),
                                 Tensor::from_doubles(dt, {}, {h}),
                                 with_special_values(at, 1),
                                 random_tensor(dt, {5, 24}, rng),
                                 random_tensor(dt, {24, 300, 1, 1}, rng),
                                 random_tensor(dt, {24}, rng),
                                 with_special_values(random_tensor(dt, {n, 3, 30, 17}, rng), 2),
                                 random_tensor(dt, {10, 300, 3, 3}, rng)};
    };
    const std::string source = module_source(compile(g));
    EXPECT_EQ(source.find("/* epilogue: "), std::string::npos) << "a clamp ran as its own pass";
    size_t in_stores = 0;
    for (size_t at = source.find("/* epilogue, in the stores: "); at != std::string::npos;
         at = source.find("/* epilogue, in the stores: ", at + 1)) {
      ++in_stores;
    }
    EXPECT_EQ(in_stores, 8u);
    EXPECT_NE(source.find("kiln_conv_tile_"), std::string::npos) << "no tile-kernel case";
    check_graph(g, {inputs(1, -0.5, 0.25), inputs(3, 0.0, 1.0)},
                dt == DType::kFloat32 ? 1e-4 : 1e-10, dt == DType::kFloat32 ? 2e-4 : 1e-12);
  }
}

// A packed convolution's epilogue follows its split: parts take whole blocks of 16 output
// channels (40 channels: blocks of 16, 16 and 8) by whole output rows, and a per-channel
// shift, a per-element residual and a second output's activation must land on exactly the
// part's tile, over images and parts (split thunks poison every output first). 12 input
// channels (not whole blocks of 8) keep the pair out of the blocked layout.
TEST(Conv, PackedConvolutionEpilogueFollowsTheSplit) {
  std::mt19937 rng(73);
  for (DType dt : {DType::kFloat32, DType::kFloat64}) {
    Graph g(std::string("packed_epilogue_") + std::string(dtype_name(dt)));
    Var x = input(g, "x", dt, {kDynamic, 12, 13, 11});
    Var w = constant(g, random_tensor(dt, {40, 12, 3, 3}, rng), "w");
    Var bias = constant(g, random_tensor(dt, {40}, rng), "bias");
    Var shift = input(g, "shift", dt, {40, 1, 1});
    Var res = input(g, "res", dt, {kDynamic, 40, 7, 6});
    const Attrs strided{{"pads", std::vector<int64_t>{1, 1, 1, 1}},
                        {"strides", std::vector<int64_t>{2, 2}}};
    Var y = apply("conv", {x, w, bias}, strided);
    g.set_outputs({clip(add(add(y, shift), res), 0.0, 0.5),
                   relu(apply("conv", {x, w}, {{"pads", std::vector<int64_t>{1, 1, 1, 1}}}))});
    auto inputs = [&](int64_t n, bool strided_x) {
      Tensor xt = random_tensor(dt, {n, 12, 13, 11}, rng);
      return std::vector<Tensor>{strided_x ? non_contiguous(xt) : xt,
                                 random_tensor(dt, {40, 1, 1}, rng),
                                 random_tensor(dt, {n, 40, 7, 6}, rng)};
    };
    const std::string source = module_source(compile(g));
    EXPECT_NE(source.find("kiln_conv_blocks_"), std::string::npos) << "not packed";
    ExecutorStats split =
        check_graph(g, {inputs(1, false), inputs(3, false), inputs(2, true)},
                    dt == DType::kFloat32 ? 1e-4 : 1e-10, dt == DType::kFloat32 ? 1e-4 : 1e-12);
    EXPECT_GT(split.split_calls, 0) << "the conv thunk was not split";
  }
}

// A MatMul of activations (..., M, K) by a constant weight is packed into one GEMM over all
// rows of the activations (a transformer's projections), with leading dimensions kept in the
// output, an epilogue run on pieces of panels (each part's tile in several once there are
// many rows), a transposed (non-collapsible) A copied first, and a 10-wide weight left to
// OpenBLAS.
TEST(MatMul, ActivationsByAWeightRunAsOnePackedGemm) {
  std::mt19937 rng(47);
  for (DType dt : {DType::kFloat32, DType::kFloat64}) {
    Graph g(std::string("matmul_packed_") + std::string(dtype_name(dt)));
    Var a = input(g, "a", dt, {kDynamic, 7, 40});
    Var at = input(g, "at", dt, {3, 40, kDynamic});
    Var w = constant(g, random_tensor(dt, {40, 130}, rng), "w");
    Var narrow = constant(g, random_tensor(dt, {40, 10}, rng), "narrow");
    Var bias = constant(g, random_tensor(dt, {130}, rng), "bias");
    g.set_outputs(
        {tanh(add(matmul(a, w), bias)), matmul(transpose(at, {0, 2, 1}), w), matmul(a, narrow)});
    Function f = compile(g);
    const std::string source = module_source(f);
    // The bias goes into the kernel (the gemm's C); tanh stays an epilogue.
    EXPECT_NE(source.find("base=\"gemm\", base.beta=1.0, base.packed_n=130, base.transB=0, "
                          "base_inputs=3, program=\"tanh($0)\""),
              std::string::npos)
        << source;
    EXPECT_NE(source.find("gemm{packed_n=130"), std::string::npos) << "the transposed A";
    EXPECT_NE(source.find("matmul(a, narrow)"), std::string::npos) << "10 wide stays a matmul";
    auto inputs = [&](int64_t b, int64_t m) {
      return std::vector<Tensor>{random_tensor(dt, {b, 7, 40}, rng),
                                 random_tensor(dt, {3, 40, m}, rng)};
    };
    const double rtol = dt == DType::kFloat32 ? 1e-4 : 1e-10,
                 atol = dt == DType::kFloat32 ? 1e-4 : 1e-11;
    // The epilogue runs inside the packed GEMM, on pieces of the tile: 280 rows make one
    // piece per part; 2800 rows make row chunks of 510 (the last shorter) and pieces of four
    // panels (two, then the 2-column tail of 130).
    EXPECT_NE(source.find("for (int64_t e_r0 = lo; e_r0 < hi; e_r0 += chunk)"), std::string::npos)
        << "the epilogue did not run inside the packed GEMM";
    ExecutorStats split = check_graph(
        g, {inputs(2, 5), inputs(1, 1), inputs(0, 3), inputs(40, 2), inputs(400, 3)}, rtol, atol);
    EXPECT_GT(split.split_calls, 0);
  }
}

// A (C, 1, 1) operand against an (N, C, H, W) output is constant along each row of the
// loop: it is loaded once per row and the row runs unit-stride; results must not change,
// including when the output's last dimension is 1 (no such row) or the operand is strided.
TEST(Elementwise, PerChannelOperandsAgainstImageRows) {
  std::mt19937 rng(31);
  for (DType dt : {DType::kFloat32, DType::kFloat64}) {
    for (int64_t last : {int64_t{6}, int64_t{1}}) {
      Graph g("per_channel");
      Var x = input(g, "x", dt, {kDynamic, 4, 5, last});
      Var s = input(g, "s", dt, {4, 1, 1});
      Var b = input(g, "b", dt, {4, 5, 1});
      g.set_outputs({add(mul(x, s), b), sub(x, s)});
      std::vector<Tensor> plain{random_tensor(dt, {3, 4, 5, last}, rng),
                                random_tensor(dt, {4, 1, 1}, rng),
                                random_tensor(dt, {4, 5, 1}, rng)};
      std::vector<Tensor> strided{non_contiguous(random_tensor(dt, {3, 4, 5, last}, rng)),
                                  non_contiguous(random_tensor(dt, {4, 1, 1}, rng)),
                                  non_contiguous(random_tensor(dt, {4, 5, 1}, rng))};
      SCOPED_TRACE("last dimension " + std::to_string(last));
      check_graph(g, {plain, strided}, 1e-6, 1e-7);
    }
  }
}

// Rows of 8 in a 5-D output (the blocked layout's channel blocks) run a whole stretch of
// rows of one block per loop: per-block operands (1, C/8, 1, 1, 8), per-position ones
// (N, 1, H, W, 1), same-shape ones, a stretch cut by a part's end in the middle of a block
// (parts split the flat range), a row-invariant operand, strided inputs and NaN.
TEST(Elementwise, BlockedRowsOfEightMatchTheReference) {
  std::mt19937 rng(33);
  for (DType dt : {DType::kFloat32, DType::kFloat64}) {
    Graph g(std::string("blocked_rows_") + std::string(dtype_name(dt)));
    Var x = input(g, "x", dt, {kDynamic, 3, 5, 7, 8});
    Var s = input(g, "s", dt, {1, 3, 1, 1, 8});
    Var p = input(g, "p", dt, {kDynamic, 1, 5, 7, 1});
    Var y = input(g, "y", dt, {kDynamic, 3, 5, 7, 8});
    g.set_outputs({mul(x, s), add(mul(x, sigmoid(s)), y), sub(x, p), mul(add(x, s), p)});
    Tensor xs = random_tensor(dt, {2, 3, 5, 7, 8}, rng, -4, 4);
    xs.store(((1 * 3 + 2) * 5 + 4) * 56 + 5 * 8 + 3, NAN);
    const std::vector<Tensor> plain{xs, random_tensor(dt, {1, 3, 1, 1, 8}, rng),
                                    random_tensor(dt, {2, 1, 5, 7, 1}, rng),
                                    random_tensor(dt, {2, 3, 5, 7, 8}, rng)};
    const std::vector<Tensor> strided{non_contiguous(random_tensor(dt, {1, 3, 5, 7, 8}, rng)),
                                      non_contiguous(random_tensor(dt, {1, 3, 1, 1, 8}, rng)),
                                      random_tensor(dt, {1, 1, 5, 7, 1}, rng),
                                      non_contiguous(random_tensor(dt, {1, 3, 5, 7, 8}, rng))};
    const bool f32 = dt == DType::kFloat32;
    ExecutorStats split = check_graph(g, {plain, strided}, f32 ? 1e-5 : 1e-12, f32 ? 1e-6 : 1e-13);
    EXPECT_GT(split.split_calls, 0) << "no product was split into parts";
  }
}

// Transposed convolutions, lowered (a GEMM over X channels-last, then conv_transpose_fold) and
// direct (`-lower`), against perform, whole and split into parts, on contiguous and strided
// inputs: 1-D to 3-D, groups, dilations, output_padding, negative pads (outputs no tap
// reaches), a dynamic batch, 33 channels and 37 columns (tails past the vector width), and
// NaN, +-inf and -0.0 in X. The numpy cases (tests/reference) check the lowered form
// independently.
TEST(ConvTranspose, LoweredAndDirectCodeMatchPerform) {
  std::mt19937 rng(31);
  using V = std::vector<int64_t>;
  struct Case {
    std::string name;
    V x, w;
    Attrs attrs;
    bool bias;
  };
  const std::vector<Case> cases{
      {"gan_4x4_s2",
       {2, 5, 6, 7},
       {5, 4, 4, 4},
       {{"strides", V{2, 2}}, {"pads", V{1, 1, 1, 1}}},
       true},
      {"unet_2x2_s2", {1, 16, 5, 6}, {16, 8, 2, 2}, {{"strides", V{2, 2}}}, false},
      {"outpad_dilated",
       {1, 3, 5, 4},
       {3, 2, 3, 2},
       {{"strides", V{2, 3}},
        {"dilations", V{1, 2}},
        {"pads", V{1, 0, 0, 2}},
        {"output_padding", V{1, 2}}},
       true},
      {"groups", {2, 6, 4, 5}, {6, 3, 3, 3}, {{"group", int64_t{2}}, {"strides", V{1, 2}}}, true},
      {"negative_pads",
       {1, 2, 3, 3},
       {2, 3, 3, 3},
       {{"strides", V{3, 2}}, {"pads", V{-1, 2, -2, 0}}},
       true},
      {"tails", {1, 4, 3, 37}, {4, 33, 3, 3}, {{"pads", V{1, 1, 1, 1}}}, true},
      {"one_d", {2, 3, 9}, {3, 5, 4}, {{"strides", V{3}}, {"pads", V{1, 2}}}, true},
      {"three_d",
       {1, 2, 3, 4, 3},
       {2, 3, 2, 3, 2},
       {{"strides", V{2, 1, 2}}, {"pads", V{0, 1, 0, 1, 0, 0}}},
       true},
  };
  for (const auto& c : cases) {
    for (DType dt : {DType::kFloat32, DType::kFloat64}) {
      Graph g("conv_transpose_" + c.name);
      V xdims = c.x;
      xdims[0] = kDynamic;
      Var x = input(g, "x", dt, xdims);
      Var w = input(g, "w", dt, c.w);
      const int64_t m = c.w[1] * attr_int(c.attrs, "group", 1);
      std::vector<Var> ins{x, w};
      if (c.bias) ins.push_back(input(g, "b", dt, {m}));
      g.set_outputs({apply("conv_transpose", ins, c.attrs)});
      Tensor xv = random_tensor(dt, c.x, rng);
      if (c.name == "gan_4x4_s2") xv = with_special_values(xv, 3);
      std::vector<Tensor> one{xv, random_tensor(dt, c.w, rng)};
      std::vector<Tensor> strided{non_contiguous(random_tensor(dt, c.x, rng)),
                                  non_contiguous(random_tensor(dt, c.w, rng))};
      if (c.bias) {
        one.push_back(random_tensor(dt, {m}, rng));
        strided.push_back(non_contiguous(random_tensor(dt, {m}, rng)));
      }
      SCOPED_TRACE(c.name + " " + std::string(dtype_name(dt)));
      const double rtol = dt == DType::kFloat32 ? 1e-4 : 1e-10;
      const double atol = dt == DType::kFloat32 ? 1e-5 : 1e-12;
      check_graph(g, {one, strided}, rtol, atol);
      check_graph(g, {one, strided}, rtol, atol, std::string("-lower"));
    }
  }
}

// GridSample's generated code against perform (the same sampling rule; the ONNX conformance
// cases check the rule against ONNX's reference): every mode and padding, both corner
// conventions, grids reaching past the image on all sides, strided inputs, split by rows,
// and NaN and +-inf in the grid (NaN gives NaN; an infinite coordinate lies far outside).
TEST(GridSample, EveryModeAndPaddingMatchesPerformAndNanGivesNan) {
  std::mt19937 rng(5);
  for (const char* mode : {"bilinear", "nearest", "bicubic"}) {
    for (const char* pad : {"zeros", "border", "reflection"}) {
      for (int64_t align : {0, 1}) {
        Graph g(std::string("grid_sample_") + mode + "_" + pad);
        Var x = input(g, "x", DType::kFloat32, {kDynamic, 3, 5, 7});
        Var grid = input(g, "grid", DType::kFloat32, {kDynamic, 4, 9, 2});
        g.set_outputs({apply("grid_sample", {x, grid},
                             {{"mode", std::string(mode)},
                              {"padding_mode", std::string(pad)},
                              {"align_corners", align}})});
        Tensor gv = random_tensor(DType::kFloat32, {2, 4, 9, 2}, rng, -1.6, 1.6);
        gv.store(3, std::nan(""));
        gv.store(10, std::numeric_limits<double>::infinity());
        gv.store(21, -std::numeric_limits<double>::infinity());
        std::vector<Tensor> one{random_tensor(DType::kFloat32, {2, 3, 5, 7}, rng), gv};
        std::vector<Tensor> strided{
            non_contiguous(random_tensor(DType::kFloat32, {2, 3, 5, 7}, rng)), non_contiguous(gv)};
        SCOPED_TRACE(std::string(mode) + " " + pad + " align " + std::to_string(align));
        check_graph(g, {one, strided}, 1e-5, 1e-6);
        Function f = compile(g);
        const Tensor y = f(one).at(0);
        // Position 1 of image 0 read grid element 3 (its y): NaN in every channel.
        for (int64_t c = 0; c < 3; ++c) EXPECT_TRUE(std::isnan(y.load(c * 36 + 1)));
      }
    }
  }
  Graph bad("grid_sample_bad");
  Var x = input(bad, "x", DType::kFloat32, {1, 3, 5, 7});
  EXPECT_TRUE(
      testing::has(testing::error_of([&] {
                     apply("grid_sample", {x, input(bad, "g", DType::kFloat32, {1, 4, 4, 3})});
                   }),
                   "must be float32 (N, H_out, W_out, 2)"));
  EXPECT_TRUE(testing::has(testing::error_of([&] {
                             apply("grid_sample",
                                   {x, input(bad, "g2", DType::kFloat32, {1, 4, 4, 2})},
                                   {{"mode", std::string("area")}});
                           }),
                           "'area' is not bilinear, nearest or bicubic"));
}

// RoiAlign's generated code against perform (the same box and sample rules; ONNX's
// conformance cases check them against ONNX's reference): avg and max, both coordinate
// modes, adaptive and fixed sampling, boxes reaching past the image and wholly outside it,
// inverted boxes, several images, strided inputs, split by boxes. Bad boxes fail the call
// naming the box; a huge box fails rather than running for ever.
TEST(RoiAlign, ModesAndBoxesPastTheImageMatchPerformAndBadBoxesFail) {
  std::mt19937 rng(9);
  const std::vector<double> boxes{0,  0, 6,  5,  1.5, 2.25, 4.5, 4.75, -3, -2, 2,   1,   5,   4,
                                  11, 9, 20, 20, 30,  30,   4,   3,    1,  1,  0.2, 0.3, 0.9, 0.6};
  const Tensor rois = Tensor::from_doubles(DType::kFloat32, {7, 4}, boxes);
  const Tensor batch =
      Tensor::from_doubles(DType::kInt64, {7}, std::vector<double>{0, 1, 1, 0, 1, 0, 1});
  for (const char* mode : {"avg", "max"}) {
    for (int64_t half : {0, 1}) {
      for (int64_t ratio : {0, 2}) {
        Graph g(std::string("roi_align_") + mode);
        Var x = input(g, "x", DType::kFloat32, {2, 3, 6, 7});
        Var r = input(g, "rois", DType::kFloat32, {kDynamic, 4});
        Var b = input(g, "batch", DType::kInt64, {kDynamic});
        g.set_outputs({apply("roi_align", {x, r, b},
                             {{"mode", std::string(mode)},
                              {"output_height", int64_t{3}},
                              {"output_width", int64_t{2}},
                              {"sampling_ratio", ratio},
                              {"spatial_scale", 0.75},
                              {"half_pixel", half}})});
        SCOPED_TRACE(std::string(mode) + " half " + std::to_string(half) + " ratio " +
                     std::to_string(ratio));
        check_graph(g,
                    {{random_tensor(DType::kFloat32, {2, 3, 6, 7}, rng), rois, batch},
                     {non_contiguous(random_tensor(DType::kFloat32, {2, 3, 6, 7}, rng)),
                      non_contiguous(rois), batch}},
                    1e-5, 1e-6);
      }
    }
  }
  Graph g("roi_align_bad");
  Var x = input(g, "x", DType::kFloat32, {2, 3, 6, 7});
  Var r = input(g, "rois", DType::kFloat32, {1, 4});
  Var b = input(g, "batch", DType::kInt64, {1});
  g.set_outputs({apply("roi_align", {x, r, b}, {{"output_height", int64_t{2}}})});
  Function f = compile(g);
  const Tensor xv = random_tensor(DType::kFloat32, {2, 3, 6, 7}, rng);
  auto run_with = [&](std::vector<double> box, double bi) {
    return testing::error_of([&] {
      f({xv, Tensor::from_doubles(DType::kFloat32, {1, 4}, box),
         Tensor::from_doubles(DType::kInt64, {1}, {bi})});
    });
  };
  EXPECT_TRUE(testing::has(run_with({0, 0, 2, 2}, 2), "box 0 has batch index 2, outside [0, 2)"));
  EXPECT_TRUE(
      testing::has(run_with({0, std::nan(""), 2, 2}, 0), "box 0 has a NaN or infinite coordinate"));
  EXPECT_TRUE(testing::has(run_with({0, 0, 1e12, 1e12}, 0), "samples per bin"));
  EXPECT_TRUE(testing::has(testing::error_of([&] {
                             apply("roi_align", {x, input(g, "r2", DType::kFloat32, {3, 5}), b});
                           }),
                           "must be (R, 4)"));
}

TEST(MaxUnpool, AnIndexOutsideThePooledGridFailsNamingTheElement) {
  Graph g("max_unpool_bad");
  Var x = input(g, "x", DType::kFloat32, {1, 2, 2, 2});
  Var i = input(g, "i", DType::kInt64, {1, 2, 2, 2});
  g.set_outputs(
      {apply("max_unpool", {x, i},
             {{"output", std::vector<int64_t>{5, 5}}, {"grid", std::vector<int64_t>{4, 4}}})});
  Function f = compile(g);
  std::mt19937 rng(3);
  const Tensor xv = random_tensor(DType::kFloat32, {1, 2, 2, 2}, rng);
  const Tensor ok =
      Tensor::from_doubles(DType::kInt64, {1, 2, 2, 2}, {5, 7, 13, 15, 16, 18, 28, 31});
  // Plane 1's indices (16..31) land in its own 5 x 5 plane, at the grid's (row, column).
  const Tensor y = f({xv, ok}).at(0);
  EXPECT_EQ(y.load(25 + 0), xv.load(4));          // index 16: plane 1, (0, 0)
  EXPECT_EQ(y.load(25 + 3 * 5 + 3), xv.load(7));  // index 31: plane 1, (3, 3)
  const Tensor bad =
      Tensor::from_doubles(DType::kInt64, {1, 2, 2, 2}, {5, 7, 13, 15, 16, 18, 28, 32});
  EXPECT_TRUE(testing::has(testing::error_of([&] {
                             f({xv, bad});
                           }),
                           "index 32 of element 7 is outside the pooled grid's 32 elements"));
}

TEST(Pad, ModesThatReadTheDataRejectCropsAndEmptyDimensions) {
  Graph g("pad_bad");
  Var x = input(g, "x", DType::kFloat32, {2, 0, 4});
  using V = std::vector<int64_t>;
  EXPECT_TRUE(testing::has(
      testing::error_of([&] {
        apply("pad", {x}, {{"pads", V{0, 1, 0, 0, 0, 0}}, {"mode", std::string("reflect")}});
      }),
      "dimension 1 is empty, and a non-constant mode pads from its values"));
  Var y = input(g, "y", DType::kFloat32, {2, 3, 4});
  EXPECT_TRUE(testing::has(
      testing::error_of([&] {
        apply("pad", {y}, {{"pads", V{0, 0, -1, 0, 0, 2}}, {"mode", std::string("edge")}});
      }),
      "a negative pad (a crop) takes the constant mode"));
  EXPECT_TRUE(testing::has(
      testing::error_of([&] {
        apply("pad", {y}, {{"pads", V{0, 0, 1, 0, 0, 2}}, {"mode", std::string("mirror")}});
      }),
      "'mirror' is not constant, reflect, edge or wrap"));
}

TEST(ConvTranspose, BadWeightsBiasAndPadsAreClearErrors) {
  Graph g("conv_transpose_bad");
  Var x = input(g, "x", DType::kFloat32, {1, 4, 5, 5});
  auto err = [&](const std::vector<Var>& ins, Attrs a) {
    return testing::error_of([&] { apply("conv_transpose", ins, std::move(a)); });
  };
  // W's first dimension is X's channels (ConvTranspose's layout, unlike Conv's).
  EXPECT_TRUE(testing::has(err({x, input(g, "w", DType::kFloat32, {3, 2, 3, 3})}, {}),
                           "weight dim 0 must be the input's channels"));
  EXPECT_TRUE(testing::has(
      err({x, input(g, "w2", DType::kFloat32, {4, 2, 3, 3}), input(g, "b", DType::kFloat32, {3})},
          {}),
      "must be float32 (2)"));
  EXPECT_TRUE(testing::has(err({x, input(g, "w3", DType::kFloat32, {4, 2, 3, 3})},
                               {{"pads", std::vector<int64_t>{5, 5, 5, 5}}}),
                           "the pads crop more than the windows reach"));
  EXPECT_TRUE(testing::has(err({x, input(g, "w4", DType::kFloat32, {4, 2, 3, 3})},
                               {{"strides", std::vector<int64_t>{2}}}),
                           "strides has 1 entries, expected 2"));
  EXPECT_TRUE(
      testing::has(err({x, input(g, "w5", DType::kFloat32, {4, 2, 3, 3})}, {{"group", int64_t{3}}}),
                   "with group 3"));
}

TEST(Conv, RejectsMismatchedWeightsAndUnsupportedRanks) {
  Graph g("conv_bad");
  Var x = input(g, "x", DType::kFloat32, {1, 4, 5, 5});
  EXPECT_NE(testing::error_of([&] {
              apply("conv", {x, input(g, "w", DType::kFloat32, {2, 3, 3, 3})});
            }).find("do not fit group 1"),
            std::string::npos);
  EXPECT_THROW(apply("conv", {x, input(g, "w2", DType::kFloat32, {2, 4, 7, 7})}),
               UserError);  // window too big
  Var x3 = input(g, "x3", DType::kFloat32, {1, 4, 5, 5, 5});
  EXPECT_THROW(apply("conv", {x3, input(g, "w3", DType::kFloat32, {2, 4, 3, 3, 3})}),
               UnsupportedError);
  // An image group past 2^31 elements cannot be addressed by the tile kernel's 32-bit tap
  // offsets: compiling says so, naming its size, before anything is allocated.
  Graph big("conv_big");
  Var xb = input(big, "x", DType::kFloat32, {kDynamic, 1, 50000, 50000});
  big.set_outputs({apply("conv", {xb, input(big, "w", DType::kFloat32, {1, 1, 1, 1})})});
  const std::string err = testing::error_of([&] { compile(big); });
  EXPECT_NE(err.find("conv: an image group of 2500000000 elements"), std::string::npos) << err;
}

// Scratch memory a kernel cannot get fails the call, naming what it was for and its size:
// KILN_WORKSPACE_LIMIT caps one call's workspace, so the path every kernel's requests share
// (KILN_WORKSPACE) is reached on purpose. Within the limit the same graph runs.
TEST(Workspace, ARequestBeyondTheLimitFailsNamingItsPurposeAndSize) {
  Graph g("conv_ws");
  Var x = input(g, "x", DType::kFloat32, {1, 3, 9, 9});
  Var w = input(g, "w", DType::kFloat32, {4, 3, 3, 3});
  g.set_outputs({apply("conv", {x, w}, {{"pads", std::vector<int64_t>{1, 1, 1, 1}}})});
  std::mt19937 rng(7);
  const std::vector<Tensor> in{random_tensor(DType::kFloat32, {1, 3, 9, 9}, rng),
                               random_tensor(DType::kFloat32, {4, 3, 3, 3}, rng)};
  ::setenv("KILN_WORKSPACE_LIMIT", "16", 1);
  const std::string err = testing::error_of([&] { compile(g)(in); });
  ::setenv("KILN_WORKSPACE_LIMIT", "64M", 1);
  const auto out = compile(g)(in);
  ::setenv("KILN_WORKSPACE_LIMIT", "lots", 1);
  const std::string bad = testing::error_of([&] { compile(g)(in); });
  ::unsetenv("KILN_WORKSPACE_LIMIT");
  EXPECT_NE(err.find("out of memory for conv"), std::string::npos) << err;
  EXPECT_NE(err.find(" bytes)"), std::string::npos) << err;
  EXPECT_NE(err.find("node 0 (conv): "), std::string::npos) << err;
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].shape(), (Shape{1, 4, 9, 9}));
  EXPECT_NE(bad.find("KILN_WORKSPACE_LIMIT"), std::string::npos) << bad;
}

// Max pooling reads its stride phases through the same 32-bit tap offsets: a plane past 2^31
// padded elements is refused when compiling, naming its size.
TEST(Pool, MaxPoolPlaneTooLargeForTapOffsetsIsNamed) {
  Graph big("max_pool_big");
  Var x = input(big, "x", DType::kFloat32, {kDynamic, 1, 50000, 50000});
  big.set_outputs({apply(
      "max_pool", {x},
      {{"kernel_shape", std::vector<int64_t>{3, 3}}, {"pads", std::vector<int64_t>{1, 1, 1, 1}}})});
  const std::string err = testing::error_of([&] { compile(big); });
  EXPECT_NE(err.find("max pool: a plane of 2500200004 padded elements"), std::string::npos) << err;
}

TEST(Pool, MaxAndAverageWithPadsCeilModeAndDilations) {
  std::mt19937 rng(24);
  using V = std::vector<int64_t>;
  const std::vector<std::pair<std::string, Attrs>> cases{
      {"max_pool", {{"kernel_shape", V{3, 3}}, {"strides", V{2, 2}}, {"pads", V{1, 1, 1, 1}}}},
      {"max_pool",
       {{"kernel_shape", V{3, 2}},
        {"strides", V{2, 2}},
        {"ceil_mode", int64_t{1}},
        {"dilations", V{1, 2}}}},
      {"max_pool", {{"kernel_shape", V{2, 2}}, {"auto_pad", std::string("SAME_LOWER")}}},
      {"average_pool", {{"kernel_shape", V{3, 3}}, {"pads", V{1, 1, 1, 1}}}},
      {"average_pool",
       {{"kernel_shape", V{3, 3}}, {"pads", V{1, 1, 1, 1}}, {"count_include_pad", int64_t{1}}}},
      {"average_pool",
       {{"kernel_shape", V{2, 3}}, {"strides", V{2, 2}}, {"ceil_mode", int64_t{1}}}},
  };
  for (const auto& [op, attrs] : cases) {
    Graph g(op);
    Var x = input(g, "x", DType::kFloat32, {kDynamic, kDynamic, 7, 8});
    g.set_outputs({apply(op, {x}, attrs)});
    SCOPED_TRACE(op + attrs_to_string(attrs));
    Tensor nan = random_tensor(DType::kFloat32, {1, 1, 7, 8}, rng);
    nan.store(9, std::nan(""));
    check_graph(g, {{random_tensor(DType::kFloat32, {2, 3, 7, 8}, rng)},
                    {non_contiguous(random_tensor(DType::kFloat32, {3, 2, 7, 8}, rng))},
                    {nan}});
  }
  {
    // Rows of 70 take the vector path of the stride-2 column split; the padding must act as
    // -inf (a row of -inf stays -inf, not 0), NaN and +inf reach every window that holds them.
    Graph wide("max_pool_wide");
    Var xw = input(wide, "x", DType::kFloat64, {kDynamic, 2, 9, 70});
    wide.set_outputs(
        {apply("max_pool", {xw},
               {{"kernel_shape", V{3, 3}}, {"strides", V{2, 2}}, {"pads", V{1, 1, 1, 1}}})});
    Tensor special = random_tensor(DType::kFloat64, {1, 2, 9, 70}, rng);
    for (int64_t l = 0; l < 70; ++l) special.store(l, -INFINITY);           // top row
    for (int64_t r = 0; r < 9; ++r) special.store(r * 70 + 69, -INFINITY);  // right column
    special.store(70 * 9 + 4 * 70 + 33, NAN);
    special.store(70 * 9 + 8 * 70 + 0, INFINITY);
    check_graph(wide,
                {{special}, {non_contiguous(random_tensor(DType::kFloat64, {2, 2, 9, 70}, rng))}},
                0.0, 0.0);
  }
  Graph g("pool_1d");
  Var x = input(g, "x", DType::kFloat64, {kDynamic, 2, 9});
  g.set_outputs({apply("max_pool", {x}, {{"kernel_shape", V{3}}, {"strides", V{2}}}),
                 apply("average_pool", {x}, {{"kernel_shape", V{4}}, {"pads", V{2, 1}}})});
  check_graph(g, {{random_tensor(DType::kFloat64, {3, 2, 9}, rng)}}, 1e-12, 1e-12);
}

// max_pool_grad against perform (and hand values): ties go to the window's first maximum,
// a NaN maximum sends its gradient nowhere, overlapping windows add up, the padding never
// takes a gradient; 1-D and 2-D, strided inputs, split into parts.
TEST(WindowGrad, MaxPoolGradFollowsTheFirstMaximum) {
  std::mt19937 rng(31);
  using V = std::vector<int64_t>;
  {
    // Hand values: a 2x2 window of equal values gives all to the first; a NaN window, none.
    Graph g("max_pool_grad_hand");
    Var x = input(g, "x", DType::kFloat64, {1, 2, 2, 2});
    Var dy = input(g, "dy", DType::kFloat64, {1, 2, 1, 1});
    const Attrs pool{{"kernel_shape", V{2, 2}}};
    g.set_outputs({apply("max_pool_grad", {x, apply("max_pool", {x}, pool), dy}, pool)});
    Function f = compile(g);
    const auto got =
        f({Tensor::from_doubles(DType::kFloat64, {1, 2, 2, 2}, {3, 3, 3, 3, 1, NAN, 2, 0}),
           Tensor::from_doubles(DType::kFloat64, {1, 2, 1, 1}, {5, 7})})[0]
            .to_doubles();
    EXPECT_EQ(got, (std::vector<double>{5, 0, 0, 0, 0, 0, 0, 0}));
  }
  const std::vector<Attrs> cases{
      {{"kernel_shape", V{2, 2}}, {"strides", V{2, 2}}},
      {{"kernel_shape", V{3, 3}}, {"strides", V{2, 2}}, {"pads", V{1, 1, 1, 1}}},
      {{"kernel_shape", V{3, 2}},
       {"strides", V{2, 1}},
       {"ceil_mode", int64_t{1}},
       {"dilations", V{1, 2}}},
      {{"kernel_shape", V{2, 2}}, {"auto_pad", std::string("SAME_UPPER")}},
  };
  for (const auto& attrs : cases) {
    SCOPED_TRACE(attrs_to_string(attrs));
    Graph g("max_pool_grad");
    Var x = input(g, "x", DType::kFloat32, {kDynamic, 3, 7, 8});
    Var y = apply("max_pool", {x}, attrs);
    Var dy = input(g, "dy", DType::kFloat32, y.type().dims);
    g.set_outputs({apply("max_pool_grad", {x, y, dy}, attrs)});
    const Shape ys{2, 3, y.type().dims[2], y.type().dims[3]};
    // Integers in [-2, 2]: most windows hold ties. Then NaN, +inf and -inf among them.
    Tensor ties = random_tensor(DType::kFloat32, {2, 3, 7, 8}, rng);
    for (int64_t i = 0; i < ties.numel(); ++i) ties.store(i, std::round(ties.load(i)));
    Tensor special = random_tensor(DType::kFloat32, {2, 3, 7, 8}, rng);
    special.store(9, NAN);
    special.store(20, INFINITY);
    for (int64_t i = 56; i < 72; ++i) special.store(i, -INFINITY);
    check_graph(g,
                {{ties, random_tensor(DType::kFloat32, ys, rng)},
                 {special, non_contiguous(random_tensor(DType::kFloat32, ys, rng))},
                 {non_contiguous(random_tensor(DType::kFloat32, {2, 3, 7, 8}, rng)),
                  random_tensor(DType::kFloat32, ys, rng)}},
                0.0, 0.0);
  }
  Graph g("max_pool_grad_1d");
  Var x = input(g, "x", DType::kFloat64, {kDynamic, 2, 9});
  const Attrs pool{{"kernel_shape", V{3}}, {"strides", V{2}}, {"pads", V{1, 1}}};
  Var y = apply("max_pool", {x}, pool);
  g.set_outputs(
      {apply("max_pool_grad", {x, y, input(g, "dy", DType::kFloat64, y.type().dims)}, pool)});
  check_graph(g,
              {{random_tensor(DType::kFloat64, {3, 2, 9}, rng),
                random_tensor(DType::kFloat64, {3, 2, 5}, rng)}},
              0.0, 0.0);
}

// conv_weight_grad's im2col chunks and two-by-two dot products against perform's direct
// sums: chunks that end inside an image and span images, odd channel counts and lengths
// past the vector width, groups, stride, dilation, padding, 1-D, slices, strided inputs.
// conv_input_grad (dY W^T folded back) against perform's direct sums and against the
// gradient of conv itself: stride and uneven pads (positions no tap reaches stay 0), groups,
// dilation, 1-D, chunks of one image (4608-deep products), panels ending in a tail, and
// strided (non-contiguous) dY and W.
TEST(WindowGrad, ConvInputGradMatchesDirectSums) {
  std::mt19937 rng(33);
  using V = std::vector<int64_t>;
  struct Case {
    Shape x, w;
    Attrs attrs;
  };
  const std::vector<Case> cases{
      {{5, 40, 3, 3}, {24, 40, 3, 3}, {{"pads", V{1, 1, 1, 1}}}},
      {{3, 16, 9, 8}, {12, 16, 3, 3}, {{"strides", V{2, 2}}, {"pads", V{1, 0, 2, 1}}}},
      {{2, 12, 7, 7}, {9, 4, 3, 3}, {{"group", int64_t{3}}, {"strides", V{2, 2}}}},
      {{2, 6, 11, 10}, {4, 6, 2, 3}, {{"dilations", V{2, 1}}, {"strides", V{3, 2}}}},
      {{3, 5, 13}, {4, 5, 3}, {{"strides", V{2}}, {"pads", V{2, 1}}}},
      {{3, 600, 4, 4}, {16, 600, 3, 3}, {{"pads", V{1, 1, 1, 1}}}},
      {{2, 8, 12, 12}, {6, 8, 1, 1}, {{"strides", V{2, 2}}}},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(dims_to_string(c.x) + dims_to_string(c.w) + attrs_to_string(c.attrs));
    Graph probe("probe");
    const Shape ys =
        apply("conv",
              {input(probe, "x", DType::kFloat32, c.x), input(probe, "w", DType::kFloat32, c.w)},
              c.attrs)
            .type()
            .dims;
    Attrs props = c.attrs;
    props["input_shape"] = V(c.x.begin() + 2, c.x.end());
    Graph g("conv_input_grad");
    Shape dyd = ys;
    dyd[0] = kDynamic;
    Var dy = input(g, "dy", DType::kFloat32, dyd);
    Var w = input(g, "w", DType::kFloat32, c.w);
    g.set_outputs({apply("conv_input_grad", {dy, w}, props)});
    check_graph(
        g,
        {{random_tensor(DType::kFloat32, ys, rng), random_tensor(DType::kFloat32, c.w, rng)},
         {non_contiguous(random_tensor(DType::kFloat32, ys, rng)),
          non_contiguous(random_tensor(DType::kFloat32, c.w, rng))}},
        1e-4, 1e-4);
  }
  // Bad attributes and shapes name what is wrong.
  Graph bad("bad");
  Var dy = input(bad, "dy", DType::kFloat32, {2, 4, 3, 3});
  Var w = input(bad, "w", DType::kFloat32, {4, 5, 3, 3});
  EXPECT_NE(error_of([&] {
              apply("conv_input_grad", {dy, w}, {});
            }).find("input_shape"),
            std::string::npos);
  EXPECT_NE(error_of([&] {
              apply("conv_input_grad", {dy, w}, {{"input_shape", V{7, 7}}});
            }).find("is not the convolution"),
            std::string::npos);
}

TEST(WindowGrad, ConvWeightGradMatchesDirectSums) {
  std::mt19937 rng(32);
  using V = std::vector<int64_t>;
  struct Case {
    Shape x;
    int64_t m;
    Attrs attrs;
  };
  const std::vector<Case> cases{
      {{3, 16, 20, 20},
       16,
       {{"kernel_shape", V{3, 3}}, {"pads", V{1, 1, 1, 1}}, {"slices", int64_t{8}}}},
      {{2, 3, 9, 11},
       5,
       {{"kernel_shape", V{3, 3}}, {"strides", V{2, 2}}, {"pads", V{1, 0, 2, 1}}}},
      {{2, 4, 10, 9},
       6,
       {{"kernel_shape", V{2, 3}},
        {"dilations", V{2, 1}},
        {"group", int64_t{2}},
        {"slices", int64_t{3}}}},
      {{3, 6, 8, 8},
       6,
       {{"kernel_shape", V{3, 3}},
        {"pads", V{1, 1, 1, 1}},
        {"group", int64_t{6}},
        {"slices", int64_t{2}}}},
      {{2, 1, 16, 16},
       8,
       {{"kernel_shape", V{3, 3}}, {"pads", V{1, 1, 1, 1}}, {"slices", int64_t{8}}}},
      // Deeper than one chunk (its positions past kWgradDepth), chunks spanning the two
      // images, 45 columns of dW (panels of 16 with a tail).
      {{2, 5, 30, 30}, 7, {{"kernel_shape", V{3, 3}}, {"pads", V{1, 1, 1, 1}}}},
      // 360 columns of dW (23 panels) and two chunks.
      {{2, 40, 12, 12}, 24, {{"kernel_shape", V{3, 3}}, {"pads", V{1, 1, 1, 1}}}},
      // 2x2 images under a 3x3 window (most taps in the padding, as in a small image's last
      // stage), five images per chunk, 585 columns ending in a part panel.
      {{5, 65, 2, 2}, 9, {{"kernel_shape", V{3, 3}}, {"pads", V{1, 1, 1, 1}}}},
      {{3, 7, 3, 4}, 5, {{"kernel_shape", V{3, 3}}, {"pads", V{2, 1, 0, 2}}, {"strides", V{2, 2}}}},
      // dW itself, without the slices axis.
      {{2, 9, 6, 6},
       4,
       {{"kernel_shape", V{3, 3}}, {"pads", V{1, 1, 1, 1}}, {"sliced", int64_t{0}}}},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(dims_to_string(c.x) + attrs_to_string(c.attrs));
    Attrs conv = c.attrs;
    conv.erase("slices");
    conv.erase("sliced");
    Graph probe("probe");
    Var xp = input(probe, "x", DType::kFloat32, c.x);
    Shape w{c.m, c.x[1] / attr_int(c.attrs, "group", 1), attr_ints(c.attrs, "kernel_shape")[0],
            attr_ints(c.attrs, "kernel_shape")[1]};
    const Shape ys = apply("conv", {xp, input(probe, "w", DType::kFloat32, w)}, conv).type().dims;
    Graph g("conv_weight_grad");
    Var x = input(g, "x", DType::kFloat32, {kDynamic, c.x[1], c.x[2], c.x[3]});
    Var dy = input(g, "dy", DType::kFloat32, {kDynamic, ys[1], ys[2], ys[3]});
    g.set_outputs({apply("conv_weight_grad", {x, dy}, c.attrs)});
    check_graph(
        g,
        {{random_tensor(DType::kFloat32, c.x, rng), random_tensor(DType::kFloat32, ys, rng)},
         {non_contiguous(random_tensor(DType::kFloat32, c.x, rng)),
          non_contiguous(random_tensor(DType::kFloat32, ys, rng))}},
        1e-4, 1e-4);
  }
  Graph g("conv_weight_grad_1d");
  Var x = input(g, "x", DType::kFloat64, {kDynamic, 2, 37});
  const Attrs attrs{
      {"kernel_shape", V{5}}, {"strides", V{3}}, {"pads", V{2, 2}}, {"slices", int64_t{4}}};
  g.set_outputs(
      {apply("conv_weight_grad", {x, input(g, "dy", DType::kFloat64, {kDynamic, 3, 13})}, attrs)});
  check_graph(g,
              {{random_tensor(DType::kFloat64, {3, 2, 37}, rng),
                random_tensor(DType::kFloat64, {3, 3, 13}, rng)}},
              1e-12, 1e-12);
}

TEST(WindowGrad, ShapeMismatchesNameTheInput) {
  using V = std::vector<int64_t>;
  Graph g("bad");
  Var x = input(g, "x", DType::kFloat32, {2, 3, 8, 8});
  const Attrs pool{{"kernel_shape", V{2, 2}}, {"strides", V{2, 2}}};
  EXPECT_NE(error_of([&] {
              apply("max_pool_grad", {x, x, x}, pool);
            }).find("pooled output"),
            std::string::npos);
  EXPECT_NE(error_of([&] {
              apply("conv_weight_grad", {x, input(g, "dy", DType::kFloat32, {2, 4, 5, 5})},
                    {{"kernel_shape", V{3, 3}}});
            }).find("does not match the convolution"),
            std::string::npos);
  EXPECT_NE(
      error_of([&] {
        apply("conv_weight_grad", {x, x}, {{"kernel_shape", V{1, 1}}, {"slices", int64_t{0}}});
      }).find("slices"),
      std::string::npos);
  EXPECT_NE(error_of([&] {
              apply("conv_weight_grad", {x, x},
                    {{"kernel_shape", V{1, 1}}, {"slices", int64_t{2}}, {"sliced", int64_t{0}}});
            }).find("sliced"),
            std::string::npos);
}

}  // namespace
}  // namespace kiln

namespace kiln {
namespace {

// Every entry of the scalar-op table has a C++ builder (ops/builders.h) that makes a node of
// that op: a table entry added without a builder fails here by name.
TEST(Builders, EveryScalarTableOpHasOne) {
  const std::map<std::string, std::function<Var(Var x, Var flag)>> builders{
      {"add", [](Var x, Var) { return add(x, x); }},
      {"sub", [](Var x, Var) { return sub(x, x); }},
      {"mul", [](Var x, Var) { return mul(x, x); }},
      {"div", [](Var x, Var) { return div(x, x); }},
      {"pow", [](Var x, Var) { return pow(x, x); }},
      {"mod", [](Var x, Var) { return mod(x, x); }},
      {"fmod", [](Var x, Var) { return fmod(x, x); }},
      {"neg", [](Var x, Var) { return neg(x); }},
      {"abs", [](Var x, Var) { return abs(x); }},
      {"sign", [](Var x, Var) { return sign(x); }},
      {"exp", [](Var x, Var) { return exp(x); }},
      {"log", [](Var x, Var) { return log(x); }},
      {"log1p", [](Var x, Var) { return log1p(x); }},
      {"expm1", [](Var x, Var) { return expm1(x); }},
      {"sqrt", [](Var x, Var) { return sqrt(x); }},
      {"reciprocal", [](Var x, Var) { return reciprocal(x); }},
      {"div_rcp", [](Var x, Var) { return div_rcp(x, x, reciprocal(x)); }},
      {"sin", [](Var x, Var) { return sin(x); }},
      {"cos", [](Var x, Var) { return cos(x); }},
      {"sinh", [](Var x, Var) { return sinh(x); }},
      {"cosh", [](Var x, Var) { return cosh(x); }},
      {"asin", [](Var x, Var) { return asin(x); }},
      {"acos", [](Var x, Var) { return acos(x); }},
      {"atan", [](Var x, Var) { return atan(x); }},
      {"asinh", [](Var x, Var) { return asinh(x); }},
      {"acosh", [](Var x, Var) { return acosh(x); }},
      {"atanh", [](Var x, Var) { return atanh(x); }},
      {"tanh", [](Var x, Var) { return tanh(x); }},
      {"sigmoid", [](Var x, Var) { return sigmoid(x); }},
      {"relu", [](Var x, Var) { return relu(x); }},
      {"leaky_relu", [](Var x, Var) { return leaky_relu(x, 0.2); }},
      {"elu", [](Var x, Var) { return elu(x, 0.5); }},
      {"softplus", [](Var x, Var) { return softplus(x); }},
      {"erf", [](Var x, Var) { return erf(x); }},
      {"gelu", [](Var x, Var) { return gelu(x); }},
      {"floor", [](Var x, Var) { return floor(x); }},
      {"ceil", [](Var x, Var) { return ceil(x); }},
      {"round", [](Var x, Var) { return round(x); }},
      {"maximum", [](Var x, Var) { return maximum(x, x); }},
      {"minimum", [](Var x, Var) { return minimum(x, x); }},
      {"clip", [](Var x, Var) { return clip(x, x, x); }},
      {"lt", [](Var x, Var) { return lt(x, x); }},
      {"le", [](Var x, Var) { return le(x, x); }},
      {"gt", [](Var x, Var) { return gt(x, x); }},
      {"ge", [](Var x, Var) { return ge(x, x); }},
      {"eq", [](Var x, Var) { return eq(x, x); }},
      {"ne", [](Var x, Var) { return ne(x, x); }},
      {"logical_and", [](Var, Var f) { return logical_and(f, f); }},
      {"logical_or", [](Var, Var f) { return logical_or(f, f); }},
      {"logical_not", [](Var, Var f) { return logical_not(f); }},
      {"where", [](Var x, Var f) { return where(f, x, x); }},
      {"cast", [](Var x, Var) { return cast(x, DType::kInt32); }},
      {"shift_left",
       [](Var x, Var) { return shift_left(cast(x, DType::kInt64), cast(x, DType::kInt64)); }},
      {"shift_right",
       [](Var x, Var) { return shift_right(cast(x, DType::kInt64), cast(x, DType::kInt64)); }},
      {"maximum_u",
       [](Var x, Var) { return maximum_u(cast(x, DType::kInt64), cast(x, DType::kInt64)); }},
      {"minimum_u",
       [](Var x, Var) { return minimum_u(cast(x, DType::kInt64), cast(x, DType::kInt64)); }},
      {"mod_u", [](Var x, Var) { return mod_u(cast(x, DType::kInt64), cast(x, DType::kInt64)); }},
  };
  for (const ScalarOpDef& def : scalar_ops()) {
    const std::string name(def.name);
    auto it = builders.find(name);
    ASSERT_NE(it, builders.end()) << "scalar op '" << name
                                  << "' has no C++ builder: add one to ops/builders.h and here";
    Graph g("builders");
    Var x = input(g, "x", DType::kFloat32, {3});
    Var made = it->second(x, gt(x, x));
    ASSERT_NE(made.var()->owner, nullptr) << name;
    EXPECT_EQ(made.var()->owner->op->name(), name) << "the builder of '" << name << "'";
  }
  EXPECT_EQ(builders.size(), scalar_ops().size()) << "a builder for an op the table lacks";
}

}  // namespace
}  // namespace kiln
