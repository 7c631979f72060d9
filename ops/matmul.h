#pragma once
// NumPy matmul: 2-D and batched (batch dimensions broadcast); a 1-D operand is treated as
// a row (left) or column (right) vector and that dimension is dropped from the result.
#include "ops/cop.h"
#include "ops/operand_view.h"

namespace kiln {

class MatMul : public COp {
 public:
  explicit MatMul(Attrs props);
  bool c_threads_itself() const override { return true; }            // OpenBLAS
  std::vector<Variable*> grad(const GradArgs& args) const override;  // autodiff: ops/grad_*.cpp
  std::vector<TensorType> infer_type(const std::vector<TensorType>& inputs) const override;
  std::vector<Shape> infer_shape(const std::vector<Shape>& inputs) const override;
  double flops(const std::vector<Shape>& inputs, const std::vector<Shape>& outputs) const override;
  void perform(const std::vector<Tensor>& inputs, std::vector<Tensor>& outputs) const override;
  std::optional<int> cache_version() const override { return 9; }
  bool c_splittable(const Node& node) const override;
  int64_t c_split_unit(const Node& node) const override;
  bool c_heavy(const Node&) const override { return true; }
  bool packs_b(const Node& node) const;
  std::optional<SplitTiles> c_split_tiles(const Node& node, const CodeNames& names,
                                          const Sub& sub) const override;
  // A plain product: no operand views, no scale, no transposed output (forms of the CPU
  // passes).
  bool plain() const { return !views_[0] && !views_[1] && alpha_ == 1.0 && out_perm_.empty(); }
  std::string c_code(const Node& node, const CodeNames& names, const Sub& sub) const override;
  std::string c_support_code_apply(const Node& node, const std::string& prefix) const override;
  std::vector<std::string> c_preludes() const override { return {"kiln_index.h"}; }

 private:
  // The operands' types and shapes: the inputs', with a_view / b_view applied.
  std::vector<TensorType> operand_types(const std::vector<TensorType>& inputs) const;
  std::vector<Shape> operand_shapes(const std::vector<Shape>& inputs) const;
  int operand_rank(const Node& node, int k) const {
    const auto& v = views_[static_cast<size_t>(k)];
    return v ? static_cast<int>(v->dims.size()) : node.inputs[static_cast<size_t>(k)]->type.rank();
  }
  // The output's dims: the product's, permuted by out_perm.
  std::vector<int64_t> permuted(const std::vector<int64_t>& product) const;
  // A float product of two matrices: split in tiles on kiln's kernel (matmul.cpp).
  bool tiles_2d(const Node& node) const;
  std::optional<OperandView> views_[2];
  std::vector<int64_t> out_perm_;  // the output is the product transposed by this
  double alpha_ = 1.0;             // the product's scale (a scalar multiply folded in)
};

// Checks a matmul/gemm operand dtype (float32, float64, int32, int64).
void check_gemm_dtype(const std::string& op, DType a, DType b);

}  // namespace kiln
