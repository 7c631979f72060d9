// The ONNX importer's products, convolutions, pooling, normalisations, recurrent layers and losses.
#include <onnx/onnx_pb.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <functional>
#include <limits>
#include <map>
#include <tuple>

#include "frontend/onnx/nonzero.h"
#include "frontend/onnx/onnx_model.h"
#include "frontend/onnx/onnx_op_support.h"
#include "frontend/onnx/onnx_tensor.h"
#include "ops/broadcast.h"
#include "ops/registry.h"
#include "ops/window.h"
#include "util/error.h"
#include "util/strings.h"

namespace kiln::onnx_import {
namespace {

Outs convert_gemm(OnnxImporter& im, const onnx::NodeProto& n, const Attrs& a) {
  std::vector<Var> ins{im.in(n, 0), im.in(n, 1)};
  if (OnnxImporter::has_input(n, 2)) ins.push_back(im.in(n, 2));
  Attrs p{{"alpha", attr_float(a, "alpha", 1.0)},
          {"beta", attr_float(a, "beta", 1.0)},
          {"transA", attr_int(a, "transA", 0)},
          {"transB", attr_int(a, "transB", 0)}};
  return Outs{apply("gemm", ins, p)};
}

// The window attributes of the spatial dimensions `dims` (indices among the spatial ones),
// with pads resolved (auto_pad and ceil_mode already applied to `w`).
Attrs window_subset(const std::vector<WindowDims>& w, const std::vector<size_t>& dims,
                    bool ceil_mode) {
  Ints kernel, strides, dilations, begin, end;
  for (size_t d : dims) {
    kernel.push_back(w[d].kernel);
    strides.push_back(w[d].stride);
    dilations.push_back(w[d].dilation);
    begin.push_back(w[d].pad_begin);
    end.push_back(w[d].pad_end);
  }
  begin.insert(begin.end(), end.begin(), end.end());
  return {{"kernel_shape", kernel},
          {"strides", strides},
          {"dilations", dilations},
          {"pads", begin},
          {"ceil_mode", int64_t{ceil_mode}}};
}

// 3-D convolution as 2-D ones: for each kernel depth offset, the depth slices it reads
// (zero-padded in depth, strided) fold into the batch, a 2-D convolution with that depth's
// weights runs over them, and the results add up.
Var conv3d(Var x, Var w, std::optional<Var> bias, const Attrs& a) {
  const Ints xd = static_dims(x.type(), "3-D Conv"), wd = static_dims(w.type(), "3-D Conv weights");
  const auto win = resolve_window(WindowAttrs::from_props(a, "conv"), {xd[2], xd[3], xd[4]},
                                  {wd[2], wd[3], wd[4]}, "conv");
  const int64_t N = xd[0], C = xd[1], M = wd[0], Dout = win[0].out, Hout = win[1].out,
                Wout = win[2].out;
  Attrs p2 = window_subset(win, {1, 2}, false);
  p2.erase("ceil_mode");
  p2["group"] = attr_int(a, "group", 1);
  Var xp =
      apply("pad", {x}, {{"pads", Ints{0, 0, win[0].pad_begin, 0, 0, 0, 0, win[0].pad_end, 0, 0}}});
  std::optional<Var> acc;
  for (int64_t kd = 0; kd < wd[2]; ++kd) {
    const int64_t start = kd * win[0].dilation;
    Var xs = apply("slice", {xp},
                   {{"starts", Ints{start}},
                    {"ends", Ints{start + (Dout - 1) * win[0].stride + 1}},
                    {"axes", Ints{2}},
                    {"steps", Ints{win[0].stride}}});
    Var x2 = reshape(transpose(xs, {0, 2, 1, 3, 4}), {N * Dout, C, xd[3], xd[4]});
    Var w2 = reshape(
        apply("slice", {w}, {{"starts", Ints{kd}}, {"ends", Ints{kd + 1}}, {"axes", Ints{2}}}),
        {M, wd[1], wd[3], wd[4]});
    Var y2 = apply("conv", {x2, w2}, p2);
    acc = acc ? *acc + y2 : y2;
  }
  Var y = transpose(reshape(*acc, {N, Dout, M, Hout, Wout}), {0, 2, 1, 3, 4});
  if (bias) y = y + reshape(*bias, {1, M, 1, 1, 1});
  return y;
}

Outs convert_conv(OnnxImporter& im, const onnx::NodeProto& n, const Attrs& a) {
  std::vector<Var> ins{im.in(n, 0), im.in(n, 1)};
  if (OnnxImporter::has_input(n, 2)) ins.push_back(im.in(n, 2));
  if (ins[0].rank() == 5) {
    return Outs{
        conv3d(ins[0], ins[1], ins.size() > 2 ? std::optional<Var>(ins[2]) : std::nullopt, a)};
  }
  return Outs{apply("conv", ins, a)};
}

// ConvTranspose: ONNX's auto_pad and output_shape resolved to explicit pads (output_padding
// stays, and negative pads stand for an output_shape beyond the windows' reach), as ONNX's
// reference resolves them: with SAME_UPPER / SAME_LOWER the total padding of output_shape
// (default: input * stride) is split between the two sides; otherwise output_shape keeps the
// begin pads and moves the end.
Outs convert_conv_transpose(OnnxImporter& im, const onnx::NodeProto& n, const Attrs& a) {
  std::vector<Var> ins{im.in(n, 0), im.in(n, 1)};
  if (OnnxImporter::has_input(n, 2)) ins.push_back(im.in(n, 2));
  const TensorType& xt = ins[0].type();
  const Ints wd = static_dims(ins[1].type(), "ConvTranspose weights");
  if (xt.rank() < 3 || xt.rank() != static_cast<int>(wd.size())) {
    throw UserError("ConvTranspose needs X (N, C, spatial...) and W of the same rank, got " +
                    xt.to_string() + " and " + ins[1].type().to_string());
  }
  const size_t k = wd.size() - 2;
  const Ints kernel(wd.begin() + 2, wd.end());
  const Ints given = attr_ints(a, "kernel_shape", Ints{});
  if (!given.empty() && given != kernel) {
    throw UserError("kernel_shape " + dims_to_string(given) + " differs from the weight's " +
                    dims_to_string(kernel));
  }
  auto per_dim = [&](const char* name, int64_t dflt) {
    Ints v = attr_ints(a, name, Ints{});
    if (v.empty()) v.assign(k, dflt);
    if (v.size() != k) {
      throw UserError(std::string(name) + " has " + std::to_string(v.size()) + " entries for " +
                      std::to_string(k) + " spatial dimensions");
    }
    return v;
  };
  const Ints strides = per_dim("strides", 1), dilations = per_dim("dilations", 1),
             out_pad = per_dim("output_padding", 0);
  Ints pads = attr_ints(a, "pads", Ints{});
  if (pads.empty()) pads.assign(2 * k, 0);
  if (pads.size() != 2 * k) {
    throw UserError("pads has " + std::to_string(pads.size()) + " entries for " +
                    std::to_string(k) + " spatial dimensions");
  }
  const std::string auto_pad = attr_string(a, "auto_pad", std::string("NOTSET"));
  const bool same = auto_pad == "SAME_UPPER" || auto_pad == "SAME_LOWER";
  if (!same && auto_pad != "NOTSET" && auto_pad != "VALID")
    throw UserError("auto_pad '" + auto_pad + "' is not NOTSET, SAME_UPPER, SAME_LOWER or VALID");
  if (auto_pad == "VALID") pads.assign(2 * k, 0);
  Ints out_shape = attr_ints(a, "output_shape", Ints{});
  if (out_shape.size() == k + 2) out_shape.erase(out_shape.begin(), out_shape.begin() + 2);
  if (!out_shape.empty() && out_shape.size() != k) {
    throw UserError("output_shape has " + std::to_string(out_shape.size()) + " entries for " +
                    std::to_string(k) + " spatial dimensions");
  }
  if (same || !out_shape.empty()) {
    const Ints xd = static_dims(xt, "ConvTranspose with auto_pad or output_shape");
    for (size_t d = 0; d < k; ++d) {
      const int64_t in = xd[d + 2];
      const int64_t full = strides[d] * (in - 1) + out_pad[d] + (kernel[d] - 1) * dilations[d] + 1;
      const int64_t want = out_shape.empty() ? in * strides[d] : out_shape[d];
      if (want < 1) throw UserError("output_shape must be >= 1 in every dimension");
      if (same) {
        const int64_t total = full - want;
        const int64_t half = total >= 0 ? total / 2 : -((-total + 1) / 2);  // floor
        pads[d] = auto_pad == "SAME_UPPER" ? half : total - half;
      }
      pads[d + k] = full - want - pads[d];
    }
  }
  Attrs p{{"group", attr_int(a, "group", 1)},
          {"strides", strides},
          {"dilations", dilations},
          {"pads", pads},
          {"output_padding", out_pad}};
  return Outs{apply("conv_transpose", ins, p)};
}

// 3-D pooling as a 2-D pool over (H, W) then a 1-D pool over D: max and average windows are
// boxes, so both separate (an average's count of real elements is the product of each
// dimension's count, whether or not pads count).
Var pool3d(Var x, const Attrs& a, bool is_max) {
  const Ints xd = static_dims(x.type(), "3-D pooling");
  const WindowAttrs wa = WindowAttrs::from_props(a, is_max ? "max_pool" : "average_pool");
  const auto win = resolve_window(wa, {xd[2], xd[3], xd[4]}, wa.kernel, "pool");
  const int64_t N = xd[0], C = xd[1], D = xd[2];
  const std::string op = is_max ? "max_pool" : "average_pool";
  Attrs hw = window_subset(win, {1, 2}, wa.ceil_mode), dd = window_subset(win, {0}, wa.ceil_mode);
  if (!is_max) {
    hw["count_include_pad"] = attr_int(a, "count_include_pad", 0);
    dd["count_include_pad"] = attr_int(a, "count_include_pad", 0);
  }
  const int64_t Ho = win[1].out, Wo = win[2].out, Do = win[0].out;
  Var y = apply(op, {reshape(x, {N, C * D, xd[3], xd[4]})}, hw);
  y = reshape(transpose(reshape(y, {N, C, D, Ho * Wo}), {0, 1, 3, 2}), {N, C * Ho * Wo, D});
  y = apply(op, {y}, dd);
  return transpose(reshape(y, {N, C, Ho, Wo, Do}), {0, 1, 4, 2, 3});
}

Outs convert_pool(OnnxImporter& im, const onnx::NodeProto& n, const Attrs& a, bool is_max) {
  Attrs p = a;
  p.erase("storage_order");
  Var x = im.in(n, 0);
  // The Indices output: max_pool_indices beside the pool (1-D and 2-D).
  const bool indices = is_max && n.output_size() > 1 && !n.output(1).empty();
  // Bytes (a QOperator model's MaxPool between quantized convolutions): max_pool takes them
  // as they are in 1-D and 2-D; 3-D, and the Indices output, take the maximum of their
  // values in float32, exact, and back.
  if (is_max && (x.dtype() == DType::kUInt8 || x.dtype() == DType::kInt8)) {
    if (x.rank() < 5 && !indices) return Outs{apply("max_pool", {x}, p)};
    const DType bytes = x.dtype();
    Var f = cast(x, DType::kFloat32);
    if (indices) {
      Attrs pi = p;
      pi["column_major"] = attr_int(a, "storage_order", 0);
      return Outs{cast(apply("max_pool", {f}, p), bytes), apply("max_pool_indices", {f}, pi)};
    }
    return Outs{cast(pool3d(f, p, true), bytes)};
  }
  if (indices && x.rank() == 5) throw UnsupportedError("the Indices output of a 3-D MaxPool");
  if (x.rank() == 5) return Outs{pool3d(x, p, is_max)};
  Var y = apply(is_max ? "max_pool" : "average_pool", {x}, p);
  if (!indices) return Outs{y};
  p["column_major"] = attr_int(a, "storage_order", 0);
  return Outs{y, apply("max_pool_indices", {x}, p)};
}

// MaxUnpool: each value at its index of an output of output_shape (its spatial part), or by
// default of (in - 1) * stride + kernel - pads per dimension.
Outs convert_max_unpool(OnnxImporter& im, const onnx::NodeProto& n, const Attrs& a) {
  Var x = im.in(n, 0), idx = im.in(n, 1);
  const Ints xd = static_dims(x.type(), "MaxUnpool");
  const size_t k = xd.size() - 2;
  const Ints kernel = attr_ints(a, "kernel_shape");
  const Ints strides = attr_ints(a, "strides", Ints(k, 1));
  const Ints pads = attr_ints(a, "pads", Ints(2 * k, 0));
  if (kernel.size() != k || strides.size() != k || pads.size() != 2 * k)
    throw UserError("kernel_shape, strides and pads must match " + std::to_string(k) +
                    " spatial dimensions");
  Ints grid;
  for (size_t d = 0; d < k; ++d)
    grid.push_back((xd[d + 2] - 1) * strides[d] + kernel[d] - pads[d] - pads[d + k]);
  Ints out = grid;
  if (OnnxImporter::has_input(n, 2)) {
    const Ints shape = im.const_ints(n, 2, "output_shape");
    if (shape.size() != xd.size())
      throw UserError("output_shape has " + std::to_string(shape.size()) + " entries for rank " +
                      std::to_string(xd.size()));
    out.assign(shape.begin() + 2, shape.end());
  }
  return Outs{apply("max_unpool", {x, idx}, {{"output", out}, {"grid", grid}})};
}

Outs convert_global_pool(OnnxImporter& im, const onnx::NodeProto& n, bool is_max) {
  Var x = im.in(n, 0);
  Ints axes;
  for (int d = 2; d < x.rank(); ++d) axes.push_back(d);
  return Outs{apply(is_max ? "reduce_max" : "reduce_mean", {x},
                    {{"axes", axes}, {"keepdims", int64_t{1}}})};
}

// Per-channel parameter of shape (C) broadcast against (N, C, d1, ...).
Var per_channel(Var p, int rank) {
  Ints shape{-1};
  for (int d = 2; d < rank; ++d) shape.push_back(1);
  return reshape(p, shape);
}

Outs convert_batch_norm(OnnxImporter& im, const onnx::NodeProto& n, const Attrs& a) {
  Var x = im.in(n, 0);
  const double eps = attr_float(a, "epsilon", 1e-5);
  Var scale = im.in(n, 1), bias = im.in(n, 2), mean_v = im.in(n, 3), var_v = im.in(n, 4);
  if (attr_int(a, "training_mode", 0) != 0) {
    // The batch's statistics over every axis but the channels (the variance biased, as ONNX
    // defines it), and the running ones moved toward them by 1 - momentum.
    if (x.rank() < 2)
      throw UserError("training mode needs a channel axis; X is " + x.type().to_string());
    const double momentum = attr_float(a, "momentum", 0.9);
    Ints axes{0};
    for (int d = 2; d < x.rank(); ++d) axes.push_back(d);
    Var mu = mean(x, axes, true);
    Var centred = x - mu;
    Var var_b = mean(centred * centred, axes, true);
    Var y = centred * reciprocal(sqrt(var_b + eps)) * per_channel(scale, x.rank()) +
            per_channel(bias, x.rank());
    Var mu_c = reshape(mu, {-1}), var_c = reshape(var_b, {-1});
    return Outs{y, mean_v * momentum + mu_c * (1.0 - momentum),
                var_v * momentum + var_c * (1.0 - momentum)};
  }
  // y = x * k + (b - mean * k), k = scale / sqrt(var + eps): two per-channel vectors.
  Var k = scale / sqrt(var_v + eps);
  Var shift = bias - mean_v * k;
  if (x.rank() < 2) return Outs{x * k + shift};
  return Outs{x * per_channel(k, x.rank()) + per_channel(shift, x.rank())};
}

Outs convert_layer_norm(OnnxImporter& im, const onnx::NodeProto& n, const Attrs& a) {
  Var x = im.in(n, 0);
  const int axis = static_cast<int>(rank_axis(attr_int(a, "axis", -1), x.rank()));
  const double eps = attr_float(a, "epsilon", 1e-5);
  Ints axes;
  for (int d = axis; d < x.rank(); ++d) axes.push_back(d);
  Var mean_v = mean(x, axes, true);
  Var d = x - mean_v;
  Var inv = reciprocal(sqrt(mean(d * d, axes, true) + eps));
  Var y = d * inv * im.in(n, 1);
  if (OnnxImporter::has_input(n, 2)) y = y + im.in(n, 2);
  return Outs{y, mean_v, inv};
}

Outs convert_dropout(OnnxImporter& im, const onnx::NodeProto& n, const Attrs& a) {
  if (OnnxImporter::has_input(n, 2)) {
    const Tensor& mode = im.const_in(n, 2, "training_mode");
    // Training mode drops at random, except with ratio 0, where it is the identity.
    if (mode.numel() != 1 || mode.load(0) != 0) {
      const bool zero_ratio = OnnxImporter::has_input(n, 1) &&
                              im.const_in(n, 1, "ratio").numel() == 1 &&
                              im.const_in(n, 1, "ratio").load(0) == 0;
      if (!zero_ratio) return convert_training_dropout(im, n, a);
    }
  }
  Var x = im.in(n, 0);
  Outs outs{x};
  if (n.output_size() > 1 && !n.output(1).empty()) {
    // Inference: nothing is dropped, the mask is all true.
    Tensor mask = Tensor::empty(DType::kBool, static_dims(x.type(), "Dropout's mask"));
    for (int64_t i = 0; i < mask.numel(); ++i) mask.store_int(i, 1);
    outs.push_back(constant(im.graph(), mask));
  }
  return outs;
}

// NegativeLogLikelihoodLoss on log-probabilities x (N, C, d1...) and targets (N, d1...):
// -x[n, t, d...] weighted by weight[t], ignored targets contributing nothing.
Var nll_loss(OnnxImporter& im, Var x, Var target, std::optional<Var> weight, const Attrs& a) {
  if (x.rank() < 2 || target.rank() != x.rank() - 1)
    throw UserError("input " + x.type().to_string() + " and target " + target.type().to_string() +
                    " must be (N, C, d1...) and (N, d1...)");
  const std::string reduction = attr_string(a, "reduction", std::string("mean"));
  if (reduction != "none" && reduction != "sum" && reduction != "mean")
    throw UserError(attr_problem("reduction", reduction, "(none, sum or mean)"));
  std::optional<Var> valid;
  Var t = target;
  if (a.count("ignore_index")) {
    Var ignore =
        scalar(im.graph(), target.dtype(), static_cast<double>(attr_int(a, "ignore_index")));
    valid = ne(target, ignore);
    // An ignored target may be out of range: gather at class 0 instead, then drop it.
    t = where(*valid, target, scalar(im.graph(), target.dtype(), 0));
  }
  Var picked = apply("gather_elements", {x, unsqueeze_at(t, 1)}, {{"axis", int64_t{1}}});
  Ints dims = target.type().dims;
  std::vector<int> src;
  for (int d = 0; d < target.rank(); ++d) src.push_back(d == 0 ? 0 : d + 1);
  Var loss = neg(reshape_to(picked, dims, src));
  std::optional<Var> w;
  if (weight) w = apply("gather", {*weight, t}, {{"axis", int64_t{0}}});
  if (valid) {
    Var zero = scalar_like(loss, 0.0);
    w = where(*valid, w ? *w : scalar_like(loss, 1.0), zero);
  }
  if (w) loss = loss * *w;
  if (reduction == "none") return loss;
  if (reduction == "sum") return sum(loss);
  if (!w) return mean(loss);
  // The mean weighs each element: sum(loss) / sum(weight of each counted target).
  return sum(loss) / sum(*w);
}

Outs convert_nll(OnnxImporter& im, const onnx::NodeProto& n, const Attrs& a) {
  std::optional<Var> weight;
  if (OnnxImporter::has_input(n, 2)) weight = im.in(n, 2);
  return Outs{nll_loss(im, im.in(n, 0), im.in(n, 1), weight, a)};
}

Outs convert_softmax_cross_entropy(OnnxImporter& im, const onnx::NodeProto& n, const Attrs& a) {
  Var scores = im.in(n, 0);
  Var log_prob = apply("log_softmax", {scores}, {{"axis", int64_t{1}}});
  std::optional<Var> weight;
  if (OnnxImporter::has_input(n, 2)) weight = im.in(n, 2);
  return Outs{nll_loss(im, log_prob, im.in(n, 1), weight, a), log_prob};
}

// ONNX's recurrent layers (LSTM, GRU, RNN) as kiln's lstm / gru / rnn op: optional inputs
// filled with zeros, layout 1 transposed to layout 0 and back, activations resolved with
// their alpha / beta (each consumed by an activation that takes one, in order; ONNX's
// operator defaults otherwise).
Outs convert_recurrent(OnnxImporter& im, const onnx::NodeProto& n, const Attrs& a,
                       const std::string& kind) {
  const bool lstm = kind == "lstm";
  const int gates = lstm ? 4 : kind == "gru" ? 3 : 1;
  const std::string direction = attr_string(a, "direction", std::string("forward"));
  const int64_t dirs = direction == "bidirectional" ? 2 : 1;
  const bool batch_first = attr_int(a, "layout", 0) != 0;
  Var x = im.in(n, 0), w = im.in(n, 1), r = im.in(n, 2);
  if (x.rank() != 3 || w.rank() != 3 || r.rank() != 3)
    throw UserError("X, W and R must be 3-D, got " + x.type().to_string() + ", " +
                    w.type().to_string() + ", " + r.type().to_string());
  if (batch_first) x = transpose(x, {1, 0, 2});
  const int64_t hidden = a.count("hidden_size") ? attr_int(a, "hidden_size") : r.type().dims[2];
  if (hidden == kDynamic || hidden < 1) throw UserError("hidden_size must be known and positive");
  // The names as given (case-insensitive), per direction.
  std::vector<std::string> names;
  if (const auto* at = tensor_attr(n, "activations")) {
    for (const auto& v : at->strings()) names.push_back(v);
  }
  const std::vector<std::string> defaults =
      lstm            ? std::vector<std::string>{"Sigmoid", "Tanh", "Tanh"}
      : kind == "gru" ? std::vector<std::string>{"Sigmoid", "Tanh"}
                      : std::vector<std::string>{"Tanh"};
  if (names.empty()) {
    for (int64_t d = 0; d < dirs; ++d) names.insert(names.end(), defaults.begin(), defaults.end());
  }
  const std::vector<double> alphas = a.count("activation_alpha")
                                         ? std::get<std::vector<double>>(a.at("activation_alpha"))
                                         : std::vector<double>{};
  const std::vector<double> betas = a.count("activation_beta")
                                        ? std::get<std::vector<double>>(a.at("activation_beta"))
                                        : std::vector<double>{};
  size_t next_alpha = 0, next_beta = 0;
  std::vector<std::string> canonical;
  std::vector<double> alpha, beta;
  // name -> (takes alpha, default alpha, takes beta, default beta)
  static const std::map<std::string, std::tuple<bool, double, bool, double>> kParams{
      {"Sigmoid", {false, 0, false, 0}},      {"Tanh", {false, 0, false, 0}},
      {"Relu", {false, 0, false, 0}},         {"Affine", {true, 1.0, true, 0.0}},
      {"LeakyRelu", {true, 0.01, false, 0}},  {"ThresholdedRelu", {true, 1.0, false, 0}},
      {"ScaledTanh", {true, 1.0, true, 1.0}}, {"HardSigmoid", {true, 0.2, true, 0.5}},
      {"Elu", {true, 1.0, false, 0}},         {"Softsign", {false, 0, false, 0}},
      {"Softplus", {false, 0, false, 0}}};
  for (const std::string& name : names) {
    auto it = std::find_if(kParams.begin(), kParams.end(), [&](const auto& kv) {
      if (kv.first.size() != name.size()) return false;
      for (size_t i = 0; i < name.size(); ++i) {
        if (std::tolower(static_cast<unsigned char>(kv.first[i])) !=
            std::tolower(static_cast<unsigned char>(name[i])))
          return false;
      }
      return true;
    });
    if (it == kParams.end()) throw UnsupportedError("activation '" + name + "' is not supported");
    const auto& [takes_a, def_a, takes_b, def_b] = it->second;
    canonical.push_back(it->first);
    alpha.push_back(takes_a && next_alpha < alphas.size() ? alphas[next_alpha++] : def_a);
    beta.push_back(takes_b && next_beta < betas.size() ? betas[next_beta++] : def_b);
  }
  const double zero = 0.0;
  auto zeros = [&](Ints dims) {
    return constant(im.graph(), Tensor::zeros(x.dtype(), std::move(dims)));
  };
  // Initial states default to zeros of (dirs, batch, hidden), batch possibly dynamic.
  auto initial_state = [&](int i) -> Var {
    if (OnnxImporter::has_input(n, i)) {
      Var v = im.in(n, i);
      return batch_first ? transpose(v, {1, 0, 2}) : v;
    }
    const int64_t batch = x.type().dims[1];
    if (batch != kDynamic) return zeros({dirs, batch, hidden});
    return apply_with_dims(im, "fill", std::nullopt,
                           {{"value", zero}, {"dtype", std::string(dtype_name(x.dtype()))}},
                           {{"dims",
                             {DimExpr::constant(dirs), DimExpr::dim(im.sym_source(x.var()), 1),
                              DimExpr::constant(hidden)}}});
  };
  std::vector<Var> ins{x, w, r};
  ins.push_back(OnnxImporter::has_input(n, 3) ? im.in(n, 3) : zeros({dirs, 2 * gates * hidden}));
  ins.push_back(initial_state(5));
  if (lstm) {
    ins.push_back(initial_state(6));
    ins.push_back(OnnxImporter::has_input(n, 7) ? im.in(n, 7) : zeros({dirs, 3 * hidden}));
  }
  const bool has_lens = OnnxImporter::has_input(n, 4);
  if (has_lens) ins.push_back(cast(im.in(n, 4), DType::kInt32));
  Attrs p{{"hidden_size", hidden},
          {"direction", direction},
          {"activations", join(canonical, ",")},
          {"activation_alpha", alpha},
          {"activation_beta", beta},
          {"clip", attr_float(a, "clip", 0.0)},
          {"has_lens", int64_t{has_lens}}};
  if (lstm) p["input_forget"] = attr_int(a, "input_forget", 0);
  if (kind == "gru") p["linear_before_reset"] = attr_int(a, "linear_before_reset", 0);
  std::vector<Variable*> vars;
  for (const Var& v : ins) vars.push_back(v.var());
  Node* node = im.graph().add_node(OpRegistry::instance().create(kind, p), vars);
  Outs outs;
  for (Variable* v : node->outputs) outs.push_back(Var(&im.graph(), v));
  if (batch_first) {
    outs[0] = transpose(outs[0], {2, 0, 1, 3});
    for (size_t k = 1; k < outs.size(); ++k) outs[k] = transpose(outs[k], {1, 0, 2});
  }
  return outs;
}

// InstanceNormalization: per (batch, channel), normalized over the spatial dimensions.
Outs convert_instance_norm(OnnxImporter& im, const onnx::NodeProto& n, const Attrs& a) {
  Var x = im.in(n, 0);
  if (x.rank() < 3)
    throw UserError("InstanceNormalization needs (N, C, D1, ...), got " + x.type().to_string());
  Ints axes;
  for (int d = 2; d < x.rank(); ++d) axes.push_back(d);
  Var d = x - mean(x, axes, true);
  Var inv = reciprocal(sqrt(mean(d * d, axes, true) + attr_float(a, "epsilon", 1e-5)));
  return Outs{d * inv * per_channel(im.in(n, 1), x.rank()) + per_channel(im.in(n, 2), x.rank())};
}

// MeanVarianceNormalization: (x - E[x]) / (sqrt(E[x^2] - E[x]^2) + 1e-9) over axes, as
// ONNX's function body.
Outs convert_mvn(OnnxImporter& im, const onnx::NodeProto& n, const Attrs& a) {
  Var x = im.in(n, 0);
  Ints axes = attr_ints(a, "axes", Ints{0, 2, 3});
  Var m = mean(x, axes, true);
  Var sd = sqrt(mean(x * x, axes, true) - m * m);
  return Outs{(x - m) / (sd + 1e-9)};
}

// LRN: x / (bias + alpha / size * (sum of x^2 over `size` neighbouring channels))^beta.
Outs convert_lrn(OnnxImporter& im, const onnx::NodeProto& n, const Attrs& a) {
  Var x = im.in(n, 0);
  if (x.rank() < 3) throw UserError("LRN needs (N, C, D1, ...), got " + x.type().to_string());
  const int64_t size = attr_int(a, "size");
  if (size < 1) throw UserError("LRN size must be at least 1");
  const int64_t channels = x.type().dims[1];
  if (channels == kDynamic) throw UnsupportedError("LRN over a dynamic channel count");
  const int64_t before = (size - 1) / 2, after = size - 1 - before;
  Ints pads(static_cast<size_t>(2 * x.rank()), 0);
  pads[1] = before;
  pads[static_cast<size_t>(x.rank() + 1)] = after;
  Var sq = apply("pad", {x * x}, {{"pads", pads}});
  std::optional<Var> sum;
  for (int64_t k = 0; k < size; ++k) {
    Var s = apply("slice", {sq},
                  {{"starts", Ints{k}}, {"ends", Ints{k + channels}}, {"axes", Ints{1}}});
    sum = sum ? *sum + s : s;
  }
  Var base = *sum * (attr_float(a, "alpha", 1e-4) / static_cast<double>(size)) +
             attr_float(a, "bias", 1.0);
  return Outs{x / pow(base, scalar_like(x, attr_float(a, "beta", 0.75)))};
}

}  // namespace

void add_nn_ops(OpTable& t) {
  t["Dropout"] = {{"ratio", "seed", "is_test"}, nullptr, convert_dropout};
  // Linear algebra, convolution, pooling, normalisation.
  t["MatMul"] = elementwise("matmul");
  t["Gemm"] = {{"alpha", "beta", "transA", "transB"}, nullptr, convert_gemm};
  t["Conv"] = {
      {"group", "kernel_shape", "strides", "dilations", "pads", "auto_pad"}, nullptr, convert_conv};
  // Opset 16 made half_pixel the default; opset 10's boxes are output_half_pixel (no shift).
  t["RoiAlign"] = {{"coordinate_transformation_mode", "mode", "output_height", "output_width",
                    "sampling_ratio", "spatial_scale"},
                   nullptr,
                   [](OnnxImporter& im, const onnx::NodeProto& n, const Attrs& a) {
                     const std::string ctm = attr_string(
                         a, "coordinate_transformation_mode",
                         std::string(im.opset() >= 16 ? "half_pixel" : "output_half_pixel"));
                     if (ctm != "half_pixel" && ctm != "output_half_pixel") {
                       throw UserError("coordinate_transformation_mode '" + ctm +
                                       "' is not half_pixel or output_half_pixel");
                     }
                     Attrs p = a;
                     p.erase("coordinate_transformation_mode");
                     p["half_pixel"] = int64_t{ctm == "half_pixel"};
                     return Outs{apply("roi_align", {im.in(n, 0), im.in(n, 1), im.in(n, 2)}, p)};
                   }};
  t["Det"] = {{}, nullptr, [](OnnxImporter& im, const onnx::NodeProto& n, const Attrs&) {
                return Outs{apply("det", {im.in(n, 0)})};
              }};
  t["MaxUnpool"] = {{"kernel_shape", "pads", "strides"}, nullptr, convert_max_unpool};
  t["GridSample"] = {{"align_corners", "mode", "padding_mode"},
                     nullptr,
                     [](OnnxImporter& im, const onnx::NodeProto& n, const Attrs& a) {
                       return Outs{apply("grid_sample", {im.in(n, 0), im.in(n, 1)}, a)};
                     }};
  t["ConvTranspose"] = {{"auto_pad", "dilations", "group", "kernel_shape", "output_padding",
                         "output_shape", "pads", "strides"},
                        nullptr,
                        convert_conv_transpose};
  auto pool_check = [](const Attrs& a, const onnx::NodeProto& n, int) {
    std::vector<std::string> p;
    auto more = max_outputs(n, 2, "(MaxPool has two)");
    p.insert(p.end(), more.begin(), more.end());
    return p;
  };
  t["MaxPool"] = {
      {"kernel_shape", "strides", "dilations", "pads", "auto_pad", "ceil_mode", "storage_order"},
      pool_check,
      [](OnnxImporter& im, const onnx::NodeProto& n, const Attrs& a) {
        return convert_pool(im, n, a, true);
      }};
  t["AveragePool"] = {
      {"kernel_shape", "strides", "pads", "auto_pad", "ceil_mode", "count_include_pad"},
      nullptr,
      [](OnnxImporter& im, const onnx::NodeProto& n, const Attrs& a) {
        return convert_pool(im, n, a, false);
      }};
  t["GlobalAveragePool"] = {
      {}, nullptr, [](OnnxImporter& im, const onnx::NodeProto& n, const Attrs&) {
        return convert_global_pool(im, n, false);
      }};
  t["GlobalMaxPool"] = {{}, nullptr, [](OnnxImporter& im, const onnx::NodeProto& n, const Attrs&) {
                          return convert_global_pool(im, n, true);
                        }};
  t["BatchNormalization"] = {
      {"epsilon", "momentum", "spatial", "training_mode"},
      [](const Attrs& a, const onnx::NodeProto& n, int) {
        std::vector<std::string> p;
        if (attr_int(a, "spatial", 1) != 1)
          p.push_back(attr_problem("spatial", "0", "(per-activation statistics)"));
        // Training mode gives the updated running statistics; inference, only Y.
        const bool training = attr_int(a, "training_mode", 0) != 0;
        auto more = max_outputs(n, training ? 3 : 1,
                                training ? "(saved statistics) is not supported"
                                         : "(running statistics outside training mode)");
        p.insert(p.end(), more.begin(), more.end());
        return p;
      },
      convert_batch_norm};
  t["LayerNormalization"] = {
      {"axis", "epsilon", "stash_type"},
      [](const Attrs& a, const onnx::NodeProto&, int) {
        std::vector<std::string> p;
        if (attr_int(a, "stash_type", 1) != 1) {
          p.push_back(attr_problem("stash_type", std::to_string(attr_int(a, "stash_type", 1)),
                                   "(only float32 statistics)"));
        }
        return p;
      },
      convert_layer_norm};
  for (const char* kind : {"LSTM", "GRU", "RNN"}) {
    const std::string k = kind == std::string("LSTM")  ? "lstm"
                          : kind == std::string("GRU") ? "gru"
                                                       : "rnn";
    t[kind] = {{"hidden_size", "direction", "activations", "activation_alpha", "activation_beta",
                "clip", "input_forget", "linear_before_reset", "layout"},
               nullptr,
               [k](OnnxImporter& im, const onnx::NodeProto& n, const Attrs& a) {
                 return convert_recurrent(im, n, a, k);
               }};
  }
  t["InstanceNormalization"] = {{"epsilon"}, nullptr, convert_instance_norm};
  t["MeanVarianceNormalization"] = {{"axes"}, nullptr, convert_mvn};
  t["LRN"] = {{"alpha", "beta", "bias", "size"}, nullptr, convert_lrn};
  t["NegativeLogLikelihoodLoss"] = {{"reduction", "ignore_index"}, nullptr, convert_nll};
  t["SoftmaxCrossEntropyLoss"] = {
      {"reduction", "ignore_index"}, nullptr, convert_softmax_cross_entropy};
}

}  // namespace kiln::onnx_import
