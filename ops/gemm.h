#pragma once
// ONNX-style Gemm: Y = alpha * op(A) op(B) + beta * C, with op() an optional transpose and
// C (optional) broadcast to (M, N). Props: alpha, beta, transA, transB.
#include "ops/cop.h"

namespace kiln {

class Gemm : public COp {
 public:
  explicit Gemm(Attrs props);
  std::vector<TensorType> infer_type(const std::vector<TensorType>& inputs) const override;
  std::vector<Shape> infer_shape(const std::vector<Shape>& inputs) const override;
  void perform(const std::vector<Tensor>& inputs, std::vector<Tensor>& outputs) const override;
  std::optional<int> cache_version() const override { return 2; }
  std::string c_code(const Node& node, const CodeNames& names, const Sub& sub) const override;
  std::string c_support_code_apply(const Node& node, const std::string& prefix) const override;

 private:
  double alpha_, beta_;
  bool trans_a_, trans_b_;
};

}  // namespace kiln
