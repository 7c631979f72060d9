#pragma once
// ONNX Expand with a constant target shape (props: shape): broadcasts the input to
// broadcast(input shape, shape) by a copy with zero strides. With props `dims` instead
// (dimension expressions, graph/dim_expr.h) the target follows the run-time dimensions of
// the inputs after the first, which are read only for their shapes.
#include <optional>

#include "graph/dim_expr.h"
#include "ops/cop.h"

namespace kiln {

class Expand : public COp {
 public:
  explicit Expand(Attrs props);
  std::vector<Variable*> grad(const GradArgs& args) const override;  // autodiff: ops/grad_*.cpp
  std::vector<TensorType> infer_type(const std::vector<TensorType>& inputs) const override;
  std::vector<Shape> infer_shape(const std::vector<Shape>& inputs) const override;
  void perform(const std::vector<Tensor>& inputs, std::vector<Tensor>& outputs) const override;
  std::optional<int> cache_version() const override { return 1; }
  std::string c_code(const Node& node, const CodeNames& names, const Sub& sub) const override;
  std::vector<std::string> c_preludes() const override { return {"kiln_index.h"}; }

 private:
  std::vector<int64_t> shape_;
  std::optional<std::vector<DimExpr>> dims_;
};

}  // namespace kiln
