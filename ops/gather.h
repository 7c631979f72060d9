#pragma once
// ONNX Gather (props: axis): picks slices of `data` along axis by an int32/int64 index
// tensor; negative indices count from the end, out-of-range ones fail the run.
#include "ops/cop.h"

namespace kiln {

class Gather : public COp {
 public:
  explicit Gather(Attrs props);
  std::vector<Variable*> grad(const GradArgs& args) const override;  // autodiff: ops/grad_*.cpp
  std::vector<TensorType> infer_type(const std::vector<TensorType>& inputs) const override;
  std::vector<Shape> infer_shape(const std::vector<Shape>& inputs) const override;
  void perform(const std::vector<Tensor>& inputs, std::vector<Tensor>& outputs) const override;
  std::optional<int> cache_version() const override { return 2; }
  std::string c_code(const Node& node, const CodeNames& names, const Sub& sub) const override;
  std::vector<std::string> c_preludes() const override { return {"kiln_index.h"}; }

  int64_t axis() const { return axis_; }

 private:
  int64_t axis_;
};

}  // namespace kiln
