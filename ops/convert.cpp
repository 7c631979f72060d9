#include "ops/convert.h"

#include <cmath>
#include <cstdint>
#include <limits>

#include "ops/c/workspace.h"
#include "util/error.h"

namespace kiln {
namespace {

// A float's integer value: truncated, saturated at the int64 limits, NaN as 0 (a C cast of
// an out-of-range float is undefined).
int64_t float_to_int(double v) {
  if (std::isnan(v)) return 0;
  if (v >= 9223372036854775807.0) return std::numeric_limits<int64_t>::max();
  if (v <= -9223372036854775808.0) return std::numeric_limits<int64_t>::min();
  return static_cast<int64_t>(v);
}

uint64_t float_to_uint64(double v) {
  if (std::isnan(v) || v <= 0) return static_cast<uint64_t>(float_to_int(v));
  if (v >= 18446744073709551615.0) return std::numeric_limits<uint64_t>::max();
  return static_cast<uint64_t>(v);
}

}  // namespace

Convert::Convert(Attrs props) : COp("convert", std::move(props)) {
  check_known_attrs(this->props(), {"to"});
  const std::string to = attr_string(this->props(), "to");
  const auto dt = dtype_from_name(to);
  if (!dt) throw AttrError("to", "unknown dtype '" + to + "'");
  to_ = *dt;
}

std::vector<TensorType> Convert::infer_type(const std::vector<TensorType>& inputs) const {
  if (inputs.size() != 1) throw UserError("convert takes 1 input");
  return {TensorType{to_, inputs[0].dims}};
}

std::vector<Shape> Convert::infer_shape(const std::vector<Shape>& inputs) const {
  return {inputs[0]};
}

void Convert::perform(const std::vector<Tensor>& inputs, std::vector<Tensor>& outputs) const {
  const Tensor& in = inputs[0];
  Tensor& out = outputs[0];
  const DType from = in.dtype();
  for (int64_t i = 0; i < in.numel(); ++i) {
    if (to_ == DType::kBool) {
      out.store_int(i, is_float(from) ? in.load(i) != 0 : in.load_int(i) != 0);
    } else if (is_float(to_)) {
      // Unsigned 64-bit values past 2^63 read as negative int64: take them as unsigned.
      const double v = from == DType::kUInt64
                           ? static_cast<double>(static_cast<uint64_t>(in.load_int(i)))
                       : is_float(from) ? in.load(i)
                                        : static_cast<double>(in.load_int(i));
      out.store(i, to_ == DType::kFloat32 || to_ == DType::kFloat64 ? v : static_cast<float>(v));
    } else if (is_float(from)) {
      const double v = in.load(i);
      out.store_int(
          i, to_ == DType::kUInt64 ? static_cast<int64_t>(float_to_uint64(v)) : float_to_int(v));
    } else {
      out.store_int(i, in.load_int(i));
    }
  }
}

std::string Convert::c_support_code() const {
  return R"kiln(/* Float to integer: truncated, saturated at the 64-bit limits, NaN as 0. */
static __attribute__((unused)) int64_t kiln_f2i64(double v) {
  if (v != v) return 0;
  if (v >= 9223372036854775807.0) return INT64_MAX;
  if (v <= -9223372036854775808.0) return INT64_MIN;
  return (int64_t)v;
}
static __attribute__((unused)) uint64_t kiln_f2u64(double v) {
  if (v != v || v <= 0) return (uint64_t)kiln_f2i64(v);
  if (v >= 18446744073709551615.0) return UINT64_MAX;
  return (uint64_t)v;
}
)kiln";
}

std::string Convert::c_code(const Node& node, const CodeNames& names, const Sub& sub) const {
  const TensorType& t = node.inputs[0]->type;
  const DType from = t.dtype;
  const std::string src_t(dtype_c_type(from)), dst_t(dtype_c_type(to_));
  const std::string &in = names.inputs[0], &out = names.outputs[0];
  // The source value in its compute form (float for the 16-bit floats).
  std::string v = "s[i]";
  if (from == DType::kFloat16) v = "kiln_f16_to_f32(s[i])";
  if (from == DType::kBFloat16) v = "kiln_bf16_to_f32(s[i])";
  std::string store;
  if (to_ == DType::kBool) {
    store = "(uint8_t)(" + v + " != 0)";
  } else if (to_ == DType::kFloat16) {
    store = "kiln_f32_to_f16((float)(" + v + "))";
  } else if (to_ == DType::kBFloat16) {
    store = "kiln_f32_to_bf16((float)(" + v + "))";
  } else if (is_float(to_)) {
    store = "(" + dst_t + ")(" + v + ")";
  } else if (is_float(from)) {
    store = "(" + dst_t + ")" + (to_ == DType::kUInt64 ? "kiln_f2u64" : "kiln_f2i64") +
            "((double)(" + v + "))";
  } else {
    store = "(" + dst_t + ")(" + v + ")";
  }
  const std::string r = std::to_string(t.rank());
  std::string s = "{\n  int64_t n = 1;\n";
  s += "  for (int d = 0; d < " + r + "; ++d) n *= " + in + "->shape[d];\n";
  // A contiguous copy of the source first (any strides arrive), then one flat loop.
  s += c_workspace(src_t, "s", "n", "convert's dense input");
  s += "  kiln_copy_strided(s, " + in + "->data, " + r + ", " + in + "->shape, " + in +
       "->strides, sizeof(" + src_t + "));\n";
  s += "  " + dst_t + " *y = (" + dst_t + " *)" + out + "->data;\n";
  s += "  for (int64_t i = 0; i < n; ++i) y[i] = " + store + ";\n}\n";
  return s;
}

}  // namespace kiln
