#pragma once
// Transpose by any permutation (props: perm; empty reverses the axes).
#include "ops/cop.h"

namespace kiln {

class Transpose : public COp {
 public:
  explicit Transpose(Attrs props);
  std::vector<Variable*> grad(const GradArgs& args) const override;  // autodiff: ops/grad_*.cpp
  std::vector<TensorType> infer_type(const std::vector<TensorType>& inputs) const override;
  std::vector<Shape> infer_shape(const std::vector<Shape>& inputs) const override;
  void perform(const std::vector<Tensor>& inputs, std::vector<Tensor>& outputs) const override;
  std::optional<int> cache_version() const override { return 4; }
  bool c_splittable(const Node&) const override { return true; }
  std::string c_code(const Node& node, const CodeNames& names, const Sub& sub) const override;
  std::vector<std::string> c_preludes() const override { return {"kiln_index.h"}; }

  std::vector<int> perm_for(int rank) const;

 private:
  std::vector<int64_t> perm_;
};

}  // namespace kiln
