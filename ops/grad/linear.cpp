// Gradients of the reductions, softmax, layer norm and the matrix products.
#include "ops/broadcast.h"
#include "ops/gemm.h"
#include "ops/grad/support.h"
#include "ops/layer_norm.h"
#include "ops/matmul.h"
#include "ops/reduce.h"
#include "ops/softmax.h"
#include "runtime/dtype.h"

namespace kiln {
namespace {

// x's dimensions with the reduced ones set to 1, as expressions over input `k`.
std::string kept_dims(const std::vector<bool>& mask, int k) {
  std::string s;
  for (size_t d = 0; d < mask.size(); ++d) {
    if (d) s += ";";
    s += mask[d] ? "1" : "#" + std::to_string(k) + "." + std::to_string(d);
  }
  return s;
}

Var expand_like(Var v, Var like) {
  if (v.type().dims == like.type().dims && like.type().is_static()) return v;
  return apply_dims("expand", {v, like}, {{"dims", dims_of_input(1, like.rank())}});
}

// The last two axes swapped.
Var swap_last(Var x) {
  std::vector<int64_t> perm;
  for (int i = 0; i < x.rank(); ++i) perm.push_back(i);
  std::swap(perm[perm.size() - 1], perm[perm.size() - 2]);
  return transpose(x, perm);
}

// x with a new axis of size 1 at `axis` (0 <= axis <= rank).
Var unsqueeze(Var x, int axis) {
  std::string dims;
  for (int d = 0, k = 0; d <= x.rank(); ++d) {
    if (d) dims += ";";
    dims += d == axis ? "1" : "#0." + std::to_string(k++);
  }
  return apply_dims("reshape", {x}, {{"dims", dims}});
}

}  // namespace

std::vector<Variable*> Reduce::grad(const GradArgs& args) const {
  Var x = grad_in(args, 0), y = grad_out(args, 0), g = grad_of_out(args, 0);
  const auto mask = reduced_mask(x.rank());
  std::vector<int64_t> axes;
  for (size_t d = 0; d < mask.size(); ++d) {
    if (mask[d]) axes.push_back(static_cast<int64_t>(d));
  }
  // The gradient and the result with the reduced axes kept (size 1).
  Var g_keep = keepdims_ ? g : apply_dims("reshape", {g, x}, {{"dims", kept_dims(mask, 1)}});
  Var y_keep = keepdims_ ? y : apply_dims("reshape", {y, x}, {{"dims", kept_dims(mask, 1)}});
  Var gx;
  switch (kind_) {
    case ReduceKind::kSum:
      gx = expand_like(g_keep, x);
      break;
    case ReduceKind::kMean: {
      std::string count;
      for (int64_t a : axes) count += (count.empty() ? "" : "*") + ("#0." + std::to_string(a));
      Var n = count.empty() ? lit_like(x, 1.0)
                            : apply("dim_values", {x},
                                    {{"dims", count},
                                     {"dtype", std::string(dtype_name(x.dtype()))},
                                     {"scalar", int64_t(1)}});
      gx = expand_like(g_keep / n, x);
      break;
    }
    case ReduceKind::kMax:
    case ReduceKind::kMin: {
      // Ties share the gradient evenly, as the subgradient PyTorch picks.
      Var hit = cast(eq(x, y_keep), x.dtype());
      Var ties = sum(hit, axes, /*keepdims=*/true);
      gx = hit * (g_keep / ties);
      break;
    }
    case ReduceKind::kProd:
      gx = expand_like(g_keep * y_keep, x) / x;
      break;
  }
  return {gx.var()};
}

std::vector<Variable*> Softmax::grad(const GradArgs& args) const {
  Var y = grad_out(args, 0), g = grad_of_out(args, 0);
  const int64_t axis = normalize_axis(axis_, y.rank(), name());
  Var gx = log_ ? g - exp(y) * sum(g, {axis}, true) : y * (g - sum(g * y, {axis}, true));
  return {gx.var()};
}

// y = d * inv with d = x - mean(x), inv = 1 / sqrt(mean(d^2) + eps) over the trailing axes:
// dx = inv * (g - mean(g) - y * mean(g * y)). inv is recomputed from x (not stored).
std::vector<Variable*> LayerNorm::grad(const GradArgs& args) const {
  Var x = grad_in(args, 0), g = grad_of_out(args, 0);
  const int axis = normalize_axis(axis_, x.rank(), name());
  std::vector<int64_t> axes;
  for (int d = axis; d < x.rank(); ++d) axes.push_back(d);
  Var d = x - mean(x, axes, true);
  Var inv = reciprocal(sqrt(mean(d * d, axes, true) + epsilon_));
  Var y = d * inv;
  Var gx = inv * (g - mean(g, axes, true) - y * mean(g * y, axes, true));
  return {gx.var()};
}

std::vector<Variable*> MatMul::grad(const GradArgs& args) const {
  Var a = grad_in(args, 0), b = grad_in(args, 1), g = grad_of_out(args, 0);
  std::vector<Variable*> out(2, nullptr);
  if (a.rank() == 2 && b.rank() == 2) {
    // GEMM reads the transposes in place: no transposed copies.
    if (args.wanted[0]) out[0] = gemm(g, b, 1.0, false, true).var();
    if (args.wanted[1]) out[1] = gemm(a, g, 1.0, true, false).var();
    return out;
  }
  // Vectors become matrices (a row, b a column) and g gets the axis they dropped back.
  Var a2 = a.rank() == 1 ? unsqueeze(a, 0) : a;
  Var b2 = b.rank() == 1 ? unsqueeze(b, 1) : b;
  Var g2 = g;
  if (a.rank() == 1) g2 = unsqueeze(g2, std::max(g2.rank() - (b.rank() == 1 ? 0 : 1), 0));
  if (b.rank() == 1) g2 = unsqueeze(g2, g2.rank());
  if (args.wanted[0]) out[0] = reshape_like(sum_to(matmul(g2, swap_last(b2)), a2), a).var();
  if (args.wanted[1]) out[1] = reshape_like(sum_to(matmul(swap_last(a2), g2), b2), b).var();
  return out;
}

std::vector<Variable*> Gemm::grad(const GradArgs& args) const {
  if (packed_n_ > 0) {
    for (size_t i = 0; i < args.wanted.size(); ++i) {
      if (args.wanted[i]) {
        not_differentiable(args, static_cast<int>(i),
                           "its weights are packed (a rewrite's output): take the gradient of "
                           "the graph as built");
      }
    }
  }
  Var a = grad_in(args, 0), b = grad_in(args, 1), g = grad_of_out(args, 0);
  std::vector<Variable*> out(args.node.inputs.size(), nullptr);
  // Y = alpha op(A) op(B) + beta C.
  if (args.wanted[0]) {
    out[0] = (trans_a_ ? gemm(b, g, alpha_, trans_b_, true) : gemm(g, b, alpha_, false, !trans_b_))
                 .var();
  }
  if (args.wanted[1]) {
    out[1] = (trans_b_ ? gemm(g, a, alpha_, true, trans_a_) : gemm(a, g, alpha_, !trans_a_, false))
                 .var();
  }
  if (out.size() > 2 && args.wanted[2]) {
    Var c = grad_in(args, 2);
    out[2] = sum_to(beta_ == 1.0 ? g : g * beta_, c).var();
  }
  return out;
}

}  // namespace kiln
