#pragma once
// Reductions over any set of axes: sum, mean, max, min, prod (props: axes, keepdims).
// An empty `axes` reduces over every axis.
#include "ops/c/reduce_loop.h"
#include "ops/cop.h"

namespace kiln {

class Reduce : public COp {
 public:
  Reduce(ReduceKind kind, Attrs props);
  std::vector<Variable*> grad(const GradArgs& args) const override;  // autodiff: ops/grad_*.cpp
  static std::string op_name(ReduceKind kind);                       // "reduce_sum", ...

  std::vector<TensorType> infer_type(const std::vector<TensorType>& inputs) const override;
  std::vector<Shape> infer_shape(const std::vector<Shape>& inputs) const override;
  void perform(const std::vector<Tensor>& inputs, std::vector<Tensor>& outputs) const override;
  std::optional<int> cache_version() const override { return 7; }
  std::string c_code(const Node& node, const CodeNames& names, const Sub& sub) const override;
  // Splits over kept dimensions; a reduction to one value is not split.
  bool c_splittable(const Node& node) const override;
  std::vector<std::string> c_headers() const override { return {"<math.h>"}; }
  std::vector<std::string> c_preludes() const override { return {"kiln_index.h"}; }

  ReduceKind kind() const { return kind_; }
  bool keepdims() const { return keepdims_; }
  // Per input dimension: reduced or kept.
  std::vector<bool> reduced_mask(int rank) const;

 private:
  ReduceKind kind_;
  std::vector<int64_t> axes_;
  bool keepdims_;
};

}  // namespace kiln
