#include "ops/pad.h"

#include <algorithm>

#include "ops/c/elementwise_loop.h"
#include "util/error.h"

namespace kiln {

PadMode pad_mode_of(const Attrs& props) {
  const std::string mode = attr_string(props, "mode", std::string("constant"));
  if (mode == "constant") return PadMode::kConstant;
  if (mode == "reflect") return PadMode::kReflect;
  if (mode == "edge") return PadMode::kEdge;
  if (mode == "wrap") return PadMode::kWrap;
  throw AttrError("mode", "'" + mode + "' is not constant, reflect, edge or wrap (pad)");
}

int64_t pad_source(int64_t i, int64_t n, PadMode mode) {
  if (i >= 0 && i < n) return i;
  switch (mode) {
    case PadMode::kEdge:
      return i < 0 ? 0 : n - 1;
    case PadMode::kWrap: {
      const int64_t m = i % n;
      return m < 0 ? m + n : m;
    }
    default: {
      if (n == 1) return 0;
      const int64_t period = 2 * (n - 1);
      int64_t m = i % period;
      if (m < 0) m += period;
      return m < n ? m : period - m;
    }
  }
}

namespace {

// The C of pad_source, for the generated code (the mode as its PadMode number), after its
// qualifiers.
const char* const kPadSourceBody = R"( int64_t kiln_pad_source(
    int64_t i, int64_t n, int mode) {
  if (i >= 0 && i < n) return i;
  if (mode == 2) return i < 0 ? 0 : n - 1;
  if (mode == 3) { const int64_t m = i % n; return m < 0 ? m + n : m; }
  if (n == 1) return 0;
  const int64_t period = 2 * (n - 1);
  int64_t m = i % period;
  if (m < 0) m += period;
  return m < n ? m : period - m;
}
)";
const std::string kPadSourceC = std::string("__attribute__((unused)) static") + kPadSourceBody;

// A non-constant mode reads its edge: every padded dimension needs one.
void check_padded_dims(const std::vector<int64_t>& dims, const std::vector<int64_t>& pads,
                       PadMode mode) {
  if (mode == PadMode::kConstant) return;
  for (size_t d = 0; d < dims.size(); ++d) {
    if (dims[d] == 0 && (pads[d] > 0 || pads[d + dims.size()] > 0)) {
      throw UserError("pad: dimension " + std::to_string(d) +
                      " is empty, and a non-constant mode pads from its values");
    }
  }
}

// The flat source index, in `from`'s logical row-major order, of each element of a tensor of
// dims `to` (padded), under `pads`.
int64_t source_flat(int64_t o, const Shape& to, const Shape& from, const std::vector<int64_t>& pads,
                    PadMode mode) {
  int64_t src = 0, stride = 1;
  for (size_t d = to.size(); d-- > 0;) {
    const int64_t c = o % to[d];
    o /= to[d];
    src += pad_source(c - pads[d], from[d], mode) * stride;
    stride *= from[d];
  }
  return src;
}

// The generated loop over runs of rows [lo, hi) of the padded shape: for each row, p_src is the
// offset of its source row in `from` and the body walks its `ow` positions as p_x.
std::string row_loop(const std::string& padded, const std::string& from, int rank,
                     const std::string& pads, int mode) {
  const std::string r1 = std::to_string(rank - 1), ms = std::to_string(mode);
  std::string s;
  s += "  const int64_t p_pb[" + std::to_string(rank) + "] = {" + pads + "};\n";
  s += "  const int64_t ow = " + padded + "->shape[" + r1 + "], p_n = " + from + "->shape[" + r1 +
       "], p_xs = " + from + "->strides[" + r1 + "];\n";
  s += "  (void)p_n; (void)p_xs;\n";
  s += "  for (int64_t p_row = p_lo; p_row < p_hi; ++p_row) {\n";
  s += "    int64_t p_rem = p_row, p_src = 0;\n";
  s += "    for (int d = " + std::to_string(rank - 2) + "; d >= 0; --d) {\n";
  s += "      const int64_t p_c = p_rem % " + padded + "->shape[d];\n";
  s += "      p_rem /= " + padded + "->shape[d];\n";
  s += "      p_src += kiln_pad_source(p_c - p_pb[d], " + from + "->shape[d], " + ms + ") * " +
       from + "->strides[d];\n";
  s += "    }\n";
  return s;
}

}  // namespace

Pad::Pad(Attrs props) : COp("pad", std::move(props)) {
  check_known_attrs(this->props(), {"pads", "value", "mode"});
  pads_ = attr_ints(this->props(), "pads");
  value_ = attr_float(this->props(), "value", 0.0);
  mode_ = pad_mode_of(this->props());
  for (int64_t p : pads_) {
    if (p < 0 && mode_ != PadMode::kConstant) {
      throw AttrError("pads",
                      "a negative pad (a crop) takes the constant mode; crop with a "
                      "slice before a reflect, edge or wrap pad");
    }
  }
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
  check_padded_dims(out.dims, pads_, mode_);
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
  check_padded_dims(inputs[0], pads_, mode_);
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
  if (mode_ != PadMode::kConstant) {
    for (int64_t o = 0; o < out.numel(); ++o)
      out.store(o, in.load(source_flat(o, out.shape(), in.shape(), pads_, mode_)));
    return;
  }
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

std::string Pad::source_c(const std::string& qualifiers) { return qualifiers + kPadSourceBody; }

std::string Pad::c_support_code() const { return mode_ == PadMode::kConstant ? "" : kPadSourceC; }

std::string Pad::c_code(const Node& node, const CodeNames& names, const Sub& sub) const {
  const auto& t = node.inputs[0]->type;
  const int rank = t.rank();
  const std::string& in = names.inputs[0];
  const std::string& out = names.outputs[0];
  if (mode_ != PadMode::kConstant && rank > 0) {
    // Each row: the positions that read the row in order are a straight copy, the padded
    // ones at either end go through kiln_pad_source.
    const std::string ct(dtype_c_type(t.dtype));
    const std::string& ctx = sub.ctx;
    std::string pads;
    for (int d = 0; d < rank; ++d)
      pads += (d ? ", " : "") + std::to_string(pads_[static_cast<size_t>(d)]);
    const std::string ms = std::to_string(static_cast<int>(mode_));
    const std::string pl = std::to_string(pads_[static_cast<size_t>(rank - 1)]);
    std::string s = "{\n";
    s += "  int64_t p_total = 1;\n";
    s += "  for (int d = 0; d < " + std::to_string(rank - 1) + "; ++d) p_total *= " + out +
         "->shape[d];\n";
    s += "  const int64_t p_lo = p_total * " + ctx + "->part / " + ctx + "->n_parts;\n";
    s += "  const int64_t p_hi = p_total * (" + ctx + "->part + 1) / " + ctx + "->n_parts;\n";
    s += row_loop(out, in, rank, pads, static_cast<int>(mode_));
    s += "    " + ct + " *p_dst = (" + ct + " *)" + out + "->data + p_row * ow;\n";
    s += "    const " + ct + " *p_s = (const " + ct + " *)" + in + "->data + p_src;\n";
    s += "    const int64_t p_a = " + pl + " > 0 ? (" + pl + " < ow ? " + pl + " : ow) : 0;\n";
    s += "    const int64_t p_b = " + pl + " + p_n < ow ? (" + pl + " + p_n > p_a ? " + pl +
         " + p_n : p_a) : ow;\n";
    s += "    for (int64_t p_x = 0; p_x < p_a; ++p_x)\n";
    s += "      p_dst[p_x] = p_s[kiln_pad_source(p_x - " + pl + ", p_n, " + ms + ") * p_xs];\n";
    s += "    for (int64_t p_x = p_a; p_x < p_b; ++p_x) p_dst[p_x] = p_s[(p_x - " + pl +
         ") * p_xs];\n";
    s += "    for (int64_t p_x = p_b; p_x < ow; ++p_x)\n";
    s += "      p_dst[p_x] = p_s[kiln_pad_source(p_x - " + pl + ", p_n, " + ms + ") * p_xs];\n";
    s += "  }\n}\n";
    return s;
  }
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

PadGrad::PadGrad(Attrs props) : COp("pad_grad", std::move(props)) {
  check_known_attrs(this->props(), {"pads", "value", "mode"});
  pads_ = attr_ints(this->props(), "pads");
  mode_ = pad_mode_of(this->props());
  if (mode_ == PadMode::kConstant)
    throw AttrError("mode", "pad_grad is for reflect, edge and wrap (constant pads crop)");
}

std::vector<TensorType> PadGrad::infer_type(const std::vector<TensorType>& inputs) const {
  if (inputs.size() != 1) throw UserError("pad_grad takes 1 input");
  TensorType out = inputs[0];
  const size_t r = out.dims.size();
  if (pads_.size() != 2 * r) {
    throw UserError("pad_grad: pads has " + std::to_string(pads_.size()) + " entries for rank " +
                    std::to_string(r));
  }
  if (out.dtype != DType::kFloat32 && out.dtype != DType::kFloat64)
    throw UnsupportedError("pad_grad: " + out.to_string() + " (float32 and float64)");
  for (size_t d = 0; d < r; ++d) {
    if (out.dims[d] == kDynamic) continue;
    out.dims[d] -= pads_[d] + pads_[d + r];
    if (out.dims[d] < 1)
      throw UserError("pad_grad: the pads leave dimension " + std::to_string(d) + " empty");
  }
  return {out};
}

std::vector<Shape> PadGrad::infer_shape(const std::vector<Shape>& inputs) const {
  Shape out = inputs[0];
  for (size_t d = 0; d < out.size(); ++d) {
    out[d] -= pads_[d] + pads_[d + out.size()];
    if (out[d] < 1)
      throw UserError("pad_grad: the pads leave dimension " + std::to_string(d) + " empty");
  }
  return {out};
}

void PadGrad::perform(const std::vector<Tensor>& inputs, std::vector<Tensor>& outputs) const {
  const Tensor& g = inputs[0];
  Tensor& dx = outputs[0];
  std::vector<double> acc(static_cast<size_t>(dx.numel()), 0.0);
  for (int64_t o = 0; o < g.numel(); ++o)
    acc[static_cast<size_t>(source_flat(o, g.shape(), dx.shape(), pads_, mode_))] += g.load(o);
  for (int64_t i = 0; i < dx.numel(); ++i) dx.store(i, acc[static_cast<size_t>(i)]);
}

std::string PadGrad::c_support_code() const { return kPadSourceC; }

std::string PadGrad::c_code(const Node& node, const CodeNames& names, const Sub&) const {
  // Positions of dY read by one source position add up there: one pass, not split (two
  // parts could add to one element).
  const auto& t = node.inputs[0]->type;
  const int rank = t.rank();
  const std::string ct(dtype_c_type(t.dtype));
  const std::string& g = names.inputs[0];
  const std::string& dx = names.outputs[0];
  std::string pads;
  for (int d = 0; d < rank; ++d)
    pads += (d ? ", " : "") + std::to_string(pads_[static_cast<size_t>(d)]);
  const std::string ms = std::to_string(static_cast<int>(mode_));
  const std::string pl = std::to_string(pads_[static_cast<size_t>(rank - 1)]);
  const std::string r1 = std::to_string(rank - 1);
  std::string s = "{\n";
  s += "  " + ct + " *p_dx = (" + ct + " *)" + dx + "->data;\n";
  // dX is a fresh contiguous buffer: its strides are its row-major ones.
  s += "  int64_t p_dxs[" + std::to_string(rank) + "], p_numel = 1;\n";
  s += "  for (int d = " + r1 + "; d >= 0; --d) { p_dxs[d] = p_numel; p_numel *= " + dx +
       "->shape[d]; }\n";
  s += "  for (int64_t i = 0; i < p_numel; ++i) p_dx[i] = 0;\n";
  s += "  const int64_t p_pb[" + std::to_string(rank) + "] = {" + pads + "};\n";
  s += "  int64_t p_rows = 1;\n";
  s += "  for (int d = 0; d < " + r1 + "; ++d) p_rows *= " + g + "->shape[d];\n";
  s += "  const int64_t ow = " + g + "->shape[" + r1 + "], p_n = " + dx + "->shape[" + r1 + "];\n";
  s += "  for (int64_t p_row = 0; p_row < p_rows; ++p_row) {\n";
  s += "    int64_t p_rem = p_row, p_dst = 0, p_src = 0;\n";
  s += "    for (int d = " + std::to_string(rank - 2) + "; d >= 0; --d) {\n";
  s += "      const int64_t p_c = p_rem % " + g + "->shape[d];\n";
  s += "      p_rem /= " + g + "->shape[d];\n";
  s += "      p_src += p_c * " + g + "->strides[d];\n";
  s += "      p_dst += kiln_pad_source(p_c - p_pb[d], " + dx + "->shape[d], " + ms +
       ") * p_dxs[d];\n";
  s += "    }\n";
  s += "    const " + ct + " *p_g = (const " + ct + " *)" + g + "->data + p_src;\n";
  s += "    for (int64_t p_x = 0; p_x < ow; ++p_x)\n";
  s += "      p_dx[p_dst + kiln_pad_source(p_x - " + pl + ", p_n, " + ms + ")] += p_g[p_x * " + g +
       "->strides[" + r1 + "]];\n";
  s += "  }\n}\n";
  return s;
}

}  // namespace kiln
