#pragma once
// Reshape (props: shape; -1 infers one dimension, 0 copies the input's dimension) and
// Flatten (props: axis; the result is 2-D). Both copy in row-major order, so any input
// strides work.
//
// Reshape with props `dims` instead (dimension expressions, graph/dim_expr.h) takes the
// target from the run-time dimensions of its inputs: input 0 is the data, later inputs are
// only read for their shapes (a model's Shape -> Gather -> Concat -> Reshape).
#include "graph/dim_expr.h"
#include "ops/cop.h"

namespace kiln {

class Reshape : public COp {
 public:
  explicit Reshape(Attrs props);
  std::vector<Variable*> grad(const GradArgs& args) const override;  // autodiff: ops/grad_*.cpp
  std::vector<TensorType> infer_type(const std::vector<TensorType>& inputs) const override;
  std::vector<Shape> infer_shape(const std::vector<Shape>& inputs) const override;
  void perform(const std::vector<Tensor>& inputs, std::vector<Tensor>& outputs) const override;
  std::optional<int> cache_version() const override { return 3; }
  std::string c_code(const Node& node, const CodeNames& names, const Sub& sub) const override;
  std::vector<std::string> c_preludes() const override { return {"kiln_index.h"}; }
  // The output is a view of the input where the executor can bind one (ops/cop.h): no
  // kernel, no copy.
  int view_of(const Node&) const override { return 0; }

 private:
  std::vector<int64_t> shape_;
  std::optional<std::vector<DimExpr>> dims_;
};

class Flatten : public COp {
 public:
  explicit Flatten(Attrs props);
  std::vector<Variable*> grad(const GradArgs& args) const override;  // autodiff: ops/grad_*.cpp
  std::vector<TensorType> infer_type(const std::vector<TensorType>& inputs) const override;
  std::vector<Shape> infer_shape(const std::vector<Shape>& inputs) const override;
  void perform(const std::vector<Tensor>& inputs, std::vector<Tensor>& outputs) const override;
  std::optional<int> cache_version() const override { return 3; }
  std::string c_code(const Node& node, const CodeNames& names, const Sub& sub) const override;
  std::vector<std::string> c_preludes() const override { return {"kiln_index.h"}; }
  // The output is a view of the input where the executor can bind one (ops/cop.h): no
  // kernel, no copy.
  int view_of(const Node&) const override { return 0; }

 private:
  int64_t axis_;
};

}  // namespace kiln
