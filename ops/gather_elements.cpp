#include "ops/gather_elements.h"

#include "ops/broadcast.h"
#include "util/error.h"
#include "util/strings.h"

namespace kiln {

GatherElements::GatherElements(Attrs props) : COp("gather_elements", std::move(props)) {
  check_known_attrs(this->props(), {"axis"});
  axis_ = attr_int(this->props(), "axis", 0);
}

std::vector<TensorType> GatherElements::infer_type(const std::vector<TensorType>& inputs) const {
  if (inputs.size() != 2) throw UserError("gather_elements takes 2 inputs (data, indices)");
  const auto& data = inputs[0];
  const auto& idx = inputs[1];
  if (idx.dtype != DType::kInt32 && idx.dtype != DType::kInt64)
    throw UserError("gather_elements: indices must be int32 or int64, got " + idx.to_string());
  if (data.rank() == 0 || idx.rank() != data.rank()) {
    throw UserError("gather_elements: indices " + idx.to_string() + " must have the rank of data " +
                    data.to_string() + " (at least 1)");
  }
  const int axis = normalize_axis(axis_, data.rank(), "gather_elements");
  for (int d = 0; d < data.rank(); ++d) {
    const int64_t a = data.dims[static_cast<size_t>(d)], b = idx.dims[static_cast<size_t>(d)];
    if (d != axis && a != kDynamic && b != kDynamic && b > a) {
      throw UserError("gather_elements: indices " + idx.to_string() + " exceed data " +
                      data.to_string() + " in dimension " + std::to_string(d));
    }
  }
  return {TensorType{data.dtype, idx.dims}};
}

std::vector<Shape> GatherElements::infer_shape(const std::vector<Shape>& inputs) const {
  const Shape &data = inputs[0], &idx = inputs[1];
  const int axis = normalize_axis(axis_, static_cast<int>(data.size()), "gather_elements");
  for (size_t d = 0; d < data.size(); ++d) {
    if (static_cast<int>(d) != axis && idx[d] > data[d]) {
      throw UserError("gather_elements: indices " + dims_to_string(idx) + " exceed data " +
                      dims_to_string(data) + " in dimension " + std::to_string(d));
    }
  }
  return {idx};
}

void GatherElements::perform(const std::vector<Tensor>& inputs,
                             std::vector<Tensor>& outputs) const {
  const Tensor& data = inputs[0];
  const Tensor& idx = inputs[1];
  Tensor& out = outputs[0];
  const int rank = data.ndim();
  const auto axis = static_cast<size_t>(normalize_axis(axis_, rank, "gather_elements"));
  const int64_t dim = data.shape()[axis];
  // Row-major strides of data's logical layout (load() takes logical flat indices).
  Shape dstride(static_cast<size_t>(rank), 1);
  for (size_t d = dstride.size(); d-- > 1;) dstride[d - 1] = dstride[d] * data.shape()[d];
  Shape at(static_cast<size_t>(rank), 0);
  for (int64_t i = 0; i < out.numel(); ++i) {
    int64_t k = idx.load_int(i);
    if (k < -dim || k >= dim) {
      throw UserError("gather_elements: index " + std::to_string(k) + " is out of range for axis " +
                      std::to_string(axis) + " of size " + std::to_string(dim));
    }
    if (k < 0) k += dim;
    int64_t src = 0;
    for (size_t d = 0; d < at.size(); ++d) src += (d == axis ? k : at[d]) * dstride[d];
    if (is_float(data.dtype())) {
      out.store(i, data.load(src));
    } else {
      out.store_int(i, data.load_int(src));
    }
    for (size_t d = at.size(); d-- > 0;) {
      if (++at[d] < out.shape()[d]) break;
      at[d] = 0;
    }
  }
}

std::string GatherElements::c_code(const Node& node, const CodeNames& names, const Sub& sub) const {
  const int rank = node.inputs[0]->type.rank();
  const int axis = normalize_axis(axis_, rank, "gather_elements");
  const std::string t(dtype_c_type(node.inputs[0]->type.dtype));
  const std::string it(dtype_c_type(node.inputs[1]->type.dtype));
  const std::string &data = names.inputs[0], &idx = names.inputs[1], &out = names.outputs[0];
  const std::string r = std::to_string(rank), ax = std::to_string(axis);
  // One pass over the output in row-major order, carrying its coordinate.
  std::string s = "{\n  int64_t at[" + r + "] = {0}, n = 1;\n";
  s += "  const int64_t dim = " + data + "->shape[" + ax + "];\n";
  s += "  for (int d = 0; d < " + r + "; ++d) n *= " + out + "->shape[d];\n";
  s += "  for (int64_t i = 0; i < n; ++i) {\n    int64_t ioff = 0, doff = 0;\n";
  s += "    for (int d = 0; d < " + r + "; ++d) {\n      ioff += at[d] * " + idx +
       "->strides[d];\n      if (d != " + ax + ") doff += at[d] * " + data +
       "->strides[d];\n    }\n";
  s += "    int64_t k = (int64_t)((const " + it + " *)" + idx + "->data)[ioff];\n";
  s += "    if (k < -dim || k >= dim) " + sub.fail + "(\"gather_elements: index %lld is out of " +
       "range for axis " + ax + " of size %lld\", (long long)k, (long long)dim);\n";
  s += "    if (k < 0) k += dim;\n";
  s += "    ((" + t + " *)" + out + "->data)[i] = ((const " + t + " *)" + data +
       "->data)[doff + k * " + data + "->strides[" + ax + "]];\n";
  s += "    for (int d = " + std::to_string(rank - 1) + "; d >= 0; --d) {\n      if (++at[d] < " + out +
       "->shape[d]) break;\n      at[d] = 0;\n    }\n  }\n}\n";
  return s;
}

}  // namespace kiln
