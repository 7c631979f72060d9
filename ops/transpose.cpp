#include "ops/transpose.h"

#include "ops/c/strided_copy.h"

#include "util/error.h"

namespace kiln {

Transpose::Transpose(Attrs props) : COp("transpose", std::move(props)) {
  check_known_attrs(this->props(), {"perm"});
  perm_ = attr_ints(this->props(), "perm", std::vector<int64_t>{});
}

std::vector<int> Transpose::perm_for(int rank) const {
  std::vector<int> p(static_cast<size_t>(rank));
  if (perm_.empty()) {
    for (int i = 0; i < rank; ++i) p[static_cast<size_t>(i)] = rank - 1 - i;
    return p;
  }
  if (static_cast<int>(perm_.size()) != rank) {
    throw UserError("transpose: perm has " + std::to_string(perm_.size()) + " entries for a rank-" +
                    std::to_string(rank) + " input");
  }
  std::vector<bool> used(static_cast<size_t>(rank), false);
  for (int i = 0; i < rank; ++i) {
    int64_t v = perm_[static_cast<size_t>(i)];
    if (v < 0 || v >= rank || used[static_cast<size_t>(v)]) {
      throw UserError("transpose: perm is not a permutation of 0.." + std::to_string(rank - 1));
    }
    used[static_cast<size_t>(v)] = true;
    p[static_cast<size_t>(i)] = static_cast<int>(v);
  }
  return p;
}

std::vector<TensorType> Transpose::infer_type(const std::vector<TensorType>& inputs) const {
  if (inputs.size() != 1) throw UserError("transpose takes 1 input");
  if (inputs[0].rank() > 16) throw UserError("transpose: rank > 16");
  auto p = perm_for(inputs[0].rank());
  TensorType out{inputs[0].dtype, {}};
  for (int v : p) out.dims.push_back(inputs[0].dims[static_cast<size_t>(v)]);
  return {out};
}

std::vector<Shape> Transpose::infer_shape(const std::vector<Shape>& inputs) const {
  auto p = perm_for(static_cast<int>(inputs[0].size()));
  Shape out;
  for (int v : p) out.push_back(inputs[0][static_cast<size_t>(v)]);
  return {out};
}

void Transpose::perform(const std::vector<Tensor>& inputs, std::vector<Tensor>& outputs) const {
  copy_into(inputs[0].permute(perm_for(inputs[0].ndim())), outputs[0]);
}

// Parts copy their sub-boxes (c_split_strided_copy). The permutation is the kernel's
// argument: transposes of one rank and element size are one kernel.
std::string Transpose::c_code(const Node& node, const CodeNames& names, const Sub& sub) const {
  const int rank = node.inputs[0]->type.rank();
  auto p = perm_for(rank);
  const std::string& in = names.inputs[0];
  const std::string& out = names.outputs[0];
  const std::string es = std::to_string(dtype_size(node.inputs[0]->type.dtype));
  std::string s = "{\n";
  s += "  int64_t st[KILN_MAX_DIMS];\n";
  for (int d = 0; d < rank; ++d) {
    s += "  st[" + std::to_string(d) + "] = " + in + "->strides[" +
         sub.value(p[static_cast<size_t>(d)], "perm" + std::to_string(d)) + "];\n";
  }
  s += c_split_strided_copy(out, "(const char *)" + in + "->data", "st", rank, es, sub.ctx);
  s += "}\n";
  return s;
}

}  // namespace kiln
