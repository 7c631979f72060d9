#include "ops/quant_params.h"

#include <cmath>

#include "util/error.h"

namespace kiln {
namespace {

// A scalar or a 1-D tensor of one element or `cols` elements (when `per_column`).
void check_vector(const std::string& op, const char* what, const TensorType& t, DType want,
                  bool per_column, int64_t cols) {
  if (t.dtype != want) {
    throw UserError(op + ": " + what + " must be " + std::string(dtype_name(want)) + ", got " +
                    t.to_string());
  }
  const int64_t n = t.static_numel();
  const bool ok =
      t.rank() <= 1 && (n == kDynamic || n == 1 || (per_column && (cols == kDynamic || n == cols)));
  if (!ok) {
    throw UserError(op + ": " + what + " must be a scalar" +
                    (per_column
                         ? " or hold one value per output column (" +
                               (cols == kDynamic ? std::string("?") : std::to_string(cols)) + ")"
                         : std::string()) +
                    ", got " + t.to_string());
  }
}

}  // namespace

QuantLayout QuantLayout::from_props(const Attrs& props, const std::string& op) {
  QuantLayout q;
  q.requant = attr_int(props, "requant", 0) != 0;
  q.bias = attr_int(props, "bias", 0) != 0;
  q.relu = attr_int(props, "relu", 0) != 0;
  q.scaled = attr_int(props, "scaled", 0) != 0;
  if (q.relu && !q.requant) throw UserError(op + ": relu needs requant (a quantized output)");
  if (q.scaled && q.requant)
    throw UserError(op +
                    ": scaled (a float32 output) and requant (a byte output) exclude each other");
  return q;
}

DType check_quant_inputs(const std::string& op, const QuantLayout& q,
                         const std::vector<TensorType>& in, DType b_dtype, int64_t cols) {
  if (in.size() != q.input_count()) {
    throw UserError(op + " takes " + std::to_string(q.input_count()) + " inputs here, got " +
                    std::to_string(in.size()));
  }
  if (!is_byte(in[0].dtype) || !is_byte(b_dtype)) {
    throw UserError(op + ": its operands must be int8 or uint8, got " + in[0].to_string() +
                    " and " + std::string(dtype_name(b_dtype)));
  }
  check_vector(op, "A's zero point", in[2], in[0].dtype, false, cols);
  check_vector(op, "B's zero point", in[3], b_dtype, true, cols);
  DType out = DType::kInt32;
  if (q.requant) {
    check_vector(op, "the scale", in[4], DType::kFloat32, true, cols);
    if (!is_byte(in[5].dtype)) {
      throw UserError(op + ": Y's zero point must be int8 or uint8, got " + in[5].to_string());
    }
    check_vector(op, "Y's zero point", in[5], in[5].dtype, false, cols);
    out = in[5].dtype;
  }
  if (q.scaled) {
    check_vector(op, "the scale", in[4], DType::kFloat32, true, cols);
    out = DType::kFloat32;
  }
  if (q.bias) check_vector(op, "the bias", in[q.bias_index()], DType::kInt32, true, cols);
  return out;
}

QuantReference::QuantReference(const QuantLayout& q, const std::vector<Tensor>& in) : q_(q) {
  a_zp_ = static_cast<int32_t>(in[2].load_int(0));
  b_zp_ = in[3].contiguous();
  if (q.requant || q.scaled) scale_ = in[4].contiguous();
  if (q.requant) {
    y_zp_ = static_cast<int32_t>(in[5].load_int(0));
    const bool u8 = in[5].dtype() == DType::kUInt8;
    lo_ = q.relu ? y_zp_ : (u8 ? 0 : -128);
    hi_ = u8 ? 255 : 127;
  }
  if (q.bias) bias_ = in[q.bias_index()].contiguous();
}

int32_t QuantReference::b_zp(int64_t j) const {
  return static_cast<int32_t>(b_zp_.load_int(b_zp_.numel() > 1 ? j : 0));
}

float QuantReference::scaled_out(int64_t acc, int64_t j) const {
  if (q_.bias) acc += bias_.load_int(j);
  const auto v = static_cast<int32_t>(static_cast<uint32_t>(acc));
  return static_cast<float>(v) * static_cast<float>(scale_.load(scale_.numel() > 1 ? j : 0));
}

int64_t QuantReference::out(int64_t acc, int64_t j) const {
  if (q_.bias) acc += bias_.load_int(j);
  // int32 wraps as the kernel's does (a sum past int32 is outside what int8 models make).
  const auto v = static_cast<int32_t>(static_cast<uint32_t>(acc));
  if (!q_.requant) return v;
  const float s = static_cast<float>(scale_.load(scale_.numel() > 1 ? j : 0));
  float y = std::nearbyint(static_cast<float>(v) * s) + static_cast<float>(y_zp_);
  y = y < static_cast<float>(lo_)   ? static_cast<float>(lo_)
      : y > static_cast<float>(hi_) ? static_cast<float>(hi_)
                                    : y;
  return static_cast<int64_t>(y);
}

std::string quant_c_params(const QuantLayout& q, const Node& node, const CodeNames& names,
                           bool b_u8) {
  const auto& in = names.inputs;
  std::string s = "  kiln_qparams qp;\n";
  s += "  qp.az = " + in[2] + ";\n  qp.bz = " + in[3] + ";\n";
  s += "  qp.scale = " + (q.requant || q.scaled ? in[4] : std::string("0")) + ";\n";
  s += "  qp.yz = " + (q.requant ? in[5] : std::string("0")) + ";\n";
  s += "  qp.bias = " + (q.bias ? in[q.bias_index()] : std::string("0")) + ";\n";
  s += "  qp.a_s8 = " + std::to_string(node.inputs[0]->type.dtype == DType::kInt8) + ";\n";
  s += "  qp.b_u8 = " + std::to_string(b_u8) + ";\n";
  const DType out = node.outputs[0]->type.dtype;
  s += std::string("  qp.out_u8 = ") +
       (q.scaled ? "KILN_Q_OUT_F32" : std::to_string(out == DType::kUInt8)) + ";\n";
  s += "  qp.relu = " + std::to_string(q.relu) + ";\n";
  s += "  qp.table = 0;\n";
  return s;
}

}  // namespace kiln
