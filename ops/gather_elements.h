#pragma once
// ONNX GatherElements (props: axis): out[i] = data[i with its axis coordinate replaced by
// indices[i]], indices having data's rank; negative indices count from the end, out-of-range
// ones fail the run naming the index.
#include "ops/cop.h"

namespace kiln {

class GatherElements : public COp {
 public:
  explicit GatherElements(Attrs props);
  std::vector<Variable*> grad(const GradArgs& args) const override;  // autodiff: ops/grad_*.cpp
  std::vector<TensorType> infer_type(const std::vector<TensorType>& inputs) const override;
  std::vector<Shape> infer_shape(const std::vector<Shape>& inputs) const override;
  void perform(const std::vector<Tensor>& inputs, std::vector<Tensor>& outputs) const override;
  std::optional<int> cache_version() const override { return 1; }
  std::string c_code(const Node& node, const CodeNames& names, const Sub& sub) const override;

 private:
  int64_t axis_;
};

}  // namespace kiln
