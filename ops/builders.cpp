#include "ops/builders.h"

#include "ops/registry.h"
#include "util/error.h"

namespace kiln {

Graph& Var::graph() const {
  if (!graph_) throw UserError("use of an empty Var");
  return *graph_;
}

Var input(Graph& g, const std::string& name, DType dtype, std::vector<int64_t> dims) {
  return Var(&g, g.add_input(name, TensorType{dtype, std::move(dims)}));
}

Var constant(Graph& g, const Tensor& value, const std::string& name) {
  return Var(&g, g.add_constant(value, name));
}

Var parameter(Graph& g, const Tensor& value, const std::string& name) {
  return Var(&g, g.add_parameter(value, name));
}

Var scalar(Graph& g, DType dtype, double value) {
  return Var(&g, g.add_constant(Tensor::scalar(dtype, value)));
}

std::vector<Var> apply_multi(const std::string& op, const std::vector<Var>& inputs,
                             const Attrs& props) {
  if (inputs.empty()) throw UserError(op + ": no inputs");
  Graph& g = inputs[0].graph();
  std::vector<Variable*> vars;
  for (const auto& v : inputs) {
    if (&v.graph() != &g) throw UserError(op + ": inputs come from different graphs");
    vars.push_back(v.var());
  }
  Node* node = g.add_node(OpRegistry::instance().create(op, props), vars);
  std::vector<Var> out;
  for (auto* v : node->outputs) out.emplace_back(&g, v);
  return out;
}

Var apply(const std::string& op, const std::vector<Var>& inputs, const Attrs& props) {
  return apply_multi(op, inputs, props).at(0);
}

Var apply_in(Graph& g, const std::string& op, const std::vector<Var>& inputs, const Attrs& props) {
  if (!inputs.empty()) {
    if (&inputs[0].graph() != &g) throw UserError(op + ": inputs come from another graph");
    return apply(op, inputs, props);
  }
  Node* node = g.add_node(OpRegistry::instance().create(op, props), {});
  return Var(&g, node->outputs.at(0));
}

namespace {
Var lit(const Var& like, double v) { return scalar(like.graph(), like.dtype(), v); }
Var reduce(const std::string& op, Var x, std::vector<int64_t> axes, bool keepdims) {
  return apply(op, {x}, {{"axes", std::move(axes)}, {"keepdims", int64_t(keepdims ? 1 : 0)}});
}
}  // namespace

Var operator+(Var a, Var b) { return add(a, b); }
Var operator-(Var a, Var b) { return sub(a, b); }
Var operator*(Var a, Var b) { return mul(a, b); }
Var operator/(Var a, Var b) { return div(a, b); }
Var operator+(Var a, double b) { return add(a, lit(a, b)); }
Var operator-(Var a, double b) { return sub(a, lit(a, b)); }
Var operator*(Var a, double b) { return mul(a, lit(a, b)); }
Var operator/(Var a, double b) { return div(a, lit(a, b)); }
Var operator+(double a, Var b) { return add(lit(b, a), b); }
Var operator-(double a, Var b) { return sub(lit(b, a), b); }
Var operator*(double a, Var b) { return mul(lit(b, a), b); }
Var operator/(double a, Var b) { return div(lit(b, a), b); }
Var operator-(Var a) { return neg(a); }

Var add(Var a, Var b) { return apply("add", {a, b}); }
Var sub(Var a, Var b) { return apply("sub", {a, b}); }
Var mul(Var a, Var b) { return apply("mul", {a, b}); }
Var div(Var a, Var b) { return apply("div", {a, b}); }
Var div_rcp(Var a, Var b, Var r) { return apply("div_rcp", {a, b, r}); }
Var pow(Var a, Var b) { return apply("pow", {a, b}); }
Var mod(Var a, Var b) { return apply("mod", {a, b}); }
Var fmod(Var a, Var b) { return apply("fmod", {a, b}); }
Var neg(Var a) { return apply("neg", {a}); }
Var abs(Var a) { return apply("abs", {a}); }
Var sign(Var a) { return apply("sign", {a}); }
Var exp(Var a) { return apply("exp", {a}); }
Var log(Var a) { return apply("log", {a}); }
Var log1p(Var a) { return apply("log1p", {a}); }
Var expm1(Var a) { return apply("expm1", {a}); }
Var sqrt(Var a) { return apply("sqrt", {a}); }
Var reciprocal(Var a) { return apply("reciprocal", {a}); }
Var sin(Var a) { return apply("sin", {a}); }
Var cos(Var a) { return apply("cos", {a}); }
Var sinh(Var a) { return apply("sinh", {a}); }
Var cosh(Var a) { return apply("cosh", {a}); }
Var asin(Var a) { return apply("asin", {a}); }
Var acos(Var a) { return apply("acos", {a}); }
Var atan(Var a) { return apply("atan", {a}); }
Var asinh(Var a) { return apply("asinh", {a}); }
Var acosh(Var a) { return apply("acosh", {a}); }
Var atanh(Var a) { return apply("atanh", {a}); }
Var tanh(Var a) { return apply("tanh", {a}); }
Var sigmoid(Var a) { return apply("sigmoid", {a}); }
Var relu(Var a) { return apply("relu", {a}); }
Var leaky_relu(Var a, double alpha) { return apply("leaky_relu", {a}, {{"alpha", alpha}}); }
Var elu(Var a, double alpha) { return apply("elu", {a}, {{"alpha", alpha}}); }
Var softplus(Var a) { return apply("softplus", {a}); }
Var erf(Var a) { return apply("erf", {a}); }
Var gelu(Var a) { return apply("gelu", {a}); }
Var floor(Var a) { return apply("floor", {a}); }
Var ceil(Var a) { return apply("ceil", {a}); }
Var round(Var a) { return apply("round", {a}); }
Var maximum(Var a, Var b) { return apply("maximum", {a, b}); }
Var minimum(Var a, Var b) { return apply("minimum", {a, b}); }
Var shift_left(Var a, Var b) { return apply("shift_left", {a, b}); }
Var shift_right(Var a, Var b) { return apply("shift_right", {a, b}); }
Var maximum_u(Var a, Var b) { return apply("maximum_u", {a, b}); }
Var minimum_u(Var a, Var b) { return apply("minimum_u", {a, b}); }
Var mod_u(Var a, Var b) { return apply("mod_u", {a, b}); }
Var clip(Var x, Var lo, Var hi) { return apply("clip", {x, lo, hi}); }
Var clip(Var x, double lo, double hi) { return clip(x, lit(x, lo), lit(x, hi)); }
Var lt(Var a, Var b) { return apply("lt", {a, b}); }
Var le(Var a, Var b) { return apply("le", {a, b}); }
Var gt(Var a, Var b) { return apply("gt", {a, b}); }
Var ge(Var a, Var b) { return apply("ge", {a, b}); }
Var eq(Var a, Var b) { return apply("eq", {a, b}); }
Var ne(Var a, Var b) { return apply("ne", {a, b}); }
Var logical_and(Var a, Var b) { return apply("logical_and", {a, b}); }
Var logical_or(Var a, Var b) { return apply("logical_or", {a, b}); }
Var logical_not(Var a) { return apply("logical_not", {a}); }
Var where(Var cond, Var a, Var b) { return apply("where", {cond, a, b}); }
Var cast(Var a, DType to) { return apply("cast", {a}, {{"to", std::string(dtype_name(to))}}); }

Var sum(Var x, std::vector<int64_t> axes, bool keepdims) {
  return reduce("reduce_sum", x, std::move(axes), keepdims);
}
Var mean(Var x, std::vector<int64_t> axes, bool keepdims) {
  return reduce("reduce_mean", x, std::move(axes), keepdims);
}
Var max(Var x, std::vector<int64_t> axes, bool keepdims) {
  return reduce("reduce_max", x, std::move(axes), keepdims);
}
Var min(Var x, std::vector<int64_t> axes, bool keepdims) {
  return reduce("reduce_min", x, std::move(axes), keepdims);
}
Var prod(Var x, std::vector<int64_t> axes, bool keepdims) {
  return reduce("reduce_prod", x, std::move(axes), keepdims);
}

Var matmul(Var a, Var b) { return apply("matmul", {a, b}); }
Var gemm(Var a, Var b, double alpha, bool trans_a, bool trans_b) {
  return apply("gemm", {a, b},
               {{"alpha", alpha}, {"transA", int64_t(trans_a)}, {"transB", int64_t(trans_b)}});
}
Var gemm(Var a, Var b, Var c, double alpha, double beta, bool trans_a, bool trans_b) {
  return apply("gemm", {a, b, c},
               {{"alpha", alpha},
                {"beta", beta},
                {"transA", int64_t(trans_a)},
                {"transB", int64_t(trans_b)}});
}
Var transpose(Var x, std::vector<int64_t> perm) {
  return apply("transpose", {x}, {{"perm", std::move(perm)}});
}
Var reshape(Var x, std::vector<int64_t> shape) {
  return apply("reshape", {x}, {{"shape", std::move(shape)}});
}
Var flatten(Var x, int64_t axis) { return apply("flatten", {x}, {{"axis", axis}}); }
Var concat(const std::vector<Var>& xs, int64_t axis) {
  return apply("concat", xs, {{"axis", axis}});
}
Var softmax(Var x, int64_t axis) { return apply("softmax", {x}, {{"axis", axis}}); }
Var log_softmax(Var x, int64_t axis) { return apply("log_softmax", {x}, {{"axis", axis}}); }

}  // namespace kiln
