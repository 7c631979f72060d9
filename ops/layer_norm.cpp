#include "ops/layer_norm.h"

#include <cmath>

#include "ops/broadcast.h"
#include "ops/c/elementwise_loop.h"
#include "ops/c/slice_loop.h"
#include "util/error.h"

namespace kiln {

LayerNorm::LayerNorm(Attrs props) : COp("layer_norm", std::move(props)) {
  check_known_attrs(this->props(), {"axis", "epsilon"});
  axis_ = attr_int(this->props(), "axis", -1);
  epsilon_ = attr_float(this->props(), "epsilon", 1e-5);
  if (!(epsilon_ >= 0) || !std::isfinite(epsilon_)) {
    throw UserError("layer_norm: epsilon must be finite and >= 0, got " + std::to_string(epsilon_));
  }
}

std::vector<TensorType> LayerNorm::infer_type(const std::vector<TensorType>& inputs) const {
  if (inputs.size() != 1) throw UserError("layer_norm takes 1 input");
  const auto& in = inputs[0];
  if (in.dtype != DType::kFloat32 && in.dtype != DType::kFloat64) {
    throw UserError("layer_norm requires float32 or float64, got " +
                    std::string(dtype_name(in.dtype)));
  }
  if (in.rank() < 1) throw UserError("layer_norm: input must have rank >= 1");
  normalize_axis(axis_, in.rank(), name());
  return {in};
}

std::vector<Shape> LayerNorm::infer_shape(const std::vector<Shape>& inputs) const {
  return {inputs[0]};
}

// In double, two passes (the mean, then the mean square deviation): the reference the C
// code is tested against.
void LayerNorm::perform(const std::vector<Tensor>& inputs, std::vector<Tensor>& outputs) const {
  const Tensor& in = inputs[0];
  Tensor& out = outputs[0];
  const int axis = normalize_axis(axis_, in.ndim(), name());
  int64_t outer = 1, len = 1;
  for (int d = 0; d < in.ndim(); ++d)
    (d < axis ? outer : len) *= in.shape()[static_cast<size_t>(d)];
  for (int64_t o = 0; o < outer; ++o) {
    double sum = 0;
    for (int64_t l = 0; l < len; ++l) sum += in.load(o * len + l);
    const double mean = sum / static_cast<double>(len);
    double sq = 0;
    for (int64_t l = 0; l < len; ++l) {
      const double d = in.load(o * len + l) - mean;
      sq += d * d;
    }
    const double inv = 1.0 / std::sqrt(sq / static_cast<double>(len) + epsilon_);
    for (int64_t l = 0; l < len; ++l) out.store(o * len + l, (in.load(o * len + l) - mean) * inv);
  }
}

int64_t LayerNorm::c_split_unit(const Node& node) const {
  const auto& t = node.inputs[0]->type;
  return static_slice_size(t, normalize_axis(axis_, t.rank(), name()));
}

bool LayerNorm::c_splittable(const Node& node) const { return c_split_unit(node) > 0; }

std::string LayerNorm::c_code(const Node& node, const CodeNames& names, const Sub& sub) const {
  const auto& t = node.inputs[0]->type;
  const int rank = t.rank();
  const int axis = normalize_axis(axis_, rank, name());
  const std::string T(dtype_c_type(t.dtype));
  std::string s = c_open_slice_loop(names, sub, rank, axis, T, "  const int64_t len = slice;\n");
  const std::string eps = "(" + T + ")" + c_literal(t.dtype, epsilon_);
  if (t.dtype == DType::kFloat32) {
    s += "    kiln_layer_norm_row_f32(xo, yo, len, " + eps + ");\n";
  } else {
    // float64: the same two passes, sums in 16 lanes (the form clang may or may not
    // vectorize; float64 rows are rare enough not to need the vector row).
    s += "    " + T + " lane[16], sum = 0, sq = 0;\n";
    s += "    int64_t l = 0;\n";
    s += "    for (int k = 0; k < 16; ++k) lane[k] = 0;\n";
    s += "    for (; l + 16 <= len; l += 16)\n";
    s += "      KILN_LANES for (int k = 0; k < 16; ++k) lane[k] += xo[l + k];\n";
    s += "    for (int k = 0; k < 16; ++k) sum += lane[k];\n";
    s += "    KILN_NOVEC for (; l < len; ++l) sum += xo[l];\n";
    s += "    const " + T + " mean = sum / (" + T + ")len;\n";
    s += "    for (int k = 0; k < 16; ++k) lane[k] = 0;\n";
    s += "    for (l = 0; l + 16 <= len; l += 16)\n";
    s += "      KILN_LANES for (int k = 0; k < 16; ++k) {\n";
    s += "        const " + T + " d = xo[l + k] - mean;\n";
    s += "        lane[k] += d * d;\n";
    s += "      }\n";
    s += "    for (int k = 0; k < 16; ++k) sq += lane[k];\n";
    s += "    KILN_NOVEC for (; l < len; ++l) sq += (xo[l] - mean) * (xo[l] - mean);\n";
    s += "    const " + T + " inv = (" + T + ")1 / sqrt(sq / (" + T + ")len + " + eps + ");\n";
    s += "    KILN_SAME_INDEX for (l = 0; l < len; ++l) yo[l] = (xo[l] - mean) * inv;\n";
  }
  s += "  }\n";
  s += "}\n";
  return s;
}

}  // namespace kiln
