#include "ops/pad.h"

#include <algorithm>

#include "ops/c/elementwise_loop.h"
#include "util/error.h"

namespace kiln {

Pad::Pad(Attrs props) : COp("pad", std::move(props)) {
  check_known_attrs(this->props(), {"pads", "value"});
  pads_ = attr_ints(this->props(), "pads");
  value_ = attr_float(this->props(), "value", 0.0);
}

void Pad::check_rank(int rank) const {
  if (static_cast<int>(pads_.size()) != 2 * rank) {
    throw UserError("pad: pads has " + std::to_string(pads_.size()) + " entries for a rank-" +
                    std::to_string(rank) + " input (needs " + std::to_string(2 * rank) + ")");
  }
}

std::vector<TensorType> Pad::infer_type(const std::vector<TensorType>& inputs) const {
  if (inputs.size() != 1) throw UserError("pad takes 1 input");
  TensorType out = inputs[0];
  check_rank(out.rank());
  if (out.dtype == DType::kFloat16 || out.dtype == DType::kBFloat16) {
    throw UserError("pad: " + out.to_string() + " is not supported");
  }
  for (int d = 0; d < out.rank(); ++d) {
    auto ds = static_cast<size_t>(d);
    if (out.dims[ds] == kDynamic) continue;
    out.dims[ds] += pads_[ds] + pads_[ds + out.dims.size()];
    if (out.dims[ds] < 0)
      throw UserError("pad: pads crop dimension " + std::to_string(d) + " below 0");
  }
  return {out};
}

std::vector<Shape> Pad::infer_shape(const std::vector<Shape>& inputs) const {
  Shape out = inputs[0];
  for (size_t d = 0; d < out.size(); ++d) {
    out[d] += pads_[d] + pads_[d + out.size()];
    if (out[d] < 0) throw UserError("pad: pads crop dimension " + std::to_string(d) + " below 0");
  }
  return {out};
}

void Pad::perform(const std::vector<Tensor>& inputs, std::vector<Tensor>& outputs) const {
  const Tensor& in = inputs[0];
  Tensor& out = outputs[0];
  for (int64_t i = 0; i < out.numel(); ++i) out.store(i, value_);
  Tensor src = in, dst = out;
  const size_t r = in.shape().size();
  for (size_t d = 0; d < r; ++d) {
    const int64_t begin = pads_[d];
    const int64_t s0 = std::max<int64_t>(0, -begin), d0 = std::max<int64_t>(0, begin);
    const int64_t len = std::min(in.shape()[d] - s0, out.shape()[d] - d0);
    if (len <= 0) return;
    src = src.slice(static_cast<int>(d), s0, s0 + len);
    dst = dst.slice(static_cast<int>(d), d0, d0 + len);
  }
  copy_into(src, dst);
}

std::string Pad::c_code(const Node& node, const CodeNames& names, const Sub&) const {
  const auto& t = node.inputs[0]->type;
  const int rank = t.rank();
  const std::string& in = names.inputs[0];
  const std::string& out = names.outputs[0];
  const std::string es = std::to_string(dtype_size(t.dtype));
  const std::string ct(dtype_c_type(t.dtype));
  std::string s = "{\n";
  s += "  " + ct + " *o = (" + ct + " *)" + out + "->data;\n";
  s += "  int64_t n = 1, ost[KILN_MAX_DIMS], len[KILN_MAX_DIMS], soff = 0, doff = 0;\n";
  s += "  for (int d = " + std::to_string(rank - 1) + "; d >= 0; --d) { ost[d] = n; n *= " + out +
       "->shape[d]; }\n";
  s += "  for (int64_t i = 0; i < n; ++i) o[i] = " + c_literal(t.dtype, value_) + ";\n";
  for (int d = 0; d < rank; ++d) {
    const std::string ds = std::to_string(d);
    const int64_t b = pads_[static_cast<size_t>(d)];
    const int64_t s0 = std::max<int64_t>(0, -b), d0 = std::max<int64_t>(0, b);
    s += "  len[" + ds + "] = " + in + "->shape[" + ds + "] - " + std::to_string(s0) + ";\n";
    s += "  if (" + out + "->shape[" + ds + "] - " + std::to_string(d0) + " < len[" + ds +
         "]) len[" + ds + "] = " + out + "->shape[" + ds + "] - " + std::to_string(d0) + ";\n";
    s += "  if (len[" + ds + "] <= 0) n = 0;\n";
    s += "  soff += " + std::to_string(s0) + " * " + in + "->strides[" + ds + "];\n";
    s += "  doff += " + std::to_string(d0) + " * ost[" + ds + "];\n";
  }
  s += "  if (n > 0) kiln_copy_nd(o + doff, ost, (const " + ct + " *)" + in + "->data + soff, " +
       in + "->strides, " + std::to_string(rank) + ", len, " + es + ");\n}\n";
  return s;
}

}  // namespace kiln
