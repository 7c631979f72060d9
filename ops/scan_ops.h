#pragma once
// Ops that walk one axis in order, each element depending on the ones before it:
//   cumsum (props: axis, exclusive, reverse): running sums along axis (ONNX CumSum);
//   top_k (props: k, axis, largest, sorted): the k largest (or smallest) values along axis
//     and their int64 indices, in order (ONNX TopK); equal values keep the lower index
//     first, NaN ranks above every number for largest (below for smallest), as numpy's
//     sorts place it. Or k_dims instead of k: k as a dimension expression over the inputs
//     (graph/dim_expr.h; inputs after the first are read only for their shapes), what a
//     detector's min(k, boxes) makes when the boxes' count is known only at run time.
#include <optional>

#include "graph/dim_expr.h"
#include "ops/cop.h"

namespace kiln {

class CumSum : public COp {
 public:
  explicit CumSum(Attrs props);
  std::vector<Variable*> grad(const GradArgs& args) const override;  // autodiff: ops/grad_*.cpp
  std::vector<TensorType> infer_type(const std::vector<TensorType>& inputs) const override;
  std::vector<Shape> infer_shape(const std::vector<Shape>& inputs) const override;
  void perform(const std::vector<Tensor>& inputs, std::vector<Tensor>& outputs) const override;
  std::optional<int> cache_version() const override { return 1; }
  std::string c_code(const Node& node, const CodeNames& names, const Sub& sub) const override;
  std::vector<std::string> c_preludes() const override { return {"kiln_index.h"}; }

 private:
  int64_t axis_;
  bool exclusive_, reverse_;
};

class TopK : public COp {
 public:
  explicit TopK(Attrs props);
  std::vector<Variable*> grad(const GradArgs& args) const override;  // autodiff: ops/grad_*.cpp
  std::vector<TensorType> infer_type(const std::vector<TensorType>& inputs) const override;
  std::vector<Shape> infer_shape(const std::vector<Shape>& inputs) const override;
  void perform(const std::vector<Tensor>& inputs, std::vector<Tensor>& outputs) const override;
  std::optional<int> cache_version() const override { return 4; }
  std::string c_code(const Node& node, const CodeNames& names, const Sub& sub) const override;
  std::vector<std::string> c_preludes() const override { return {"kiln_index.h"}; }

 private:
  int64_t k_of(const std::vector<Shape>& inputs) const;  // checked against the axis
  int64_t k_ = 0, axis_;
  std::optional<DimExpr> k_dims_;
  bool largest_, sorted_;
};

}  // namespace kiln
