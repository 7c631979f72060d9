#pragma once
// A strided view of an op's input: the operand an op reads is the input's elements at
// offset + sum(i_d * strides_d) (elements, the input taken as contiguous), for each index i
// of `dims`. The views pass (rewrite/cpu/matmul_views.cpp) gives a matmul its operands this way,
// so the transposes, head gathers and slices in front of attention's products copy nothing.
// Props encode a view as one int list: offset, rank, dims..., strides....
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "graph/attrs.h"
#include "graph/tensor_type.h"
#include "runtime/tensor.h"

namespace kiln {

struct OperandView {
  int64_t offset = 0;
  std::vector<int64_t> dims, strides;

  std::vector<int64_t> encode() const;
  // The view under props[name], or nothing when absent; AttrError when malformed.
  static std::optional<OperandView> from_props(const Attrs& props, const std::string& name);
  // Throws UserError (naming `what`) unless every element the view reads lies inside an
  // input of type `input` (static dimensions).
  void check_within(const TensorType& input, const std::string& what) const;
  // The operand as a (strided) tensor over `input`'s storage.
  Tensor of(const Tensor& input) const;
};

// A product's out_perm (props[name]; empty when absent): a permutation that keeps the last
// axis last, as the kernels store a product's rows in runs. AttrError otherwise.
std::vector<int64_t> out_perm_from_props(const Attrs& props, const std::string& name);

// C expressions for an operand's size and stride along d: the view's constants, or the input
// tensor's (a kiln_tensor * named `input`) when there is no view.
std::string c_operand_dim(const std::optional<OperandView>& view, const std::string& input, int d);
std::string c_operand_stride(const std::optional<OperandView>& view, const std::string& input,
                             int d);

}  // namespace kiln
