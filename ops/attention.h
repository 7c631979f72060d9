#pragma once
// Attention's three steps in one: out = softmax(alpha * Q K, last axis) V, per matrix of a
// batch (the heads), the product stored transposed by out_perm. Q [.., M, D], K [.., D, N]
// (the keys already transposed) and V [.., N, Dv] are the inputs, each read through an
// optional OperandView (q_view, k_view, v_view), so the head splits and transposes in front
// copy nothing. An optional fourth input, a bool mask [M, N] shared by every matrix, replaces
// the scaled score (i, j) by mask_fill where mask[i][j] is true (false with mask_keeps=1):
// a causal decoder's where() before the softmax. With safe=1 a row of -inf scores attends
// to nothing (zeros, PyTorch's _safe_softmax) rather than giving NaN. The attention pass
// (rewrite/cpu/fuse_attention.cpp) makes it from matmul -> softmax -> matmul; the C code computes a
// block of rows' scores, their softmax and their share of the output while the scores are in cache,
// instead of writing all heads' scores out and reading them back twice.
#include <optional>

#include "ops/cop.h"
#include "ops/operand_view.h"

namespace kiln {

class Attention : public COp {
 public:
  explicit Attention(Attrs props);
  std::vector<TensorType> infer_type(const std::vector<TensorType>& inputs) const override;
  std::vector<Shape> infer_shape(const std::vector<Shape>& inputs) const override;
  double flops(const std::vector<Shape>& inputs, const std::vector<Shape>& outputs) const override;
  // matmul, softmax and matmul's own reference implementations, in turn.
  void perform(const std::vector<Tensor>& inputs, std::vector<Tensor>& outputs) const override;
  std::optional<int> cache_version() const override { return 2; }
  // The executor makes at most one part per matrix of the output (head); within that, the
  // parts share the (matrix, row block) pairs (c_code), so three heads split evenly in two.
  bool c_splittable(const Node& node) const override { return c_split_unit(node) > 0; }
  int64_t c_split_unit(const Node& node) const override;
  bool c_heavy(const Node&) const override { return true; }
  std::string c_code(const Node& node, const CodeNames& names, const Sub& sub) const override;
  std::string c_support_code_apply(const Node& node, const std::string& prefix) const override;
  std::vector<std::string> c_headers() const override { return {"<math.h>"}; }
  std::vector<std::string> c_preludes() const override {
    return {"kiln_index.h", "kiln_math.h", "kiln_softmax.h"};
  }

 private:
  // The operands' dims: the inputs', or their views'.
  std::vector<std::vector<int64_t>> operand_dims(const std::vector<Shape>& inputs) const;
  // Throws UserError unless the operands' ranks, batch and inner dimensions (and the mask's,
  // when given) agree; a dynamic dimension (kDynamic) agrees with anything until run time,
  // when infer_shape checks the actual sizes the kernel trusts.
  void check_operands(const std::vector<std::vector<int64_t>>& ops, const Shape* mask) const;
  std::optional<OperandView> views_[3];
  std::vector<int64_t> out_perm_;
  double alpha_ = 1.0;
  double mask_fill_ = 0.0;
  bool mask_keeps_ = false;  // a true mask element keeps the score (else it takes the fill)
  bool safe_ = false;
};

}  // namespace kiln
