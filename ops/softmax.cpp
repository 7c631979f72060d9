#include "ops/softmax.h"

#include <cmath>
#include <limits>

#include "ops/broadcast.h"
#include "util/error.h"

namespace kiln {

Softmax::Softmax(bool log, Attrs props)
    : COp(log ? "log_softmax" : "softmax", std::move(props)), log_(log) {
  check_known_attrs(this->props(), {"axis"});
  axis_ = attr_int(this->props(), "axis", -1);
}

std::vector<TensorType> Softmax::infer_type(const std::vector<TensorType>& inputs) const {
  if (inputs.size() != 1) throw UserError(name() + " takes 1 input");
  const auto& in = inputs[0];
  if (in.dtype != DType::kFloat32 && in.dtype != DType::kFloat64) {
    throw UserError(name() + " requires float32 or float64, got " + std::string(dtype_name(in.dtype)));
  }
  if (in.rank() < 1) throw UserError(name() + ": input must have rank >= 1");
  normalize_axis(axis_, in.rank(), name());
  return {in};
}

std::vector<Shape> Softmax::infer_shape(const std::vector<Shape>& inputs) const { return {inputs[0]}; }

void Softmax::perform(const std::vector<Tensor>& inputs, std::vector<Tensor>& outputs) const {
  const Tensor& in = inputs[0];
  Tensor& out = outputs[0];
  const int axis = normalize_axis(axis_, in.ndim(), name());
  int64_t outer = 1, len = in.shape()[static_cast<size_t>(axis)], inner = 1;
  for (int d = 0; d < axis; ++d) outer *= in.shape()[static_cast<size_t>(d)];
  for (int d = axis + 1; d < in.ndim(); ++d) inner *= in.shape()[static_cast<size_t>(d)];
  for (int64_t o = 0; o < outer; ++o) {
    for (int64_t i = 0; i < inner; ++i) {
      auto at = [&](int64_t l) { return (o * len + l) * inner + i; };
      double mx = -std::numeric_limits<double>::infinity();
      for (int64_t l = 0; l < len; ++l) mx = std::max(mx, in.load(at(l)));
      if (mx == -std::numeric_limits<double>::infinity()) mx = 0;
      double sum = 0;
      for (int64_t l = 0; l < len; ++l) sum += std::exp(in.load(at(l)) - mx);
      for (int64_t l = 0; l < len; ++l) {
        double x = in.load(at(l)) - mx;
        out.store(at(l), log_ ? x - std::log(sum) : std::exp(x) / sum);
      }
    }
  }
}

std::string Softmax::c_code(const Node& node, const CodeNames& names, const Sub&) const {
  const auto& t = node.inputs[0]->type;
  const int rank = t.rank();
  const int axis = normalize_axis(axis_, rank, name());
  const std::string T(dtype_c_type(t.dtype));
  const std::string f = t.dtype == DType::kFloat32 ? "f" : "";
  const std::string m = "kiln_";  // kiln_math.h: both float widths
  const std::string& in = names.inputs[0];
  const std::string& out = names.outputs[0];
  // Copy into the contiguous output first, then work in place along (outer, len, inner).
  std::string s = "{\n";
  s += "  kiln_copy_strided(" + out + "->data, " + in + "->data, " + std::to_string(rank) + ", " + in +
       "->shape, " + in + "->strides, sizeof(" + T + "));\n";
  s += "  int64_t outer = 1, inner = 1;\n";
  s += "  const int64_t len = " + out + "->shape[" + std::to_string(axis) + "];\n";
  s += "  for (int d = 0; d < " + std::to_string(axis) + "; ++d) outer *= " + out + "->shape[d];\n";
  s += "  for (int d = " + std::to_string(axis + 1) + "; d < " + std::to_string(rank) + "; ++d) inner *= " +
       out + "->shape[d];\n";
  s += "  " + T + " *restrict y = (" + T + " *)" + out + "->data;\n";
  s += "  for (int64_t o = 0; o < outer; ++o) {\n";
  s += "    for (int64_t i = 0; i < inner; ++i) {\n";
  s += "      " + T + " *restrict row = y + o * len * inner + i;\n";
  s += "      " + T + " mx = -INFINITY;\n";
  s += "      for (int64_t l = 0; l < len; ++l) mx = row[l * inner] > mx ? row[l * inner] : mx;\n";
  s += "      if (mx == -INFINITY) mx = 0;\n";  // all -inf: keep exp(-inf - 0) = 0, no NaN from inf-inf
  s += "      " + T + " sum = 0;\n";
  if (log_) {
    s += "      for (int64_t l = 0; l < len; ++l) sum += " + m + "exp" + f + "(row[l * inner] - mx);\n";
    // (x - max) - log(sum): x - max is exact for nearby values, so large inputs keep precision.
    s += "      const " + T + " lse = log" + f + "(sum);\n";
    s += "      for (int64_t l = 0; l < len; ++l) row[l * inner] = (row[l * inner] - mx) - lse;\n";
  } else {
    // Rows along the last axis (inner == 1) get unit-stride loops: the exponentials
    // vectorize (kiln_math.h for float32) and the sum runs in 16 independent lanes.
    s += "      if (inner == 1) {\n";
    s += "        for (int64_t l = 0; l < len; ++l) row[l] = " + m + "exp" + f + "(row[l] - mx);\n";
    s += "        " + T + " lane[16] = {0};\n";
    s += "        int64_t l = 0;\n";
    s += "        for (; l + 16 <= len; l += 16)\n";
    s += "          for (int k = 0; k < 16; ++k) lane[k] += row[l + k];\n";
    s += "        for (; l < len; ++l) sum += row[l];\n";
    s += "        for (int k = 0; k < 16; ++k) sum += lane[k];\n";
    s += "      } else {\n";
    s += "        for (int64_t l = 0; l < len; ++l) {\n";
    s += "          const " + T + " e = " + m + "exp" + f + "(row[l * inner] - mx);\n";
    s += "          row[l * inner] = e;\n";
    s += "          sum += e;\n";
    s += "        }\n";
    s += "      }\n";
    s += "      const " + T + " scale = (" + T + ")1 / sum;\n";
    s += "      for (int64_t l = 0; l < len; ++l) row[l * inner] *= scale;\n";
  }
  s += "    }\n";
  s += "  }\n";
  s += "}\n";
  return s;
}

}  // namespace kiln
