#pragma once
// The C++ builder API: graphs that read like the math.
//
//   Graph g("mlp");
//   Var x = input(g, "x", DType::kFloat32, {kDynamic, 784});
//   Var y = softmax(relu(matmul(x, w) + b));
//   g.set_outputs({y.var()});
//
// Every call runs the op's type inference at once, so a mismatch throws where it was made.
#include <initializer_list>
#include <string>
#include <vector>

#include "graph/graph.h"

namespace kiln {

class Var {
 public:
  Var() = default;
  Var(Graph* graph, Variable* var) : graph_(graph), var_(var) {}
  Graph& graph() const;
  Variable* var() const { return var_; }
  operator Variable*() const { return var_; }  // NOLINT: lets Var go where Variable* is wanted
  const TensorType& type() const { return var_->type; }
  DType dtype() const { return var_->type.dtype; }
  int rank() const { return var_->type.rank(); }

 private:
  Graph* graph_ = nullptr;
  Variable* var_ = nullptr;
};

Var input(Graph& g, const std::string& name, DType dtype, std::vector<int64_t> dims);
// A constant of the program: its value is part of the cache key and rewrites may read it.
Var constant(Graph& g, const Tensor& value, const std::string& name = "");
// A weight: bound at run time, never in the code or the key; one module serves any values.
Var parameter(Graph& g, const Tensor& value, const std::string& name);
Var scalar(Graph& g, DType dtype, double value);  // rank 0, inlined into elementwise code

// Applies any op by name (as the model loaders do).
Var apply(const std::string& op, const std::vector<Var>& inputs, const Attrs& props = {});
std::vector<Var> apply_multi(const std::string& op, const std::vector<Var>& inputs,
                             const Attrs& props = {});
// The same in graph g, where the op may take no inputs (a generator: random draws).
Var apply_in(Graph& g, const std::string& op, const std::vector<Var>& inputs,
             const Attrs& props = {});

Var operator+(Var a, Var b);
Var operator-(Var a, Var b);
Var operator*(Var a, Var b);
Var operator/(Var a, Var b);
Var operator+(Var a, double b);
Var operator-(Var a, double b);
Var operator*(Var a, double b);
Var operator/(Var a, double b);
Var operator+(double a, Var b);
Var operator-(double a, Var b);
Var operator*(double a, Var b);
Var operator/(double a, Var b);
Var operator-(Var a);

Var add(Var a, Var b);
Var sub(Var a, Var b);
Var mul(Var a, Var b);
Var div(Var a, Var b);
// a / b given r = 1/b rounded (the simplify pass's form of a quantizer's division).
Var div_rcp(Var a, Var b, Var r);
Var pow(Var a, Var b);
Var mod(Var a, Var b);
Var fmod(Var a, Var b);  // C's fmod: the sign of the dividend (ONNX Mod with fmod=1)
Var neg(Var a);
Var abs(Var a);
Var sign(Var a);
Var exp(Var a);
Var log(Var a);
Var log1p(Var a);
Var expm1(Var a);
Var sqrt(Var a);
Var reciprocal(Var a);
Var sin(Var a);
Var cos(Var a);
Var sinh(Var a);
Var cosh(Var a);
Var asin(Var a);
Var acos(Var a);
Var atan(Var a);
Var asinh(Var a);
Var acosh(Var a);
Var atanh(Var a);
Var tanh(Var a);
Var sigmoid(Var a);
Var relu(Var a);
Var leaky_relu(Var a, double alpha = 0.01);
Var elu(Var a, double alpha = 1.0);
Var softplus(Var a);
Var erf(Var a);
Var gelu(Var a);
Var floor(Var a);
Var ceil(Var a);
Var round(Var a);
Var maximum(Var a, Var b);
Var minimum(Var a, Var b);
// Integer ops on the bits as unsigned 64-bit values (ONNX BitShift; uint64 stored as int64).
Var shift_left(Var a, Var b);
Var shift_right(Var a, Var b);
Var maximum_u(Var a, Var b);
Var minimum_u(Var a, Var b);
Var mod_u(Var a, Var b);
Var clip(Var x, Var lo, Var hi);
Var clip(Var x, double lo, double hi);
Var lt(Var a, Var b);
Var le(Var a, Var b);
Var gt(Var a, Var b);
Var ge(Var a, Var b);
Var eq(Var a, Var b);
Var ne(Var a, Var b);
Var logical_and(Var a, Var b);
Var logical_or(Var a, Var b);
Var logical_not(Var a);
Var where(Var cond, Var a, Var b);
Var cast(Var a, DType to);

Var sum(Var x, std::vector<int64_t> axes = {}, bool keepdims = false);
Var mean(Var x, std::vector<int64_t> axes = {}, bool keepdims = false);
Var max(Var x, std::vector<int64_t> axes = {}, bool keepdims = false);
Var min(Var x, std::vector<int64_t> axes = {}, bool keepdims = false);
Var prod(Var x, std::vector<int64_t> axes = {}, bool keepdims = false);

Var matmul(Var a, Var b);
Var gemm(Var a, Var b, double alpha = 1.0, bool trans_a = false, bool trans_b = false);
Var gemm(Var a, Var b, Var c, double alpha = 1.0, double beta = 1.0, bool trans_a = false,
         bool trans_b = false);
Var transpose(Var x, std::vector<int64_t> perm = {});
Var reshape(Var x, std::vector<int64_t> shape);
Var flatten(Var x, int64_t axis = 1);
Var concat(const std::vector<Var>& xs, int64_t axis);
Var softmax(Var x, int64_t axis = -1);
Var log_softmax(Var x, int64_t axis = -1);

}  // namespace kiln
