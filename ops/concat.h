#pragma once
// Concatenation of one or more tensors along an axis (props: axis).
#include "ops/cop.h"

namespace kiln {

class Concat : public COp {
 public:
  explicit Concat(Attrs props);
  std::vector<Variable*> grad(const GradArgs& args) const override;  // autodiff: ops/grad_*.cpp
  std::vector<TensorType> infer_type(const std::vector<TensorType>& inputs) const override;
  std::vector<Shape> infer_shape(const std::vector<Shape>& inputs) const override;
  void perform(const std::vector<Tensor>& inputs, std::vector<Tensor>& outputs) const override;
  std::optional<int> cache_version() const override { return 2; }
  std::string c_code(const Node& node, const CodeNames& names, const Sub& sub) const override;
  std::vector<std::string> c_preludes() const override { return {"kiln_index.h"}; }
  std::optional<int> concat_axis() const override { return static_cast<int>(axis_); }
  int64_t axis() const { return axis_; }

 private:
  int64_t axis_;
};

}  // namespace kiln
