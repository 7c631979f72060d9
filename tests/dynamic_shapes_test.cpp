// Dynamic dimensions through shape arithmetic: dimension expressions (graph/dim_expr.h), and
// ONNX models whose Shape -> Gather -> Concat -> Reshape / Expand / Slice / ConstantOfShape /
// Range chains follow a dynamic batch and sequence, compiled once and run at several sizes
// against values computed here by hand.
#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <random>

#include "compiler/compile.h"
#include "frontend/model_function.h"
#include "frontend/onnx/nms.h"
#include "frontend/onnx/onnx_model.h"
#include "graph/dim_expr.h"
#include "ops/builders.h"
#include "runtime/support/kiln_half.h"
#include "tests/helpers.h"
#include "tests/onnx_builder.h"
#include "util/error.h"

namespace kiln {
namespace {

using testing::error_message;
using testing::ModelBuilder;
using testing::set_int;

TEST(DimExpr, ParsesPrintsAndEvaluatesWithOnnxIntegerSemantics) {
  const std::vector<Shape> shapes{{7, 3}, {2, 5, 11}};
  struct Case {
    const char* text;
    int64_t value;
  };
  for (const Case& c : std::vector<Case>{{"#0.0", 7},
                                         {"#1.2*4", 44},
                                         {"#0.0*#0.1/2", 10},    // left to right: 21 / 2
                                         {"(#1.1-#0.0)/2", -1},  // truncates toward zero
                                         {"-7/2", -3},
                                         {"(#1.1-#0.0)%3", 1},  // -2 mod 3 takes the divisor's sign
                                         {"7%-3", -2},
                                         {"min(#0.0, #1.1)+max(2,#0.1)", 8},
                                         {"9223372036854775807", INT64_MAX},
                                         {"4611686018427387904", int64_t{1} << 62}}) {
    const DimExpr e = DimExpr::parse(c.text);
    EXPECT_EQ(e.eval(shapes), c.value) << c.text;
    // The printed form parses back to the same expression.
    EXPECT_EQ(DimExpr::parse(e.str()).eval(shapes), c.value) << e.str();
    EXPECT_EQ(DimExpr::parse(e.str()).str(), e.str());
  }
  EXPECT_EQ(DimExpr::parse("2*3+1").value(), 7);  // constants fold
  EXPECT_EQ(DimExpr::parse("#1.0*1+0").str(), "#1.0");
  EXPECT_EQ(DimExpr::parse("#1.0").leaf(), std::make_pair(1, 0));
  const auto list = parse_dim_exprs("#0.1;6;(#1.0*#1.1)");
  ASSERT_EQ(list.size(), 3u);
  EXPECT_EQ(dim_exprs_to_string(list), "#0.1;6;(#1.0*#1.1)");
  EXPECT_EQ(list[2].max_input(), 1);
  // Static evaluation: unknown when a leaf's dimension is dynamic.
  const std::vector<TensorType> types{{DType::kFloat32, {kDynamic, 3}}};
  EXPECT_EQ(DimExpr::parse("#0.1*2").eval_static(types), 6);
  EXPECT_EQ(DimExpr::parse("#0.0*2").eval_static(types), std::nullopt);
  // The C form computes the same value (checked by compiled modules below); it reads shapes.
  EXPECT_EQ(DimExpr::parse("#1.2*4").c_expr({"a", "b"}), "(b->shape[2] * INT64_C(4))");
}

TEST(DimExpr, BadTextAndBadEvaluationsAreErrorsNamingTheProblem) {
  for (const char* bad : {"", "#", "#1", "#1.", "(#0.0", "#0.0+", "min(1)", "1 2", "#0.99",
                          "99999999999999999999", "x"}) {
    const std::string m = error_message<UserError>([&] { DimExpr::parse(bad); });
    EXPECT_NE(m.find("dimension expression '" + std::string(bad) + "' at offset"),
              std::string::npos)
        << bad << ": " << m;
  }
  std::string deep(200, '(');
  EXPECT_NE(error_message<UserError>([&] {
              DimExpr::parse(deep + "1" + std::string(200, ')'));
            }).find("nested too deeply"),
            std::string::npos);
  const DimExpr div = DimExpr::parse("#0.0/#0.1");
  EXPECT_NE(error_message<UserError>([&] {
              div.eval({{4, 0}});
            }).find("divides by zero"),
            std::string::npos);
  EXPECT_NE(error_message<UserError>([&] { div.eval({{4}}); }).find("does not exist"),
            std::string::npos);
}

// x: float32 (batch, seq, 6), both dynamic. The outputs use the exporters' patterns:
//   r:   Reshape(x, [b, t, 2, 3])             -> plain reshape (dims at their places)
//   f:   Reshape(r, [b * t, -1])              -> a target that reads run-time dimensions
//   e:   Concat(Expand(tok, [b, 1, 1]), x)    -> (b, t + 1, 6), a class token per batch
//   s:   x + Slice(table, 0, t) over axis 0   -> a position table cut to the sequence
//   g:   Cast(Range(0, t, 1)) * ConstantOfShape([t], 2) -> 0, 2, 4, ...
//   sh:  Shape(x) used as data                -> [b, t, 6] (int64)
std::string dynamic_model() {
  ModelBuilder b;
  b.input("x", {-1, -2, 6});
  b.initializer("tok", {1, 1, 6}, {1, 2, 3, 4, 5, 6});
  std::vector<float> table(16 * 6);
  for (size_t i = 0; i < table.size(); ++i) table[i] = static_cast<float>(i) * 0.5f;
  b.initializer("table", {16, 6}, table);
  b.ints_initializer("i0", {0});
  b.ints_initializer("i1", {1});
  b.ints_initializer("c23", {2, 3});
  b.ints_initializer("one", {1});
  b.ints_initializer("minus1", {-1});
  // Scalars 0 and 1 as Constant nodes, as exporters write them.
  auto scalar = [&](const std::string& name, int64_t v) {
    auto* c = b.node("Constant", {}, {name});
    auto* a = c->add_attribute();
    a->set_name("value");
    a->set_type(onnx::AttributeProto::TENSOR);
    auto* t = a->mutable_t();
    t->set_data_type(onnx::TensorProto::INT64);
    t->add_int64_data(v);
  };
  scalar("zero", 0);
  scalar("onei", 1);
  b.node("Shape", {"x"}, {"s"});
  set_int(b.node("Gather", {"s", "zero"}, {"bs"}), "axis", 0);
  b.node("Gather", {"s", "onei"}, {"ts"});
  b.node("Unsqueeze", {"bs", "i0"}, {"b1"});
  b.node("Unsqueeze", {"ts", "i0"}, {"t1"});
  set_int(b.node("Concat", {"b1", "t1", "c23"}, {"shape_r"}), "axis", 0);
  b.node("Reshape", {"x", "shape_r"}, {"r"});
  b.node("Mul", {"b1", "t1"}, {"bt"});
  set_int(b.node("Concat", {"bt", "minus1"}, {"shape_f"}), "axis", 0);
  b.node("Reshape", {"r", "shape_f"}, {"f"});
  set_int(b.node("Concat", {"b1", "one", "one"}, {"shape_e"}), "axis", 0);
  b.node("Expand", {"tok", "shape_e"}, {"tokens"});
  set_int(b.node("Concat", {"tokens", "x"}, {"e"}), "axis", 1);
  b.node("Slice", {"table", "i0", "t1", "i0"}, {"pos"});
  b.node("Add", {"x", "pos"}, {"sx"});
  b.node("Range", {"zero", "ts", "onei"}, {"ar"});
  set_int(b.node("Cast", {"ar"}, {"arf"}), "to", onnx::TensorProto::FLOAT);
  auto* cos = b.node("ConstantOfShape", {"t1"}, {"twos"});
  auto* a = cos->add_attribute();
  a->set_name("value");
  a->set_type(onnx::AttributeProto::TENSOR);
  a->mutable_t()->set_data_type(onnx::TensorProto::FLOAT);
  a->mutable_t()->add_dims(1);
  a->mutable_t()->add_float_data(2.0f);
  b.node("Mul", {"arf", "twos"}, {"gr"});
  b.node("Identity", {"s"}, {"sh"});
  b.output("r", {-1, -2, 2, 3});
  b.output("f", {-3, 6});
  b.output("e", {-1, -4, 6});
  b.output("sx", {-1, -2, 6});
  b.output("gr", {-2});
  b.output("sh", {3}, onnx::TensorProto::INT64);
  return b.bytes();
}

TEST(DynamicShapes, OneModuleServesEverySizeThroughShapeArithmetic) {
  Graph g = parse_onnx_model(dynamic_model(), "dynamic.onnx", ".");
  EXPECT_EQ(g.inputs()[0]->type.to_string(), "float32 (?, ?, 6)");
  Function f = compile(g);
  for (auto [batch, seq] : std::vector<std::pair<int64_t, int64_t>>{{1, 1}, {2, 5}, {3, 16}}) {
    SCOPED_TRACE("batch " + std::to_string(batch) + ", seq " + std::to_string(seq));
    std::mt19937 rng(static_cast<unsigned>(7 + batch * 16 + seq));
    Tensor x = testing::random_tensor(DType::kFloat32, {batch, seq, 6}, rng);
    auto out = f({x});
    ASSERT_EQ(out.size(), 6u);
    EXPECT_EQ(out[0].shape(), (Shape{batch, seq, 2, 3}));
    EXPECT_EQ(out[1].shape(), (Shape{batch * seq, 6}));
    EXPECT_EQ(out[2].shape(), (Shape{batch, seq + 1, 6}));
    EXPECT_EQ(out[3].shape(), (Shape{batch, seq, 6}));
    EXPECT_EQ(out[4].shape(), (Shape{seq}));
    ASSERT_EQ(out[5].shape(), (Shape{3}));
    for (int64_t i = 0; i < x.numel(); ++i) {
      ASSERT_EQ(out[0].load(i), x.load(i));  // row-major reshapes keep the order
      ASSERT_EQ(out[1].load(i), x.load(i));
    }
    for (int64_t n = 0; n < batch; ++n) {
      for (int64_t k = 0; k < 6; ++k) {
        EXPECT_EQ(out[2].load((n * (seq + 1)) * 6 + k), static_cast<double>(k + 1));
        for (int64_t t = 0; t < seq; ++t) {
          const int64_t xi = (n * seq + t) * 6 + k;
          ASSERT_EQ(out[2].load((n * (seq + 1) + t + 1) * 6 + k), x.load(xi));
          ASSERT_FLOAT_EQ(static_cast<float>(out[3].load(xi)),
                          static_cast<float>(x.load(xi)) + static_cast<float>(t * 6 + k) * 0.5f);
        }
      }
    }
    for (int64_t t = 0; t < seq; ++t) EXPECT_EQ(out[4].load(t), 2.0 * static_cast<double>(t));
    EXPECT_EQ(out[5].load_int(0), batch);
    EXPECT_EQ(out[5].load_int(1), seq);
    EXPECT_EQ(out[5].load_int(2), 6);
  }
  // An empty sequence: [b * t, -1] has no answer (0 / 0), as for a static reshape.
  std::mt19937 rng(3);
  Tensor empty = testing::random_tensor(DType::kFloat32, {2, 0, 6}, rng);
  std::string m = error_message<UserError>([&] { f({empty}); });
  EXPECT_NE(m.find("reshape): a dimension expression divides by zero: "), std::string::npos) << m;
  EXPECT_NE(m.find("with input shapes (2, 0, 2, 3)"), std::string::npos) << m;
  // A sequence longer than the table: the slice clamps to 16 rows and the add cannot
  // broadcast, an error naming the node.
  Tensor x = testing::random_tensor(DType::kFloat32, {1, 17, 6}, rng);
  m = error_message<UserError>([&] { f({x}); });
  EXPECT_NE(m.find("cannot broadcast"), std::string::npos) << m;
  EXPECT_NE(m.find("node"), std::string::npos) << m;
}

TEST(DynamicShapes, TheRulesAreInTheCacheKeyAndTheSourceReadsShapes) {
  auto model = [](int64_t split) {
    ModelBuilder b;
    b.input("x", {-1, 6});
    b.ints_initializer("i0", {0});
    b.ints_initializer("rest", {split, 6 / split});
    b.node("Shape", {"x"}, {"s"});
    b.ints_initializer("one", {1});
    b.node("Slice", {"s", "i0", "one"}, {"b1"});
    set_int(b.node("Concat", {"b1", "rest"}, {"shape"}), "axis", 0);
    b.node("Reshape", {"x", "shape"}, {"y"});
    b.output("y", {-1, split, 6 / split});
    return parse_onnx_model(b.bytes(), "split.onnx", ".");
  };
  Graph a = model(2), b = model(3);
  EXPECT_NE(compile(a).info().key, compile(b).info().key);
  Function f = compile(a);
  std::mt19937 rng(1);
  Tensor x = testing::random_tensor(DType::kFloat32, {4, 6}, rng);
  EXPECT_EQ(f({x})[0].shape(), (Shape{4, 2, 3}));
  x = testing::random_tensor(DType::kFloat32, {9, 6}, rng);
  EXPECT_EQ(f({x})[0].shape(), (Shape{9, 2, 3}));
}

// A fill of a dynamic shape holds any float: infinities and NaN too (a mask's -inf), which
// its C writes through <math.h>.
TEST(DynamicShapes, FillsOfADynamicShapeHoldInfinitiesAndNan) {
  const double inf = std::numeric_limits<double>::infinity();
  for (double value : {-inf, inf, std::numeric_limits<double>::quiet_NaN(), -0.0, 2.5}) {
    Graph g("fill");
    Var x = input(g, "x", DType::kFloat32, {kDynamic, 3});
    Var f = apply("fill", {x}, {{"dims", std::string("#0.0;(#0.1+1)")}, {"value", value},
                               {"dtype", std::string("float32")}});
    g.set_outputs({f});
    const Tensor out = compile(g, CompileOptions{})({Tensor::zeros(DType::kFloat32, {5, 3})})[0];
    ASSERT_EQ(out.shape(), (Shape{5, 4})) << value;
    for (int64_t i = 0; i < out.numel(); ++i) {
      const double v = out.load(i);
      EXPECT_TRUE(std::isnan(value) ? std::isnan(v) : v == value && std::signbit(v) == std::signbit(value))
          << value << " at " << i << ": " << v;
    }
  }
}

TEST(DynamicShapes, AValueThatCannotFollowADynamicDimensionIsAClearError) {
  ModelBuilder b;
  b.input("x", {-1, 6});
  b.node("Shape", {"x"}, {"s"});
  b.node("ReduceSum", {"x", "s"}, {"y"});  // axes from a shape: no single right answer
  b.output("y", {-1});
  const std::string m =
      error_message<UnsupportedError>([&] { parse_onnx_model(b.bytes(), "axes.onnx", "."); });
  EXPECT_NE(m.find("axes.onnx: node 1"), std::string::npos) << m;
  EXPECT_NE(m.find("input 1 's' (axes) follows a dynamic dimension ([?, 6])"), std::string::npos)
      << m;
}

}  // namespace
}  // namespace kiln

namespace kiln {
namespace {

// Reshape(x, shape) with `shape` a graph input: its value decides the graph, so the model is
// built per distinct value set, read from each call (a cached module per set).
TEST(InputValues, AModelIsBuiltPerValueSetOfItsShapeInputs) {
  ModelBuilder b;
  b.input("x", {2, 6});
  b.input("shape", {2}, onnx::TensorProto::INT64);
  b.node("Reshape", {"x", "shape"}, {"y"});
  b.output("y", {-1, -2});
  const std::filesystem::path path =
      std::filesystem::path(testing::temp_dir("input_values")) / "reshape.onnx";
  std::ofstream(path, std::ios::binary) << b.bytes();

  const std::string direct = error_message<UnsupportedError>([&] { load_onnx_model(path); });
  EXPECT_NE(direct.find("node 0 (Reshape): input 1 'shape' (shape) is a graph input whose value "
                        "decides the graph"),
            std::string::npos)
      << direct;

  ModelFunction f(path);
  ASSERT_EQ(f.inputs().size(), 2u);
  EXPECT_EQ(f.inputs()[1].type.to_string(), "int64 (2,)");
  std::mt19937 rng(5);
  Tensor x = testing::random_tensor(DType::kFloat32, {2, 6}, rng);
  auto shape = [](int64_t a, int64_t c) {
    return Tensor::from_doubles(DType::kInt64, {2},
                                {static_cast<double>(a), static_cast<double>(c)});
  };
  // -1 infers a dimension and 0 copies the input's, as ONNX says.
  for (auto [a, c] : std::vector<std::pair<int64_t, int64_t>>{{3, 4}, {-1, 2}, {3, 4}, {0, 6}}) {
    auto y = f({x, shape(a, c)});
    const Shape want = a == 3 ? Shape{3, 4} : a == -1 ? Shape{6, 2} : Shape{2, 6};
    EXPECT_EQ(y[0].shape(), want);
    for (int64_t i = 0; i < x.numel(); ++i) ASSERT_EQ(y[0].load(i), x.load(i));
  }
  EXPECT_EQ(f.value_inputs(), std::vector<std::string>{"shape"});
  EXPECT_EQ(f.variants(), 3u);  // (3, 4) came twice
  // A second instance reuses the compiled variant (from memory here, from the kernel cache in
  // a new process): nothing compiles. The variant's module may still be compiling in the
  // background (the first calls took the generic tier): wait for it first.
  f({x, shape(-1, 2)});
  f.function();
  ModelFunction again(path);
  again({x, shape(-1, 2)});
  const CacheStatus status = again.function().info().cache;
  EXPECT_TRUE(status == CacheStatus::kMemo || status == CacheStatus::kHit) << to_string(status);
  // A shape computed from a graph input's value (here half of it, doubled) names that input.
  ModelBuilder c;
  c.input("x", {2, 6});
  c.input("half", {2}, onnx::TensorProto::INT64);
  c.ints_initializer("two", {2, 1});
  c.node("Mul", {"half", "two"}, {"shape"});
  c.node("Reshape", {"x", "shape"}, {"y"});
  c.output("y", {-1, -2});
  const std::filesystem::path computed =
      std::filesystem::path(testing::temp_dir("input_values")) / "computed.onnx";
  std::ofstream(computed, std::ios::binary) << c.bytes();
  ModelFunction g(computed);
  auto z = g({x, Tensor::from_doubles(DType::kInt64, {2}, {2, 3})});
  EXPECT_EQ(z[0].shape(), (Shape{4, 3}));
  EXPECT_EQ(g.value_inputs(), std::vector<std::string>{"half"});
  // A value that cannot work is the loader's clear error, naming the node.
  const std::string m = error_message<UserError>([&] { f({x, shape(5, 5)}); });
  EXPECT_NE(m.find("node 0 (Reshape)"), std::string::npos) << m;
  EXPECT_NE(m.find("cannot reshape"), std::string::npos) << m;
}

}  // namespace
}  // namespace kiln

namespace kiln {
namespace {

// Storage types: float16 models compute in float32 and round each op's result to float16;
// narrow and unsigned integers compute wider and wrap on store; uint64 orderings are refused.
TEST(StorageTypes, Float16ModelsRoundEachOpAndIntegersWrap) {
  ModelBuilder b;
  b.input("x", {2, 3}, onnx::TensorProto::FLOAT16);
  b.input("w", {3, 2}, onnx::TensorProto::FLOAT16);
  b.input("c", {2}, onnx::TensorProto::FLOAT16);
  b.node("MatMul", {"x", "w"}, {"m"});
  b.node("Add", {"m", "c"}, {"a"});
  b.node("Relu", {"a"}, {"y"});
  b.output("y", {2, 2}, onnx::TensorProto::FLOAT16);
  Graph g = parse_onnx_model(b.bytes(), "half.onnx", ".");
  EXPECT_EQ(g.inputs()[0]->type.to_string(), "float16 (2, 3)");
  EXPECT_EQ(g.outputs()[0]->type.to_string(), "float16 (2, 2)");
  auto half = [](Shape shape, std::vector<double> v) {
    return Tensor::from_doubles(DType::kFloat16, std::move(shape), v);
  };
  // 1/3 and 0.1 are not float16 values; 2049 needs 12 bits (float16 keeps 11).
  Tensor x = half({2, 3}, {1.0 / 3, 0.1, 2049, -1, 2, 0.5});
  Tensor w = half({3, 2}, {3, 1, 1, -1, 1, 0.25});
  Tensor c = half({2}, {0.001, -600});
  Tensor y = compile(g)({x, w, c})[0];
  ASSERT_EQ(y.dtype(), DType::kFloat16);
  auto r16 = [](double v) { return kiln_f16_to_f32(kiln_f32_to_f16(static_cast<float>(v))); };
  for (int64_t i = 0; i < 2; ++i) {
    for (int64_t j = 0; j < 2; ++j) {
      double m = 0;
      for (int64_t k = 0; k < 3; ++k) m += x.load(i * 3 + k) * w.load(k * 2 + j);
      const double want = std::max(0.0, static_cast<double>(r16(r16(m) + c.load(j))));
      EXPECT_EQ(y.load(i * 2 + j), want) << i << "," << j;
    }
  }

  ModelBuilder n;
  n.input("p", {3}, onnx::TensorProto::INT16);
  n.input("q", {3}, onnx::TensorProto::INT16);
  n.input("u", {2}, onnx::TensorProto::UINT32);
  n.ints_initializer("one", {1});
  n.node("Add", {"p", "q"}, {"s"});
  n.node("Cast", {"one"}, {"one_u"})->add_attribute()->set_name("to");
  auto* to = n.g->mutable_node(1)->mutable_attribute(0);
  to->set_type(onnx::AttributeProto::INT);
  to->set_i(onnx::TensorProto::UINT32);
  n.node("Sub", {"u", "one_u"}, {"d"});
  n.output("s", {3}, onnx::TensorProto::INT16);
  n.output("d", {2}, onnx::TensorProto::UINT32);
  Function f = compile(parse_onnx_model(n.bytes(), "ints.onnx", "."));
  auto out = f({Tensor::from_doubles(DType::kInt16, {3}, {32767, -32768, 5}),
                Tensor::from_doubles(DType::kInt16, {3}, {1, -1, -7}),
                Tensor::from_doubles(DType::kUInt32, {2}, {0, 7})});
  ASSERT_EQ(out[0].dtype(), DType::kInt16);
  EXPECT_EQ(out[0].load_int(0), -32768);  // wraps as int16 arithmetic does
  EXPECT_EQ(out[0].load_int(1), 32767);
  EXPECT_EQ(out[0].load_int(2), -2);
  ASSERT_EQ(out[1].dtype(), DType::kUInt32);
  EXPECT_EQ(out[1].load_int(0), 4294967295);
  EXPECT_EQ(out[1].load_int(1), 6);

  ModelBuilder u;
  u.input("a", {2}, onnx::TensorProto::UINT64);
  u.input("b", {2}, onnx::TensorProto::UINT64);
  u.node("Div", {"a", "b"}, {"q"});
  u.output("q", {2}, onnx::TensorProto::UINT64);
  const std::string m =
      error_message<UnsupportedError>([&] { parse_onnx_model(u.bytes(), "u64.onnx", "."); });
  EXPECT_NE(m.find("u64.onnx: node 0 (Div): Div on uint64 values"), std::string::npos) << m;
}

}  // namespace
}  // namespace kiln

namespace kiln {
namespace {

// Einsum's attention forms against a direct sum over every letter.
TEST(OnnxOps, EinsumAttentionFormsMatchADirectSum) {
  struct Case {
    std::string eq;
    Shape a, b;
  };
  std::mt19937 rng(61);
  for (const Case& c : std::vector<Case>{{"bhid,bhjd->bhij", {2, 3, 4, 5}, {2, 3, 6, 5}},
                                         {"bhij,bhjd->bhid", {2, 3, 4, 6}, {2, 3, 6, 5}},
                                         {"bid,jd->bij", {2, 4, 5}, {3, 5}},
                                         {"...ij,...jk->...ik", {2, 3, 4}, {2, 4, 5}},
                                         {"ij,kj", {3, 4}, {5, 4}},
                                         {"bij,bjk->bk", {2, 3, 4}, {2, 4, 5}}}) {
    SCOPED_TRACE(c.eq);
    ModelBuilder m;
    m.input("a", c.a);
    m.input("b", c.b);
    auto* node = m.node("Einsum", {"a", "b"}, {"y"});
    testing::set_string(node, "equation", c.eq);
    m.output("y", {-1});
    Graph g = parse_onnx_model(m.bytes(), "einsum.onnx", ".");
    Tensor a = testing::random_tensor(DType::kFloat32, c.a, rng);
    Tensor b = testing::random_tensor(DType::kFloat32, c.b, rng);
    Tensor y = compile(g)({a, b})[0];
    // The reference: letters to sizes, then every assignment of every letter.
    std::string lhs = c.eq.substr(0, c.eq.find("->"));
    std::string ta = lhs.substr(0, lhs.find(',')), tb = lhs.substr(lhs.find(',') + 1);
    std::string out = c.eq.find("->") == std::string::npos ? "" : c.eq.substr(c.eq.find("->") + 2);
    if (ta == "...ij") {
      ta = "Aij", tb = "Ajk", out = "Aik";
    }
    if (c.eq == "ij,kj") out = "ik";
    std::map<char, int64_t> size;
    for (size_t i = 0; i < ta.size(); ++i) size[ta[i]] = c.a[i];
    for (size_t i = 0; i < tb.size(); ++i) size[tb[i]] = c.b[i];
    std::vector<char> letters;
    for (const auto& [l, s] : size) letters.push_back(l);
    Shape oshape;
    for (char l : out) oshape.push_back(size[l]);
    ASSERT_EQ(y.shape(), oshape);
    std::vector<double> want(static_cast<size_t>(shape_numel(oshape)), 0.0);
    std::map<char, int64_t> at;
    for (char l : letters) at[l] = 0;
    auto flat = [&](const std::string& t, const Shape& s) {
      int64_t f = 0;
      for (size_t i = 0; i < t.size(); ++i) f = f * s[i] + at[t[i]];
      return f;
    };
    for (bool done = false; !done;) {
      want[static_cast<size_t>(flat(out, oshape))] += a.load(flat(ta, c.a)) * b.load(flat(tb, c.b));
      done = true;
      for (size_t k = letters.size(); k-- > 0;) {
        if (++at[letters[k]] < size[letters[k]]) {
          done = false;
          break;
        }
        at[letters[k]] = 0;
      }
    }
    for (int64_t i = 0; i < y.numel(); ++i)
      EXPECT_NEAR(y.load(i), want[static_cast<size_t>(i)], 1e-4) << i;
  }
}

}  // namespace
}  // namespace kiln

namespace kiln {
namespace {

void set_ints(onnx::NodeProto* n, const std::string& name, const std::vector<int64_t>& v) {
  auto* a = n->add_attribute();
  a->set_name(name);
  a->set_type(onnx::AttributeProto::INTS);
  for (int64_t x : v) a->add_ints(x);
}

// The output position of flat index i of a 5-D shape: (n * C + c, d, h, w).
std::array<int64_t, 4> coords(int64_t i, const Shape& s) {
  const int64_t w = i % s[4], h = i / s[4] % s[3], d = i / (s[4] * s[3]) % s[2];
  return {i / (s[4] * s[3] * s[2]), d, h, w};
}

// 3-D convolution and pooling (decomposed into 2-D and 1-D ones) against direct loops over
// every output element and window tap, with pads, strides, dilations, groups and ceil_mode.
TEST(OnnxOps, ThreeDimensionalConvAndPoolingMatchDirectLoops) {
  std::mt19937 rng(91);
  const Shape xs{2, 4, 5, 6, 7}, ws{6, 2, 3, 2, 3};  // groups 2
  const std::vector<int64_t> strides{2, 1, 2}, dil{1, 2, 1}, pads{1, 0, 1, 0, 1, 2};
  ModelBuilder b;
  b.input("x", xs);
  std::vector<float> w(static_cast<size_t>(shape_numel(ws))), bias{0.5f, -1, 2, 0, 1, -0.25f};
  for (float& v : w) v = std::uniform_real_distribution<float>(-1, 1)(rng);
  b.initializer("w", ws, w);
  b.initializer("b", {6}, bias);
  auto* conv = b.node("Conv", {"x", "w", "b"}, {"y"});
  set_ints(conv, "strides", strides);
  set_ints(conv, "dilations", dil);
  set_ints(conv, "pads", pads);
  set_int(conv, "group", 2);
  auto* mp = b.node("MaxPool", {"x"}, {"m"});
  set_ints(mp, "kernel_shape", {2, 3, 2});
  set_ints(mp, "strides", {2, 2, 2});
  set_ints(mp, "pads", {1, 1, 0, 0, 1, 1});
  set_int(mp, "ceil_mode", 1);
  auto* ap = b.node("AveragePool", {"x"}, {"p"});
  set_ints(ap, "kernel_shape", {3, 2, 2});
  set_ints(ap, "pads", {1, 0, 1, 1, 1, 0});
  b.output("y", {-1});
  b.output("m", {-1});
  b.output("p", {-1});
  Graph g = parse_onnx_model(b.bytes(), "conv3d.onnx", ".");
  Tensor x = testing::random_tensor(DType::kFloat32, xs, rng);
  auto out = compile(g)({x});
  auto X = [&](int64_t n, int64_t c, int64_t d, int64_t h, int64_t w_) {
    return x.load((((n * xs[1] + c) * xs[2] + d) * xs[3] + h) * xs[4] + w_);
  };
  // Convolution: out size (in + pads - dil * (k - 1) - 1) / stride + 1.
  Shape ys{2, 6};
  for (int i = 0; i < 3; ++i)
    ys.push_back((xs[2 + i] + pads[i] + pads[3 + i] - dil[i] * (ws[2 + i] - 1) - 1) / strides[i] +
                 1);
  ASSERT_EQ(out[0].shape(), ys);
  for (int64_t i = 0; i < out[0].numel(); ++i) {
    const auto [n_c, od, oh, ow] = coords(i, ys);
    const int64_t m = n_c % 6, n = n_c / 6, g0 = m / 3;
    double acc = bias[static_cast<size_t>(m)];
    for (int64_t c = 0; c < 2; ++c) {
      for (int64_t kd = 0; kd < 3; ++kd)
        for (int64_t kh = 0; kh < 2; ++kh)
          for (int64_t kw = 0; kw < 3; ++kw) {
            const int64_t d = od * strides[0] - pads[0] + kd * dil[0],
                          h = oh * strides[1] - pads[1] + kh * dil[1],
                          w_ = ow * strides[2] - pads[2] + kw * dil[2];
            if (d < 0 || d >= xs[2] || h < 0 || h >= xs[3] || w_ < 0 || w_ >= xs[4]) continue;
            acc += X(n, g0 * 2 + c, d, h, w_) *
                   w[static_cast<size_t>((((m * 2 + c) * 3 + kd) * 2 + kh) * 3 + kw)];
          }
    }
    ASSERT_NEAR(out[0].load(i), acc, 1e-4) << i;
  }
  // Max pooling with ceil_mode: windows past the end keep their real elements.
  const Shape ms = out[1].shape();
  ASSERT_EQ(ms, (Shape{2, 4, 3, 4, 4}));
  for (int64_t i = 0; i < out[1].numel(); ++i) {
    const auto [n_c, od, oh, ow] = coords(i, ms);
    const int64_t c = n_c % 4, n = n_c / 4;
    double best = -INFINITY;
    for (int64_t kd = 0; kd < 2; ++kd)
      for (int64_t kh = 0; kh < 3; ++kh)
        for (int64_t kw = 0; kw < 2; ++kw) {
          const int64_t d = od * 2 - 1 + kd, h = oh * 2 - 1 + kh, w_ = ow * 2 + kw;
          if (d >= 0 && d < xs[2] && h >= 0 && h < xs[3] && w_ >= 0 && w_ < xs[4])
            best = std::max(best, X(n, c, d, h, w_));
        }
    ASSERT_EQ(out[1].load(i), best) << i;
  }
  // Average pooling, pads not counted.
  const Shape ps = out[2].shape();
  ASSERT_EQ(ps, (Shape{2, 4, 5, 6, 7}));
  for (int64_t i = 0; i < out[2].numel(); ++i) {
    const auto [n_c, od, oh, ow] = coords(i, ps);
    const int64_t c = n_c % 4, n = n_c / 4;
    double sum = 0;
    int count = 0;
    for (int64_t kd = 0; kd < 3; ++kd)
      for (int64_t kh = 0; kh < 2; ++kh)
        for (int64_t kw = 0; kw < 2; ++kw) {
          const int64_t d = od - 1 + kd, h = oh + kh, w_ = ow - 1 + kw;
          if (d >= 0 && d < xs[2] && h >= 0 && h < xs[3] && w_ >= 0 && w_ < xs[4]) {
            sum += X(n, c, d, h, w_);
            ++count;
          }
        }
    ASSERT_NEAR(out[2].load(i), sum / count, 1e-5) << i;
  }
}

}  // namespace
}  // namespace kiln

namespace kiln {
namespace {

// If: a condition known when the model loads (exporters test shapes this way) inlines the
// chosen branch; one computed at run time is refused naming the construct.
TEST(OnnxOps, IfWithALoadTimeConditionInlinesItsBranch) {
  auto model = [](bool runtime_condition) {
    ModelBuilder b;
    b.input("x", {2, 3});
    b.node("Shape", {"x"}, {"s"});
    b.ints_initializer("two", {2});
    b.ints_initializer("zero", {0});
    set_int(b.node("Gather", {"s", "zero"}, {"rows"}), "axis", 0);
    if (runtime_condition) {
      b.node("ReduceSum", {"x"}, {"total"});
      b.initializer("z", {}, {0.0f});
      b.node("Greater", {"total", "z"}, {"cond"});
    } else {
      b.node("Equal", {"rows", "two"}, {"cond1"});
      b.node("Squeeze", {"cond1"}, {"cond"});
    }
    auto* n = b.node("If", {"cond"}, {"y"});
    for (const char* branch : {"then_branch", "else_branch"}) {
      auto* a = n->add_attribute();
      a->set_name(branch);
      a->set_type(onnx::AttributeProto::GRAPH);
      auto* g = a->mutable_g();
      g->set_name(branch);
      auto* node = g->add_node();
      node->set_op_type(branch == std::string("then_branch") ? "Relu" : "Neg");
      node->add_input("x");  // from the enclosing graph
      node->add_output(std::string(branch) + "_out");
      auto* out = g->add_output();
      out->set_name(std::string(branch) + "_out");
    }
    b.output("y", {2, 3});
    return b.bytes();
  };
  Graph g = parse_onnx_model(model(false), "if.onnx", ".");
  Tensor x = Tensor::from_doubles(DType::kFloat32, {2, 3}, {-1, 2, -3, 4, -5, 6});
  EXPECT_EQ(compile(g)({x})[0].to_doubles(), (std::vector<double>{0, 2, 0, 4, 0, 6}));  // Relu
  const std::string m =
      error_message<UnsupportedError>([&] { parse_onnx_model(model(true), "if.onnx", "."); });
  EXPECT_NE(m.find("(If): If with a condition known only at run time"), std::string::npos) << m;
}

}  // namespace
}  // namespace kiln

namespace kiln {
namespace {

// Rows of `idx` (rank, count) as flat row-major positions in `shape`.
std::vector<int64_t> flat_positions(const Tensor& idx, const Shape& shape) {
  std::vector<int64_t> out;
  const int64_t count = idx.shape()[1];
  for (int64_t k = 0; k < count; ++k) {
    int64_t flat = 0;
    for (size_t d = 0; d < shape.size(); ++d) {
      flat = flat * shape[d] + idx.load_int(static_cast<int64_t>(d) * count + k);
    }
    out.push_back(flat);
  }
  return out;
}

// NonZero of a tensor computed at run time: its count depends on the values, so the model
// runs in stages (a prefix computes the mask, the host finds its indices, the rest takes them
// as an input of dynamic size): one compiled module serves every count, zero included.
TEST(NonZero, ComputedMasksRunInStagesWithOneModuleForEveryCount) {
  // x[x > 0] * 2 as PyTorch exports it (NonZero -> Transpose -> GatherND), and the positions
  // among those picked values that are not 1 (a NonZero after the first one's result).
  ModelBuilder b;
  b.input("x", {-1, 5});
  b.initializer("zero", {}, {0.0F});
  b.initializer("one", {}, {1.0F});
  b.initializer("two", {}, {2.0F});
  b.node("Greater", {"x", "zero"}, {"mask"});
  b.node("NonZero", {"mask"}, {"idx"}, "pick");
  b.node("Transpose", {"idx"}, {"idx_t"});
  b.node("GatherND", {"x", "idx_t"}, {"vals"});
  b.node("Mul", {"vals", "two"}, {"y"});
  b.node("Sub", {"vals", "one"}, {"off"});
  b.node("NonZero", {"off"}, {"not_one"}, "again");
  b.output("y", {-2});
  b.output("idx", {2, -2}, onnx::TensorProto::INT64);
  b.output("not_one", {1, -3}, onnx::TensorProto::INT64);
  const std::filesystem::path path =
      std::filesystem::path(testing::temp_dir("nonzero")) / "mask.onnx";
  std::ofstream(path, std::ios::binary) << b.bytes();

  // Loaded directly, the loader names the node and the tensor it needs.
  const std::string direct = error_message<UnsupportedError>([&] { load_onnx_model(path); });
  EXPECT_NE(direct.find("node 1 'pick' (NonZero): NonZero of 'mask', a tensor known only at run "
                        "time"),
            std::string::npos)
      << direct;

  ModelFunction f(path);
  const float nan = std::nanf("");
  const float inf = std::numeric_limits<float>::infinity();
  // NaN and -0.0 are not > 0; 1.0 is picked by the mask but not by the second NonZero.
  const std::vector<std::vector<float>> cases{
      {1.0F, -2.0F, nan, -0.0F, 3.0F, 0.0F, inf, 1.0F, -inf, 0.5F, 2.0F, -1.0F, 7.0F, 1.0F, 0.25F},
      {-1.0F, -0.0F, 0.0F, nan, -inf},  // nothing picked: counts of zero
      {4.0F, 1.0F, 1.0F, 1.0F, 9.0F, 5.0F, 6.0F, 1.0F, 8.0F, 3.0F}};
  for (const auto& values : cases) {
    const int64_t rows = static_cast<int64_t>(values.size()) / 5;
    std::vector<double> as_double(values.begin(), values.end());
    Tensor x = Tensor::from_doubles(DType::kFloat32, {rows, 5}, as_double);
    auto out = f({x});
    ASSERT_EQ(out.size(), 3u);
    std::vector<int64_t> want_pos, want_not_one;
    std::vector<float> want_y;
    for (size_t i = 0; i < values.size(); ++i) {
      if (!(values[i] > 0)) continue;
      if (values[i] != 1.0F) want_not_one.push_back(static_cast<int64_t>(want_y.size()));
      want_pos.push_back(static_cast<int64_t>(i));
      want_y.push_back(values[i] * 2);
    }
    const auto count = static_cast<int64_t>(want_pos.size());
    ASSERT_EQ(out[1].shape(), (Shape{2, count}));
    EXPECT_EQ(flat_positions(out[1], {rows, 5}), want_pos);
    ASSERT_EQ(out[0].shape(), (Shape{count}));
    for (int64_t k = 0; k < count; ++k) EXPECT_EQ(out[0].load(k), want_y[static_cast<size_t>(k)]);
    ASSERT_EQ(out[2].shape(), (Shape{1, static_cast<int64_t>(want_not_one.size())}));
    EXPECT_EQ(flat_positions(out[2], {count}), want_not_one);
  }
  EXPECT_EQ(f.variants(), 1u);  // one module for every batch and count
  EXPECT_TRUE(f.value_inputs().empty());

  // A NonZero of a model input needs no prefix; of a known value, it folds at load time.
  ModelBuilder c;
  c.input("m", {2, -1}, onnx::TensorProto::INT32);
  c.node("NonZero", {"m"}, {"where"});
  c.output("where", {2, -1}, onnx::TensorProto::INT64);
  c.initializer("k", {5}, {0.0F, 3.0F, -0.0F, nan, 0.0F});
  c.node("NonZero", {"k"}, {"kept"});
  c.output("kept", {1, 2}, onnx::TensorProto::INT64);
  const std::filesystem::path direct_path =
      std::filesystem::path(testing::temp_dir("nonzero")) / "input.onnx";
  std::ofstream(direct_path, std::ios::binary) << c.bytes();
  ModelFunction g(direct_path);
  auto r = g({Tensor::from_doubles(DType::kInt32, {2, 3}, {0, 5, 0, -1, 0, 2})});
  ASSERT_EQ(r[0].shape(), (Shape{2, 3}));
  EXPECT_EQ(flat_positions(r[0], {2, 3}), (std::vector<int64_t>{1, 3, 5}));
  ASSERT_EQ(r[1].shape(), (Shape{1, 2}));
  EXPECT_EQ(flat_positions(r[1], {5}), (std::vector<int64_t>{1, 3}));
}

// Compress by a condition the model computes (x's column sums > 0): the kept columns, found
// between stages, with one module for every count; along no axis the flattened input's.
TEST(Compress, ARunTimeConditionRunsInStages) {
  for (const bool flat : {false, true}) {
    ModelBuilder b;
    b.input("x", {3, 4});
    b.initializer("zero", {}, {0.0F});
    b.ints_initializer("axes", {0});
    set_int(b.node("ReduceSum", {"x", "axes"}, {"sums"}), "keepdims", 0);
    b.node("Greater", {"sums", "zero"}, {"keep"});
    auto* c = b.node("Compress", {"x", "keep"}, {"y"}, "pick");
    if (!flat) set_int(c, "axis", 1);
    b.output("y", flat ? std::vector<int64_t>{-1} : std::vector<int64_t>{3, -1});
    const std::filesystem::path path =
        std::filesystem::path(testing::temp_dir("compress")) / (flat ? "flat.onnx" : "axis.onnx");
    std::ofstream(path, std::ios::binary) << b.bytes();
    ModelFunction f(path);
    const std::vector<std::vector<double>> cases{
        {1, -2, 3, 0, 4, 5, -6, 0, 1, -9, 2, -0.0},  // columns 0 and 2 kept
        {-1, -2, -3, -4, 0, 0, 0, 0, 0, 0, 0, 0},    // none
        {1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3}};       // all
    for (const auto& v : cases) {
      std::vector<int64_t> kept;
      for (int64_t j = 0; j < 4; ++j) {
        if (v[static_cast<size_t>(j)] + v[static_cast<size_t>(4 + j)] +
                v[static_cast<size_t>(8 + j)] >
            0)
          kept.push_back(j);
      }
      std::vector<double> want;
      if (flat) {
        for (int64_t j : kept) want.push_back(v[static_cast<size_t>(j)]);  // positions < 4 of x
      } else {
        for (int64_t r = 0; r < 3; ++r)
          for (int64_t j : kept) want.push_back(v[static_cast<size_t>(r * 4 + j)]);
      }
      const Tensor y = f({Tensor::from_doubles(DType::kFloat32, {3, 4}, v)}).at(0);
      const auto count = static_cast<int64_t>(kept.size());
      EXPECT_EQ(y.shape(), flat ? Shape{count} : (Shape{3, count}));
      EXPECT_EQ(y.to_doubles(), want);
    }
    EXPECT_EQ(f.variants(), 1u);
  }
}

// NonMaxSuppression on hand-computed boxes: ties keep the lower index first, a NaN score is
// never kept, negative scores are, a box of zero area suppresses nothing, corners may come in
// either order, classes and batches are apart, and center_point_box reads [x, y, w, h].
TEST(NonMaxSuppression, KeepsBoxesByScoreAndOverlapAsOnnxDefinesIt) {
  const double nan = std::nan("");
  // [y1, x1, y2, x2]: b1 and b5 overlap b0 (IoU 0.82 and 0.90), b2 is b0 with its corners
  // swapped, b4 has no area.
  const std::vector<double> corners{0, 0,  1, 1,  0, 0.1, 1, 1.1, 1, 1,  0, 0,
                                    0, 10, 1, 11, 0, 20,  0, 21, 0, 0.05, 1, 1.05};
  const Tensor boxes = Tensor::from_doubles(DType::kFloat32, {1, 6, 4}, corners);
  // Class 0: b4 0.95, b0 and b5 tie at 0.9, b1 0.8, b3 -0.5, b2 NaN. Class 1: b2 (b0's box)
  // first, then b5 0.5, b3 0.3, b1 0.2, b0 0.1.
  const Tensor scores = Tensor::from_doubles(
      DType::kFloat32, {1, 2, 6}, {0.9, 0.8, nan, -0.5, 0.95, 0.9, 0.1, 0.2, 0.9, 0.3, nan, 0.5});
  auto rows = [](const Tensor& t) {
    std::vector<int64_t> v;
    for (int64_t i = 0; i < t.numel(); ++i) v.push_back(t.load_int(i));
    return v;
  };
  NmsParams p;
  p.max_per_class = 3;
  p.iou_threshold = 0.5;
  EXPECT_EQ(rows(non_max_suppression(boxes, scores, p)),
            (std::vector<int64_t>{0, 0, 4, 0, 0, 0, 0, 0, 3,  // b4, b0, then b3 (b5, b1 hit b0)
                                  0, 1, 2, 0, 1, 3}));        // b2, b3 (b5, b1, b0 hit b2)
  p.score_threshold = 0.0;  // -0.5 is dropped; 0.1 stays
  p.max_per_class = 10;
  EXPECT_EQ(rows(non_max_suppression(boxes, scores, p)),
            (std::vector<int64_t>{0, 0, 4, 0, 0, 0, 0, 1, 2, 0, 1, 3}));
  p.max_per_class = 0;  // ONNX's default keeps nothing
  EXPECT_EQ(non_max_suppression(boxes, scores, p).shape(), (Shape{0, 3}));
  // The same boxes as centres and sizes.
  std::vector<double> centred;
  for (size_t i = 0; i < corners.size(); i += 4) {
    const double y0 = std::min(corners[i], corners[i + 2]), y1 = std::max(corners[i], corners[i + 2]);
    const double x0 = std::min(corners[i + 1], corners[i + 3]),
                 x1 = std::max(corners[i + 1], corners[i + 3]);
    centred.insert(centred.end(), {(x0 + x1) / 2, (y0 + y1) / 2, x1 - x0, y1 - y0});
  }
  p.max_per_class = 3;
  p.score_threshold.reset();
  p.center_point_box = true;
  EXPECT_EQ(rows(non_max_suppression(Tensor::from_doubles(DType::kFloat32, {1, 6, 4}, centred),
                                     scores, p)),
            (std::vector<int64_t>{0, 0, 4, 0, 0, 0, 0, 0, 3, 0, 1, 2, 0, 1, 3}));
  EXPECT_TRUE(testing::has(
      testing::error_of([&] {
        non_max_suppression(boxes, Tensor::zeros(DType::kFloat32, {1, 2, 5}), p);
      }),
      "must be (batches, classes, boxes)"));
}

// The kept boxes are indexed by their left edge; against a plain greedy NMS that tests every
// kept box, on thousands of boxes in a batched NMS's layout (each class's boxes offset apart),
// wide boxes among narrow ones, boxes of no area, NaN corners and tied scores.
TEST(NonMaxSuppression, IndexedSearchMatchesTestingEveryKeptBox) {
  std::mt19937 rng(17);
  std::uniform_real_distribution<double> u(0, 1);
  const int64_t n = 3000;
  std::vector<double> corners, score;
  for (int64_t i = 0; i < n; ++i) {
    const double offset = 1000.0 * static_cast<double>(i % 7);  // seven classes, apart
    const double w = i % 97 == 0 ? 600 * u(rng) : 40 * u(rng), h = 40 * u(rng);
    const double y = offset + 300 * u(rng), x = offset + 300 * u(rng);
    corners.insert(corners.end(), {y, x, y + h, x + (i % 53 == 0 ? 0 : w)});
    score.push_back(std::round(u(rng) * 50) / 50);  // ties
  }
  corners[4 * 11 + 1] = std::nan("");
  const Tensor boxes = Tensor::from_doubles(DType::kFloat32, {1, n, 4}, corners);
  const Tensor scores = Tensor::from_doubles(DType::kFloat32, {1, 1, n}, score);
  NmsParams p;
  p.max_per_class = n;
  p.iou_threshold = 0.3;
  // The plain algorithm, on the same float32 values.
  std::vector<int64_t> order(n);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](int64_t a, int64_t b) { return scores.load(a) > scores.load(b); });
  std::vector<std::array<double, 4>> kept;
  std::vector<int64_t> want;
  for (int64_t i : order) {
    const double y0 = boxes.load(4 * i), x0 = boxes.load(4 * i + 1), y1 = boxes.load(4 * i + 2),
                 x1 = boxes.load(4 * i + 3);
    const std::array<double, 4> b{std::min(x0, x1), std::min(y0, y1), std::max(x0, x1),
                                  std::max(y0, y1)};
    bool hit = false;
    for (const auto& k : kept) {
      const double iw = std::min(b[2], k[2]) - std::max(b[0], k[0]);
      const double ih = std::min(b[3], k[3]) - std::max(b[1], k[1]);
      if (!(iw > 0) || !(ih > 0)) continue;
      const double a = (b[2] - b[0]) * (b[3] - b[1]), c = (k[2] - k[0]) * (k[3] - k[1]);
      if (!(a > 0) || !(c > 0)) continue;
      hit = hit || iw * ih / (a + c - iw * ih) > p.iou_threshold;
    }
    if (hit) continue;
    kept.push_back(b);
    want.insert(want.end(), {0, 0, i});
  }
  const Tensor got = non_max_suppression(boxes, scores, p);
  std::vector<int64_t> rows;
  for (int64_t i = 0; i < got.numel(); ++i) rows.push_back(got.load_int(i));
  EXPECT_GT(want.size(), 300u);
  EXPECT_LT(want.size(), 3u * static_cast<size_t>(n));  // some boxes were suppressed
  EXPECT_EQ(rows, want);
}

// NonMaxSuppression of boxes and scores computed by the model runs in stages as NonZero does:
// a prefix computes them, the host keeps boxes, the rest gathers the kept boxes; one module
// serves every count, none included.
TEST(NonMaxSuppression, ComputedScoresRunInStagesWithOneModuleForEveryCount) {
  ModelBuilder b;
  b.input("boxes", {1, 4, 4});
  b.input("logits", {1, 1, 4});
  b.ints_initializer("max", {4});
  b.initializer("iou", {1}, {0.5F});
  b.initializer("min_score", {1}, {0.5F});
  b.ints_initializer("box_column", {2});
  b.node("Sigmoid", {"logits"}, {"scores"});
  b.node("NonMaxSuppression", {"boxes", "scores", "max", "iou", "min_score"}, {"kept"}, "nms");
  b.node("Gather", {"kept", "box_column"}, {"which"}, "column");
  set_int(b.g->mutable_node(2), "axis", 1);
  b.node("Squeeze", {"boxes"}, {"flat"}, "flat");
  b.node("Gather", {"flat", "which"}, {"picked"}, "pick");
  b.output("picked", {-2, 1, 4});
  const std::filesystem::path path = std::filesystem::path(testing::temp_dir("nms")) / "nms.onnx";
  std::ofstream(path, std::ios::binary) << b.bytes();
  const std::string direct = error_message<UnsupportedError>([&] { load_onnx_model(path); });
  EXPECT_NE(direct.find("node 1 'nms' (NonMaxSuppression): NonMaxSuppression of boxes and scores "
                        "known only at run time"),
            std::string::npos)
      << direct;
  ModelFunction f(path);
  const Tensor boxes = Tensor::from_doubles(
      DType::kFloat32, {1, 4, 4}, {0, 0, 1, 1, 0, 0.1, 1, 1.1, 0, 5, 1, 6, 0, 9, 2, 10});
  // Scores above 0.5 once sigmoided: 2 and 0.5 (b1 overlaps b0), -1 and 3 -> b3, b0 kept;
  // all negative -> none.
  const std::vector<std::pair<std::vector<double>, std::vector<int64_t>>> cases{
      {{2.0, 0.5, -1.0, 3.0}, {3, 0}}, {{-1, -2, -3, -4}, {}}, {{1, 1, 1, 1}, {0, 2, 3}}};
  for (const auto& [logits, kept] : cases) {
    auto out = f({boxes, Tensor::from_doubles(DType::kFloat32, {1, 1, 4}, logits)});
    ASSERT_EQ(out.size(), 1u);
    ASSERT_EQ(out[0].shape(), (Shape{static_cast<int64_t>(kept.size()), 1, 4}));
    for (size_t k = 0; k < kept.size(); ++k) {
      for (int64_t j = 0; j < 4; ++j)
        EXPECT_EQ(out[0].load(static_cast<int64_t>(k) * 4 + j), boxes.load(kept[k] * 4 + j));
    }
  }
  EXPECT_EQ(f.variants(), 1u);
}

}  // namespace
}  // namespace kiln
