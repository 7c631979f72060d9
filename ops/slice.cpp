#include "ops/slice.h"
#include "ops/cuda_movement.h"
#include "ops/cuda_kernels.h"

#include <algorithm>

#include "ops/broadcast.h"
#include "ops/elementwise_loop.h"
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

Slice::Slice(Attrs props) : COp("slice", std::move(props)) {
  check_known_attrs(this->props(), {"starts", "ends", "axes", "steps"});
  starts_ = attr_ints(this->props(), "starts");
  ends_ = attr_ints(this->props(), "ends");
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
  if (inputs.size() != 1) throw UserError("slice takes 1 input");
  TensorType out = inputs[0];
  if (out.rank() == 0) throw UserError("slice: input must have rank >= 1");
  for (const auto& a : per_axis(out.rank())) {
    int64_t& d = out.dims[static_cast<size_t>(a.axis)];
    if (d == kDynamic) continue;
    int64_t first = 0, count = 0;
    slice_dim(d, a.start, a.end, a.step, &first, &count);
    d = count;
  }
  return {out};
}

std::vector<Shape> Slice::infer_shape(const std::vector<Shape>& inputs) const {
  Shape out = inputs[0];
  for (const auto& a : per_axis(static_cast<int>(out.size()))) {
    int64_t first = 0, count = 0;
    slice_dim(out[static_cast<size_t>(a.axis)], a.start, a.end, a.step, &first, &count);
    out[static_cast<size_t>(a.axis)] = count;
  }
  return {out};
}

void Slice::perform(const std::vector<Tensor>& inputs, std::vector<Tensor>& outputs) const {
  const Tensor& in = inputs[0];
  Shape strides = in.strides();
  int64_t offset = 0;
  for (const auto& a : per_axis(in.ndim())) {
    auto ax = static_cast<size_t>(a.axis);
    int64_t first = 0, count = 0;
    slice_dim(in.shape()[ax], a.start, a.end, a.step, &first, &count);
    offset += first * strides[ax];
    strides[ax] *= a.step;
  }
  if (outputs[0].numel() == 0) return;
  size_t byte_offset = in.byte_offset() + static_cast<size_t>(offset) * dtype_size(in.dtype());
  copy_into(Tensor(in.storage(), byte_offset, in.dtype(), outputs[0].shape(), strides), outputs[0]);
}

namespace {
std::string i64(int64_t v) { return c_literal_of(DType::kInt64, 0, v); }
}  // namespace

std::string Slice::c_code(const Node& node, const CodeNames& names, const Sub&) const {
  const int rank = node.inputs[0]->type.rank();
  const std::string& in = names.inputs[0];
  const std::string& out = names.outputs[0];
  const std::string es = std::to_string(dtype_size(node.inputs[0]->type.dtype));
  std::string s = "{\n  int64_t st[KILN_MAX_DIMS], off = 0, first, count;\n";
  s += "  for (int d = 0; d < " + std::to_string(rank) + "; ++d) st[d] = " + in + "->strides[d];\n";
  for (const auto& a : per_axis(rank)) {
    const std::string ax = std::to_string(a.axis);
    s += "  kiln_slice_dim(" + in + "->shape[" + ax + "], " + i64(a.start) + ", " + i64(a.end) +
         ", " + i64(a.step) + ", &first, &count);\n";
    s += "  off += first * st[" + ax + "];\n  st[" + ax + "] *= " + std::to_string(a.step) + ";\n";
  }
  s += "  (void)count;\n";
  s += "  kiln_copy_strided(" + out + "->data, (const char *)" + in + "->data + off * " + es +
       ", " + std::to_string(rank) + ", " + out + "->shape, st, " + es + ");\n}\n";
  return s;
}

bool Slice::has_cuda_code(const Node& node) const { return cuda_dtypes_ok(node); }

CudaCode Slice::cuda_code(const Node& node, const CodeNames& names, const Sub& sub) const {
  const int rank = node.inputs[0]->type.rank();
  const std::string& in = names.inputs[0];
  const std::string& out = names.outputs[0];
  CudaCode c;
  c.kernels.push_back(cuda_copy_kernel(sub, node.inputs[0]->type.dtype));
  // A strided view of the input (offset and stride per sliced axis), copied out.
  std::string h = "{\n  int64_t kiln_st[KILN_CUDA_MAX_RANK], kiln_off = 0, kiln_first, kiln_count;\n";
  h += "  for (int d = 0; d < " + std::to_string(rank) + "; ++d) kiln_st[d] = " + in + "->strides[d];\n";
  for (const auto& a : per_axis(rank)) {
    const std::string ax = std::to_string(a.axis);
    h += "  kiln_slice_dim(" + in + "->shape[" + ax + "], " + i64(a.start) + ", " + i64(a.end) +
         ", " + i64(a.step) + ", &kiln_first, &kiln_count);\n";
    h += "  kiln_off += kiln_first * kiln_st[" + ax + "];\n  kiln_st[" + ax + "] *= " +
         std::to_string(a.step) + ";\n";
  }
  h += "  (void)kiln_count;\n";
  h += cuda_copy_launch(c.kernels[0].name, rank, out + "->shape",
                        "(const char *)" + in + "->data + kiln_off * " +
                            std::to_string(dtype_size(node.inputs[0]->type.dtype)),
                        "kiln_st", out + "->data", out + "->strides");
  c.launch = h + "}\n";
  return c;
}

}  // namespace kiln
