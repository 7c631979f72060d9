// The optimizers of ONNX's training domain (ai.onnx.preview.training): Adagrad, Momentum and
// Adam, each one update of n tensors, as compositions of elementwise ops. R (the learning
// rate) and T (the update count) are scalars computed in the tensors' dtype.
#include "frontend/onnx/onnx_op_support.h"
#include "util/error.h"

namespace kiln::onnx_import {
namespace {

// The n optimized tensors and their `groups` companions (G, V, H, ...), after R and T.
int tensor_count(const onnx::NodeProto& n, int groups) {
  const int rest = n.input_size() - 2;
  if (rest <= 0 || rest % groups != 0) {
    throw UserError(n.op_type() + " takes R, T and " + std::to_string(groups) +
                    " inputs per optimized tensor; it has " + std::to_string(n.input_size()) +
                    " inputs");
  }
  const int count = rest / groups;
  if (n.output_size() > count * (groups - 1)) {
    throw UserError(n.op_type() + " gives " + std::to_string(count * (groups - 1)) +
                    " outputs; it has " + std::to_string(n.output_size()));
  }
  return count;
}

// R and T as scalars of x's dtype.
std::pair<Var, Var> rate_and_count(OnnxImporter& im, const onnx::NodeProto& n, Var x) {
  Var r = im.in(n, 0), t = im.in(n, 1);
  if (r.type().rank() > 0 && r.type().static_numel() != 1)
    throw UserError("R must be a scalar, got " + r.type().to_string());
  if (t.type().rank() > 0 && t.type().static_numel() != 1)
    throw UserError("T must be a scalar, got " + t.type().to_string());
  return {cast(reshape(r, {}), x.dtype()), cast(reshape(t, {}), x.dtype())};
}

Outs convert_adagrad(OnnxImporter& im, const onnx::NodeProto& n, const Attrs& a) {
  const int count = tensor_count(n, 3);
  const double decay = attr_float(a, "decay_factor", 0.0), eps = attr_float(a, "epsilon", 1e-6),
               norm = attr_float(a, "norm_coefficient", 0.0);
  Outs xs, hs;
  for (int k = 0; k < count; ++k) {
    Var x = im.in(n, 2 + k), g = im.in(n, 2 + count + k), h = im.in(n, 2 + 2 * count + k);
    auto [r, t] = rate_and_count(im, n, x);
    Var rate = r / (t * decay + 1.0);
    Var g_reg = x * norm + g;
    Var h_new = h + g_reg * g_reg;
    xs.push_back(x - rate * g_reg / (sqrt(h_new) + eps));
    hs.push_back(h_new);
  }
  xs.insert(xs.end(), hs.begin(), hs.end());
  return xs;
}

Outs convert_momentum(OnnxImporter& im, const onnx::NodeProto& n, const Attrs& a) {
  const int count = tensor_count(n, 3);
  const double alpha = attr_float(a, "alpha"), beta = attr_float(a, "beta"),
               norm = attr_float(a, "norm_coefficient");
  const std::string mode = attr_string(a, "mode");
  if (mode != "standard" && mode != "nesterov")
    throw UserError("mode must be 'standard' or 'nesterov', got '" + mode + "'");
  Outs xs, vs;
  for (int k = 0; k < count; ++k) {
    Var x = im.in(n, 2 + k), g = im.in(n, 2 + count + k), v = im.in(n, 2 + 2 * count + k);
    auto [r, t] = rate_and_count(im, n, x);
    Var g_reg = x * norm + g;
    // The first update (T = 0) takes the whole gradient.
    Var beta_adj = where(gt(t, t * 0.0), t * 0.0 + beta, t * 0.0 + 1.0);
    Var v_new = v * alpha + beta_adj * g_reg;
    xs.push_back(mode == "standard" ? x - r * v_new : x - r * (g_reg + v_new * alpha));
    vs.push_back(v_new);
  }
  xs.insert(xs.end(), vs.begin(), vs.end());
  return xs;
}

Outs convert_adam(OnnxImporter& im, const onnx::NodeProto& n, const Attrs& a) {
  const int count = tensor_count(n, 4);
  const double alpha = attr_float(a, "alpha", 0.9), beta = attr_float(a, "beta", 0.999),
               eps = attr_float(a, "epsilon", 1e-6), norm = attr_float(a, "norm_coefficient", 0.0),
               post = attr_float(a, "norm_coefficient_post", 0.0);
  Outs xs, vs, hs;
  for (int k = 0; k < count; ++k) {
    Var x = im.in(n, 2 + k), g = im.in(n, 2 + count + k), v = im.in(n, 2 + 2 * count + k),
        h = im.in(n, 2 + 3 * count + k);
    auto [r, t] = rate_and_count(im, n, x);
    Var g_reg = x * norm + g;
    Var v_new = v * alpha + g_reg * (1.0 - alpha);
    Var h_new = h * beta + g_reg * g_reg * (1.0 - beta);
    // Bias correction from the second update on (T > 0).
    Var zero = t * 0.0;
    Var corrected = r * sqrt(1.0 - pow(zero + beta, t)) / (1.0 - pow(zero + alpha, t));
    Var rate = where(gt(t, zero), corrected, r);
    xs.push_back((x - rate * (v_new / (sqrt(h_new) + eps))) * (1.0 - post));
    vs.push_back(v_new);
    hs.push_back(h_new);
  }
  xs.insert(xs.end(), vs.begin(), vs.end());
  xs.insert(xs.end(), hs.begin(), hs.end());
  return xs;
}

}  // namespace

void add_training_ops(OpTable& t) {
  t["ai.onnx.preview.training.Adagrad"] = {
      {"decay_factor", "epsilon", "norm_coefficient"}, nullptr, convert_adagrad};
  t["ai.onnx.preview.training.Momentum"] = {
      {"alpha", "beta", "mode", "norm_coefficient"}, nullptr, convert_momentum};
  t["ai.onnx.preview.training.Adam"] = {
      {"alpha", "beta", "epsilon", "norm_coefficient", "norm_coefficient_post"},
      nullptr,
      convert_adam};
}

}  // namespace kiln::onnx_import
