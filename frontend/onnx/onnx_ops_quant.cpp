// The ONNX importer's quantized ops: QuantizeLinear, DequantizeLinear and
// DynamicQuantizeLinear as elementwise composites (fused like any float chain), and
// MatMulInteger, QLinearMatMul, ConvInteger and QLinearConv as kiln's integer qmatmul and
// qconv, whose kernels multiply bytes and sum in int32 (ops/qmatmul.h, ops/qconv.h); and
// onnxruntime's QOperator contrib ops (QGemm, QLinearAdd, QLinearMul, QLinearSigmoid,
// QLinearLeakyRelu, QLinearConcat, QLinearAveragePool, QLinearGlobalAveragePool).
// Quantization parameters known at load time are checked there: a scale that is zero,
// negative, NaN or infinite, a zero point of the wrong type or size, per-axis parameters
// whose length is not the axis's, each named with the node's input.
#include <onnx/onnx_pb.h>

#include <cmath>
#include <optional>

#include "frontend/onnx/onnx_op_support.h"
#include "frontend/onnx/onnx_qdq.h"
#include "util/error.h"

namespace kiln::onnx_import {
namespace {

std::string input_label(const onnx::NodeProto& n, int i, const char* role) {
  return std::string(role) + " (input " + std::to_string(i) + ", '" +
         (i < n.input_size() ? n.input(i) : std::string()) + "')";
}

// A scale input: float32, and where its values are known, each finite and positive.
Var scale_in(OnnxImporter& im, const onnx::NodeProto& n, int i, const char* role) {
  Var s = im.in(n, i);
  if (s.dtype() != DType::kFloat32) {
    throw UserError(input_label(n, i, role) + " must be float32, got " + s.type().to_string());
  }
  if (const Tensor* v = im.known(n.input(i))) {
    for (int64_t e = 0; e < v->numel(); ++e) {
      const double x = v->load(e);
      if (!std::isfinite(x) || x <= 0) {
        throw UserError(input_label(n, i, role) + " must be finite and positive, but element " +
                        std::to_string(e) + " is " + std::to_string(x));
      }
    }
  }
  return s;
}

// A zero point input of dtype `want` (int8 or uint8), or a zero of that dtype when absent.
Var zero_point_in(OnnxImporter& im, const onnx::NodeProto& n, int i, DType want, const char* role) {
  if (!OnnxImporter::has_input(n, i)) return constant(im.graph(), Tensor::scalar(want, 0));
  Var z = im.in(n, i);
  if (z.dtype() != want) {
    throw UserError(input_label(n, i, role) + " must be " + std::string(dtype_name(want)) +
                    ", like the tensor it belongs to, got " + z.type().to_string());
  }
  return z;
}

// Per-tensor (one value) or per-axis parameters of x's dimension `axis`: shaped to broadcast
// against x.
Var along_axis(Var p, const Var& x, int64_t axis_attr, const onnx::NodeProto& n, int i,
               const char* role) {
  const int64_t count = p.type().static_numel();
  if (p.rank() == 0 || count == 1) return p.rank() == 0 ? p : reshape(p, {});
  const int axis = static_cast<int>(rank_axis(axis_attr, x.rank()));
  const int64_t len = x.type().dims[static_cast<size_t>(axis)];
  if (p.rank() != 1 || (count != kDynamic && len != kDynamic && count != len)) {
    throw UserError(
        input_label(n, i, role) + " must be a scalar or hold one value per element of " + "axis " +
        std::to_string(axis) + " (" + std::to_string(len) + "), got " + p.type().to_string());
  }
  std::vector<int64_t> shape(static_cast<size_t>(x.rank()), 1);
  shape[static_cast<size_t>(axis)] = count == kDynamic ? len : count;
  return reshape(p, shape);
}

// saturate(round_half_even(x / scale) + zero_point), as `to`.
Var quantize(Var x, Var scale, Var zp, DType to) {
  const double lo = to == DType::kUInt8 ? 0 : -128, hi = to == DType::kUInt8 ? 255 : 127;
  Var q = round(x / scale) + cast(zp, DType::kFloat32);
  return cast(clip(q, lo, hi), to);
}

Outs convert_quantize(OnnxImporter& im, const onnx::NodeProto& n, const Attrs& a) {
  Var x = im.in(n, 0);
  if (x.dtype() != DType::kFloat32) {
    throw UnsupportedError(input_label(n, 0, "x") + " of " + x.type().to_string() +
                           " (float32 is supported)");
  }
  const DType to = OnnxImporter::has_input(n, 2) ? im.in(n, 2).dtype() : DType::kUInt8;
  if (!is_byte(to)) {
    throw UserError(input_label(n, 2, "the zero point") + " must be int8 or uint8, got " +
                    std::string(dtype_name(to)));
  }
  const int64_t axis = attr_int(a, "axis", 1);
  Var scale = along_axis(scale_in(im, n, 1, "the scale"), x, axis, n, 1, "the scale");
  Var zp =
      along_axis(zero_point_in(im, n, 2, to, "the zero point"), x, axis, n, 2, "the zero point");
  return Outs{quantize(x, scale, zp, to)};
}

Outs convert_dequantize(OnnxImporter& im, const onnx::NodeProto& n, const Attrs& a) {
  Var x = im.in(n, 0);
  if (!is_byte(x.dtype()) && x.dtype() != DType::kInt32) {
    throw UserError(input_label(n, 0, "x") + " must be int8, uint8 or int32, got " +
                    x.type().to_string());
  }
  const int64_t axis = attr_int(a, "axis", 1);
  Var scale = along_axis(scale_in(im, n, 1, "the scale"), x, axis, n, 1, "the scale");
  Var y = cast(x, DType::kFloat32);
  if (OnnxImporter::has_input(n, 2)) {
    Var zp = along_axis(zero_point_in(im, n, 2, x.dtype(), "the zero point"), x, axis, n, 2,
                        "the zero point");
    y = y - cast(zp, DType::kFloat32);
  }
  return Outs{y * scale};
}

// The uint8 range of x together with 0: scale = (max - min) / 255, zero point the rounded
// -min / scale, and x quantized with them. An all-zero x has no range: its scale is 0 and
// every value (and the zero point) is 0, where the formula would divide by zero.
Outs convert_dynamic_quantize(OnnxImporter& im, const onnx::NodeProto& n, const Attrs&) {
  Var x = im.in(n, 0);
  if (x.dtype() != DType::kFloat32) {
    throw UnsupportedError(input_label(n, 0, "x") + " of " + x.type().to_string() +
                           " (float32 is supported)");
  }
  Var zero = scalar_like(x, 0.0);
  Var lo = minimum(min(x), zero), hi = maximum(max(x), zero);
  Var scale = (hi - lo) / 255.0;
  Var safe = where(eq(scale, zero), scalar_like(x, 1.0), scale);
  Var zp_f = clip(round((zero - lo) / safe), 0.0, 255.0);
  Var y = cast(clip(round(x / safe) + zp_f, 0.0, 255.0), DType::kUInt8);
  return Outs{y, scale, cast(zp_f, DType::kUInt8)};
}

// A zero point for qmatmul's A: one value (a per-row A zero point is not supported).
Var a_zero_point(OnnxImporter& im, const onnx::NodeProto& n, int i, DType dtype, const char* role) {
  Var z = zero_point_in(im, n, i, dtype, role);
  const int64_t count = z.type().static_numel();
  if (count != 1 || z.rank() > 1) {
    throw UnsupportedError(input_label(n, i, role) + " of " + z.type().to_string() +
                           " (one zero point for all of A is supported)");
  }
  return z;
}

// B's zero point or scale: one value or one per output column (`cols`).
Var per_column(Var p, int64_t cols, const onnx::NodeProto& n, int i, const char* role) {
  const int64_t count = p.type().static_numel();
  if (p.rank() > 1 || (count != 1 && count != kDynamic && cols != kDynamic && count != cols)) {
    throw UserError(input_label(n, i, role) + " must be a scalar or hold one value per output " +
                    "column (" + std::to_string(cols) + "), got " + p.type().to_string());
  }
  return p;
}

void check_operand(const onnx::NodeProto& n, int i, const Var& v, const char* role) {
  if (!is_byte(v.dtype())) {
    throw UserError(input_label(n, i, role) + " must be int8 or uint8, got " +
                    v.type().to_string());
  }
}

Outs convert_matmul_integer(OnnxImporter& im, const onnx::NodeProto& n, const Attrs&) {
  Var a = im.in(n, 0), b = im.in(n, 1);
  check_operand(n, 0, a, "A");
  check_operand(n, 1, b, "B");
  const int64_t cols = b.type().dims.empty() ? kDynamic : b.type().dims.back();
  Var az = a_zero_point(im, n, 2, a.dtype(), "A's zero point");
  Var bz = per_column(zero_point_in(im, n, 3, b.dtype(), "B's zero point"), cols, n, 3,
                      "B's zero point");
  return Outs{apply("qmatmul", {a, b, az, bz})};
}

// a_scale * b_scale / y_scale: one multiplier, or one per column where b_scale is.
Var multiplier(OnnxImporter& im, const onnx::NodeProto& n, int ia, int ib, int iy, int64_t cols) {
  Var sa = scale_in(im, n, ia, "A's scale"), sb = scale_in(im, n, ib, "B's scale");
  Var sy = scale_in(im, n, iy, "Y's scale");
  for (auto [v, i, role] : {std::tuple{sa, ia, "A's scale"}, std::tuple{sy, iy, "Y's scale"}}) {
    if (v.type().static_numel() != 1 || v.rank() > 1) {
      throw UnsupportedError(input_label(n, i, role) + " of " + v.type().to_string() +
                             " (one scale is supported)");
    }
  }
  per_column(sb, cols, n, ib, "B's scale");
  Var m = reshape(sa, {}) * sb / reshape(sy, {});
  return m.rank() == 0 ? reshape(m, {1}) : m;
}

// Y's zero point (input i): one int8 or uint8, which is also Y's type.
Var output_zero_point(OnnxImporter& im, const onnx::NodeProto& n, int i) {
  Var yz = im.in(n, i);
  if (!is_byte(yz.dtype()) || yz.type().static_numel() != 1) {
    throw UserError(input_label(n, i, "Y's zero point") + " must be one int8 or uint8, got " +
                    yz.type().to_string());
  }
  return yz;
}

Outs convert_qlinear_matmul(OnnxImporter& im, const onnx::NodeProto& n, const Attrs&) {
  Var a = im.in(n, 0), b = im.in(n, 3);
  check_operand(n, 0, a, "A");
  check_operand(n, 3, b, "B");
  const int64_t cols = b.type().dims.empty() ? kDynamic : b.type().dims.back();
  Var az = a_zero_point(im, n, 2, a.dtype(), "A's zero point");
  Var bz = per_column(zero_point_in(im, n, 5, b.dtype(), "B's zero point"), cols, n, 5,
                      "B's zero point");
  Var yz = output_zero_point(im, n, 7);
  Var m = multiplier(im, n, 1, 4, 6, cols);
  return Outs{apply("qmatmul", {a, b, az, bz, m, yz}, {{"requant", int64_t{1}}})};
}

Attrs conv_props(const Attrs& a) {
  Attrs p;
  for (const char* k : {"group", "kernel_shape", "strides", "dilations", "pads", "auto_pad"}) {
    if (a.count(k)) p[k] = a.at(k);
  }
  return p;
}

Outs convert_conv_integer(OnnxImporter& im, const onnx::NodeProto& n, const Attrs& a) {
  Var x = im.in(n, 0), w = im.in(n, 1);
  check_operand(n, 0, x, "X");
  check_operand(n, 1, w, "W");
  const int64_t m = w.type().dims.empty() ? kDynamic : w.type().dims[0];
  Var xz = a_zero_point(im, n, 2, x.dtype(), "X's zero point");
  Var wz =
      per_column(zero_point_in(im, n, 3, w.dtype(), "W's zero point"), m, n, 3, "W's zero point");
  return Outs{apply("qconv", {x, w, xz, wz}, conv_props(a))};
}

Outs convert_qlinear_conv(OnnxImporter& im, const onnx::NodeProto& n, const Attrs& a) {
  Var x = im.in(n, 0), w = im.in(n, 3);
  check_operand(n, 0, x, "X");
  check_operand(n, 3, w, "W");
  const int64_t m = w.type().dims.empty() ? kDynamic : w.type().dims[0];
  Var xz = a_zero_point(im, n, 2, x.dtype(), "X's zero point");
  Var wz =
      per_column(zero_point_in(im, n, 5, w.dtype(), "W's zero point"), m, n, 5, "W's zero point");
  Var yz = output_zero_point(im, n, 7);
  Var mult = multiplier(im, n, 1, 4, 6, m);
  std::vector<Var> ins{x, w, xz, wz, mult, yz};
  Attrs p = conv_props(a);
  p["requant"] = int64_t{1};
  if (OnnxImporter::has_input(n, 8)) {
    Var bias = im.in(n, 8);
    if (bias.dtype() != DType::kInt32) {
      throw UserError(input_label(n, 8, "the bias") + " must be int32, got " +
                      bias.type().to_string());
    }
    ins.push_back(per_column(bias, m, n, 8, "the bias"));
    p["bias"] = int64_t{1};
  }
  return Outs{apply("qconv", ins, p)};
}

// onnxruntime's QOperator contrib ops (domain com.microsoft), as their float op between a
// DequantizeLinear of each input and a QuantizeLinear of the output: the chain fuses into one
// elementwise loop (a residual add, a squeeze-excite's sigmoid and multiply).

// (x - zp) * scale for a per-tensor scale and zero point given as inputs i + 1, i + 2.
Var dequantized(OnnxImporter& im, const onnx::NodeProto& n, int i, const char* role) {
  Var x = im.in(n, i);
  check_operand(n, i, x, role);
  Var s = scale_in(im, n, i + 1, role);
  Var z = zero_point_in(im, n, i + 2, x.dtype(), role);
  if (s.type().static_numel() != 1 || z.type().static_numel() != 1) {
    throw UnsupportedError(input_label(n, i + 1, role) +
                           " with per-channel parameters (one scale and zero point supported)");
  }
  return (cast(x, DType::kFloat32) - cast(reshape(z, {}), DType::kFloat32)) * reshape(s, {});
}

// The float y quantized by the scale and zero point at inputs i, i + 1.
Var requantized(OnnxImporter& im, const onnx::NodeProto& n, Var y, int i) {
  Var s = scale_in(im, n, i, "Y's scale");
  Var z = im.in(n, i + 1);
  if (!is_byte(z.dtype()) || z.type().static_numel() != 1 || s.type().static_numel() != 1) {
    throw UserError(input_label(n, i + 1, "Y's zero point") + " must be one int8 or uint8 " +
                    "with one scale, got " + z.type().to_string() + " and " + s.type().to_string());
  }
  return quantize(y, reshape(s, {}), reshape(z, {}), z.dtype());
}

// One known value of input i, or none.
std::optional<double> known_value(OnnxImporter& im, const onnx::NodeProto& n, int i) {
  const Tensor* v = OnnxImporter::has_input(n, i) ? im.known(n.input(i)) : nullptr;
  if (!v || v->numel() != 1) return std::nullopt;
  return v->load(0);
}

OnnxOpSpec qlinear_binary(bool add) {
  return {{}, nullptr, [add](OnnxImporter& im, const onnx::NodeProto& n, const Attrs&) {
            Var a = dequantized(im, n, 0, "A"), b = dequantized(im, n, 3, "B");
            // Every parameter known (as quantize_static writes them): the bytes' sum
            // requantized directly (requantized_sum); `dequantized` has checked A's and B's.
            if (add && n.input_size() > 7) {
              const auto sa = known_value(im, n, 1), za = known_value(im, n, 2);
              const auto sb = known_value(im, n, 4), zb = known_value(im, n, 5);
              const auto sy = known_value(im, n, 6), zy = known_value(im, n, 7);
              Var zv = im.in(n, 7);
              if (sa && za && sb && zb && sy && zy && std::isfinite(*sy) && *sy > 0 &&
                  is_byte(zv.dtype())) {
                return Outs{requantized_sum(im.in(n, 0), *sa, static_cast<int64_t>(*za),
                                            im.in(n, 3), *sb, static_cast<int64_t>(*zb), *sy,
                                            static_cast<int64_t>(*zy), zv.dtype(), false)};
              }
            }
            return Outs{requantized(im, n, add ? a + b : a * b, 6)};
          }};
}

Outs convert_qlinear_sigmoid(OnnxImporter& im, const onnx::NodeProto& n, const Attrs&) {
  return Outs{requantized(im, n, sigmoid(dequantized(im, n, 0, "X")), 3)};
}

Outs convert_qlinear_leaky_relu(OnnxImporter& im, const onnx::NodeProto& n, const Attrs& a) {
  return Outs{
      requantized(im, n, leaky_relu(dequantized(im, n, 0, "X"), attr_float(a, "alpha", 0.01)), 3)};
}

// QLinearConcat(Y_scale, Y_zero_point, (X, X_scale, X_zero_point)...).
Outs convert_qlinear_concat(OnnxImporter& im, const onnx::NodeProto& n, const Attrs& a) {
  if (n.input_size() < 5 || (n.input_size() - 2) % 3 != 0) {
    throw UserError(
        "QLinearConcat takes Y's scale and zero point, then (X, scale, zero point) "
        "per input; got " +
        std::to_string(n.input_size()) + " inputs");
  }
  std::vector<Var> xs;
  for (int i = 2; i < n.input_size(); i += 3) xs.push_back(dequantized(im, n, i, "X"));
  const int64_t axis = rank_axis(attr_int(a, "axis", 0), xs[0].rank());
  return Outs{requantized(im, n, apply("concat", xs, {{"axis", axis}}), 0)};
}

Outs convert_qlinear_average_pool(OnnxImporter& im, const onnx::NodeProto& n, const Attrs& a) {
  if (attr_int(a, "channels_last", 0) != 0) {
    throw UnsupportedError("channels_last=1 (a channels-last QLinearAveragePool)");
  }
  Attrs p = a;
  p.erase("channels_last");
  return Outs{requantized(im, n, apply("average_pool", {dequantized(im, n, 0, "X")}, p), 3)};
}

Outs convert_qlinear_global_pool(OnnxImporter& im, const onnx::NodeProto& n, const Attrs& a) {
  Var x = dequantized(im, n, 0, "X");
  if (x.rank() < 3) throw UserError("X must have spatial dimensions, got " + x.type().to_string());
  std::vector<int64_t> axes;
  const bool last = attr_int(a, "channels_last", 0) != 0;
  for (int d = last ? 1 : 2; d < (last ? x.rank() - 1 : x.rank()); ++d) axes.push_back(d);
  return Outs{requantized(im, n, mean(x, axes, true), 3)};
}

// QGemm: A (M, K) by B (K, N), or (N, K) with transB, both bytes, with an int32 bias C; the
// output requantized with y_scale and y_zero_point, or float32 when they are absent.
Outs convert_qgemm(OnnxImporter& im, const onnx::NodeProto& n, const Attrs& a) {
  if (attr_int(a, "transA", 0) != 0) throw UnsupportedError("transA=1 (a transposed A)");
  Var x = im.in(n, 0), w = im.in(n, 3);
  check_operand(n, 0, x, "A");
  check_operand(n, 3, w, "B");
  if (w.rank() != 2 || x.rank() != 2) {
    throw UserError("A and B must be 2-D, got " + x.type().to_string() + " and " +
                    w.type().to_string());
  }
  if (attr_int(a, "transB", 0) != 0) w = transpose(w, {1, 0});
  const int64_t cols = w.type().dims[1];
  Var az = a_zero_point(im, n, 2, x.dtype(), "A's zero point");
  Var bz = per_column(zero_point_in(im, n, 5, w.dtype(), "B's zero point"), cols, n, 5,
                      "B's zero point");
  const double alpha = attr_float(a, "alpha", 1.0);
  std::optional<Var> bias;
  if (OnnxImporter::has_input(n, 6)) {
    Var c = im.in(n, 6);
    if (c.dtype() != DType::kInt32) {
      throw UnsupportedError(input_label(n, 6, "C") + " of " + c.type().to_string() +
                             " (an int32 bias is supported)");
    }
    bias = per_column(c, cols, n, 6, "C");
  }
  if (OnnxImporter::has_input(n, 7)) {
    Var m = multiplier(im, n, 1, 4, 7, cols) * alpha;
    Var yz = output_zero_point(im, n, 8);
    std::vector<Var> ins{x, w, az, bz, m, yz};
    Attrs p{{"requant", int64_t{1}}};
    if (bias) {
      ins.push_back(*bias);
      p["bias"] = int64_t{1};
    }
    return Outs{apply("qmatmul", ins, p)};
  }
  std::vector<Var> ins{x, w, az, bz};
  Attrs p;
  if (bias) {
    ins.push_back(*bias);
    p["bias"] = int64_t{1};
  }
  Var acc = apply("qmatmul", ins, p);
  Var sa = scale_in(im, n, 1, "A's scale"), sb = scale_in(im, n, 4, "B's scale");
  per_column(sb, cols, n, 4, "B's scale");
  return Outs{cast(acc, DType::kFloat32) * (reshape(sa, {}) * sb * alpha)};
}

}  // namespace

void add_quant_ops(OpTable& t) {
  t["com.microsoft.QLinearAdd"] = qlinear_binary(true);
  t["com.microsoft.QLinearMul"] = qlinear_binary(false);
  t["com.microsoft.QLinearSigmoid"] = {{}, nullptr, convert_qlinear_sigmoid};
  t["com.microsoft.QLinearGlobalAveragePool"] = {
      {"channels_last"}, nullptr, convert_qlinear_global_pool};
  t["com.microsoft.QGemm"] = {{"alpha", "transA", "transB"}, nullptr, convert_qgemm};
  t["com.microsoft.QLinearLeakyRelu"] = {{"alpha"}, nullptr, convert_qlinear_leaky_relu};
  t["com.microsoft.QLinearConcat"] = {{"axis"}, nullptr, convert_qlinear_concat};
  t["com.microsoft.QLinearAveragePool"] = {{"auto_pad", "ceil_mode", "channels_last",
                                            "count_include_pad", "kernel_shape", "pads", "strides"},
                                           nullptr,
                                           convert_qlinear_average_pool};
  t["QuantizeLinear"] = {{"axis"}, nullptr, convert_quantize};
  t["DequantizeLinear"] = {{"axis"}, nullptr, convert_dequantize};
  t["DynamicQuantizeLinear"] = {{}, nullptr, convert_dynamic_quantize};
  t["MatMulInteger"] = {{}, nullptr, convert_matmul_integer};
  t["QLinearMatMul"] = {{}, nullptr, convert_qlinear_matmul};
  const std::vector<std::string> conv_attrs{"group",     "kernel_shape", "strides",
                                            "dilations", "pads",         "auto_pad"};
  t["ConvInteger"] = {conv_attrs, nullptr, convert_conv_integer};
  t["QLinearConv"] = {conv_attrs, nullptr, convert_qlinear_conv};
}

}  // namespace kiln::onnx_import
