#include "ops/slice.h"

#include <algorithm>

#include "ops/broadcast.h"
#include "ops/c/elementwise_loop.h"
#include "ops/c/strided_copy.h"
#include "util/error.h"

namespace kiln {

void slice_dim(int64_t dim, int64_t start, int64_t end, int64_t step, int64_t* first,
               int64_t* count) {
  // Mirrors kiln_slice_dim in kiln_index.h; the op tests compare the two.
  if (dim == 0) {
    *first = *count = 0;
    return;
  }
  if (start < 0) start += dim;
  if (end < 0) end += dim;
  if (step > 0) {
    start = std::clamp<int64_t>(start, 0, dim);
    end = std::clamp<int64_t>(end, 0, dim);
    *count = end > start ? (end - start + step - 1) / step : 0;
  } else {
    start = std::clamp<int64_t>(start, 0, dim - 1);
    end = std::clamp<int64_t>(end, -1, dim - 1);
    *count = start > end ? (start - end - step - 1) / -step : 0;
  }
  *first = *count > 0 ? start : 0;
}

namespace {

std::vector<DimExpr> bounds(const Attrs& props, const std::string& ints, const std::string& exprs) {
  if (props.count(exprs)) {
    if (props.count(ints)) throw AttrError(exprs, "given together with " + ints);
    try {
      return parse_dim_exprs(attr_string(props, exprs));
    } catch (const UserError& e) {
      throw AttrError(exprs, e.what());
    }
  }
  std::vector<DimExpr> out;
  for (int64_t v : attr_ints(props, ints)) out.push_back(DimExpr::constant(v));
  return out;
}

}  // namespace

Slice::Slice(Attrs props) : COp("slice", std::move(props)) {
  check_known_attrs(this->props(), {"starts", "ends", "axes", "steps", "starts_dims", "ends_dims"});
  starts_ = bounds(this->props(), "starts", "starts_dims");
  ends_ = bounds(this->props(), "ends", "ends_dims");
  axes_ = attr_ints(this->props(), "axes", std::vector<int64_t>{});
  steps_ = attr_ints(this->props(), "steps", std::vector<int64_t>{});
  const size_t n = starts_.size();
  if (ends_.size() != n || (!axes_.empty() && axes_.size() != n) ||
      (!steps_.empty() && steps_.size() != n)) {
    throw AttrError("ends", "starts, ends, axes and steps must have the same length");
  }
  for (int64_t s : steps_) {
    if (s == 0) throw AttrError("steps", "a step of 0 is not allowed");
  }
  for (size_t i = 0; i < n; ++i)
    sources_ = std::max({sources_, starts_[i].max_input(), ends_[i].max_input()});
}

std::vector<Slice::AxisSlice> Slice::per_axis(int rank) const {
  std::vector<AxisSlice> out;
  std::vector<bool> seen(static_cast<size_t>(rank), false);
  for (size_t i = 0; i < starts_.size(); ++i) {
    int axis = normalize_axis(axes_.empty() ? static_cast<int64_t>(i) : axes_[i], rank, "slice");
    if (seen[static_cast<size_t>(axis)])
      throw UserError("slice: axis " + std::to_string(axis) + " given twice");
    seen[static_cast<size_t>(axis)] = true;
    out.push_back({axis, starts_[i], ends_[i], steps_.empty() ? 1 : steps_[i]});
  }
  return out;
}

std::vector<TensorType> Slice::infer_type(const std::vector<TensorType>& inputs) const {
  if (static_cast<int>(inputs.size()) != sources_ + 1) {
    throw UserError("slice takes " + std::to_string(sources_ + 1) + " input" +
                    (sources_ ? "s (data, then inputs read for their shapes)" : "") + ", got " +
                    std::to_string(inputs.size()));
  }
  TensorType out = inputs[0];
  if (out.rank() == 0) throw UserError("slice: input must have rank >= 1");
  for (const auto& a : per_axis(out.rank())) {
    int64_t& d = out.dims[static_cast<size_t>(a.axis)];
    const auto start = a.start.eval_static(inputs), end = a.end.eval_static(inputs);
    if (d == kDynamic) continue;
    if (!start || !end) {
      d = kDynamic;
      continue;
    }
    int64_t first = 0, count = 0;
    slice_dim(d, *start, *end, a.step, &first, &count);
    d = count;
  }
  return {out};
}

std::vector<Shape> Slice::infer_shape(const std::vector<Shape>& inputs) const {
  Shape out = inputs[0];
  for (const auto& a : per_axis(static_cast<int>(out.size()))) {
    int64_t first = 0, count = 0;
    slice_dim(out[static_cast<size_t>(a.axis)], a.start.eval(inputs), a.end.eval(inputs), a.step,
              &first, &count);
    out[static_cast<size_t>(a.axis)] = count;
  }
  return {out};
}

void Slice::perform(const std::vector<Tensor>& inputs, std::vector<Tensor>& outputs) const {
  const Tensor& in = inputs[0];
  std::vector<Shape> shapes;
  for (const Tensor& t : inputs) shapes.push_back(t.shape());
  Shape strides = in.strides();
  int64_t offset = 0;
  for (const auto& a : per_axis(in.ndim())) {
    auto ax = static_cast<size_t>(a.axis);
    int64_t first = 0, count = 0;
    slice_dim(in.shape()[ax], a.start.eval(shapes), a.end.eval(shapes), a.step, &first, &count);
    offset += first * strides[ax];
    strides[ax] *= a.step;
  }
  if (outputs[0].numel() == 0) return;
  size_t byte_offset = in.byte_offset() + static_cast<size_t>(offset) * dtype_size(in.dtype());
  copy_into(Tensor(in.storage(), byte_offset, in.dtype(), outputs[0].shape(), strides), outputs[0]);
}

// The strided view's element offset and strides (`PREFIXoff`, `PREFIXst`) for the C and
// CUDA host code alike.
std::string Slice::c_offsets(const Node& node, const std::vector<std::string>& inputs,
                             const std::string& p, const Sub* sub) const {
  const int rank = node.inputs[0]->type.rank();
  const std::string& in = inputs[0];
  // Constant bounds and steps are the kernel's run-time arguments where it has them, so
  // slices that differ only in where they cut share one kernel (GhostNet had fifteen).
  const auto arg = [&](int64_t v, std::string_view name) {
    return sub && sub->args ? sub->value(v, name) : "INT64_C(" + std::to_string(v) + ")";
  };
  const auto bound = [&](const DimExpr& e, std::string_view name) {
    const std::optional<int64_t> v = e.value();
    return v ? arg(*v, name) : e.c_expr(inputs);
  };
  std::string s = "  int64_t " + p + "st[" + std::to_string(std::max(rank, 1)) + "], " + p +
                  "off = 0, " + p + "first, " + p + "count;\n";
  s += "  for (int d = 0; d < " + std::to_string(rank) + "; ++d) " + p + "st[d] = " + in +
       "->strides[d];\n";
  for (const auto& a : per_axis(rank)) {
    const std::string ax = std::to_string(a.axis);
    const std::string step = arg(a.step, "step");
    s += "  kiln_slice_dim(" + in + "->shape[" + ax + "], " + bound(a.start, "start") + ", " +
         bound(a.end, "end") + ", " + step + ", &" + p + "first, &" + p + "count);\n";
    s += "  " + p + "off += " + p + "first * " + p + "st[" + ax + "];\n  " + p + "st[" + ax +
         "] *= " + step + ";\n";
  }
  return s + "  (void)" + p + "count;\n";
}

std::string Slice::c_code(const Node& node, const CodeNames& names, const Sub& sub) const {
  const int rank = node.inputs[0]->type.rank();
  const std::string& in = names.inputs[0];
  const std::string& out = names.outputs[0];
  const std::string es = std::to_string(dtype_size(node.inputs[0]->type.dtype));
  std::string s = "{\n" + c_offsets(node, names.inputs, "", &sub);
  s += c_split_strided_copy(out, "((const char *)" + in + "->data + off * " + es + ")", "st", rank,
                            es, sub.ctx);
  s += "}\n";
  return s;
}

}  // namespace kiln
