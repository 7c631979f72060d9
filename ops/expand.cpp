#include "ops/expand.h"

#include <algorithm>

#include "ops/broadcast.h"
#include "util/error.h"

namespace kiln {

Expand::Expand(Attrs props) : COp("expand", std::move(props)) {
  check_known_attrs(this->props(), {"shape", "dims"});
  if (this->props().count("dims")) {
    if (this->props().count("shape")) throw AttrError("dims", "given together with shape");
    try {
      dims_ = parse_dim_exprs(attr_string(this->props(), "dims"));
    } catch (const UserError& e) {
      throw AttrError("dims", e.what());
    }
    return;
  }
  shape_ = attr_ints(this->props(), "shape");
  for (int64_t d : shape_) {
    if (d < 0) throw AttrError("shape", "dimensions must be >= 0");
  }
}

std::vector<TensorType> Expand::infer_type(const std::vector<TensorType>& inputs) const {
  std::vector<int64_t> target = shape_;
  if (dims_) {
    int needed = 0;
    for (const DimExpr& e : *dims_) needed = std::max(needed, e.max_input());
    if (static_cast<int>(inputs.size()) != needed + 1) {
      throw UserError("expand with dims " + dim_exprs_to_string(*dims_) + " takes " +
                      std::to_string(needed + 1) + " inputs, got " + std::to_string(inputs.size()));
    }
    target.clear();
    for (const DimExpr& e : *dims_) {
      const auto v = e.eval_static(inputs);
      target.push_back(v ? *v : kDynamic);
    }
  } else if (inputs.size() != 1) {
    throw UserError("expand takes 1 input");
  }
  if (std::max(inputs[0].rank(), static_cast<int>(target.size())) > 16)
    throw UserError("expand: rank > 16");
  return {TensorType{inputs[0].dtype, broadcast_dims({inputs[0].dims, target})}};
}

std::vector<Shape> Expand::infer_shape(const std::vector<Shape>& inputs) const {
  if (!dims_) return {broadcast_shapes({inputs[0], shape_})};
  Shape target;
  for (const DimExpr& e : *dims_) {
    target.push_back(e.eval(inputs));
    if (target.back() < 0)
      throw UserError("expand: dimension " + e.str() + " is " + std::to_string(target.back()));
  }
  return {broadcast_shapes({inputs[0], target})};
}

void Expand::perform(const std::vector<Tensor>& inputs, std::vector<Tensor>& outputs) const {
  const Tensor& in = inputs[0];
  Tensor& out = outputs[0];
  const size_t r = out.shape().size(), lead = r - static_cast<size_t>(in.ndim());
  Shape strides(r, 0);
  for (size_t d = lead; d < r; ++d) {
    if (in.shape()[d - lead] != 1) strides[d] = in.strides()[d - lead];
  }
  if (out.numel() == 0) return;
  copy_into(Tensor(in.storage(), in.byte_offset(), in.dtype(), out.shape(), strides), out);
}

std::string Expand::c_code(const Node& node, const CodeNames& names, const Sub&) const {
  const int in_rank = node.inputs[0]->type.rank();
  const int rank = node.outputs[0]->type.rank();
  const std::string& in = names.inputs[0];
  const std::string& out = names.outputs[0];
  const std::string es = std::to_string(dtype_size(node.inputs[0]->type.dtype));
  std::string s = "{\n  int64_t st[KILN_MAX_DIMS];\n";
  for (int d = 0; d < rank; ++d) {
    const int k = d - (rank - in_rank);
    const std::string ds = std::to_string(d), ks = std::to_string(k);
    s += k < 0 ? "  st[" + ds + "] = 0;\n"
               : "  st[" + ds + "] = " + in + "->shape[" + ks + "] == 1 ? 0 : " + in +
                     "->strides[" + ks + "];\n";
  }
  s += "  kiln_copy_strided(" + out + "->data, " + in + "->data, " + std::to_string(rank) + ", " +
       out + "->shape, st, " + es + ");\n}\n";
  return s;
}

}  // namespace kiln
