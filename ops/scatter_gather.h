#pragma once
// Index-driven copies beyond Gather / GatherElements (ONNX semantics; negative indices count
// from the end, out-of-range ones fail the run naming the index):
//   gather_nd (props: batch_dims): data[batch, indices[batch, i, :], ...] for each i;
//   scatter_nd (props: reduction "none" | "add" | "mul" | "max" | "min"): a copy of data
//     with the slices indices[i, :] names set to (or combined with) updates[i];
//   scatter_elements (props: axis, reduction): a copy of data with, for each element of
//     indices, the element at its coordinates but indices' value along axis set to (or
//     combined with) the matching element of updates.
// Duplicate indices apply in row-major order of indices.
#include "ops/cop.h"

namespace kiln {

class GatherND : public COp {
 public:
  explicit GatherND(Attrs props);
  std::vector<Variable*> grad(const GradArgs& args) const override;  // autodiff: ops/grad_*.cpp
  std::vector<TensorType> infer_type(const std::vector<TensorType>& inputs) const override;
  std::vector<Shape> infer_shape(const std::vector<Shape>& inputs) const override;
  void perform(const std::vector<Tensor>& inputs, std::vector<Tensor>& outputs) const override;
  std::optional<int> cache_version() const override { return 1; }
  std::string c_code(const Node& node, const CodeNames& names, const Sub& sub) const override;
  std::vector<std::string> c_preludes() const override { return {"kiln_index.h"}; }

 private:
  int64_t batch_dims_;
};

class Scatter : public COp {
 public:
  // elements: scatter_elements (props axis, reduction); else scatter_nd (reduction).
  Scatter(bool elements, Attrs props);
  std::vector<Variable*> grad(const GradArgs& args) const override;  // autodiff: ops/grad_*.cpp
  std::vector<TensorType> infer_type(const std::vector<TensorType>& inputs) const override;
  std::vector<Shape> infer_shape(const std::vector<Shape>& inputs) const override;
  void perform(const std::vector<Tensor>& inputs, std::vector<Tensor>& outputs) const override;
  std::optional<int> cache_version() const override { return 3; }
  std::string c_code(const Node& node, const CodeNames& names, const Sub& sub) const override;
  std::vector<std::string> c_preludes() const override { return {"kiln_index.h"}; }
  // scatter_elements: parts take runs of the columns around the axis (when the inputs are
  // contiguous and indices cover data but along the axis; otherwise part 0 does it all).
  bool c_splittable(const Node&) const override { return elements_; }

 private:
  // The code that runs in one part: copy data, then apply every update in order.
  std::string c_code_one(const Node& node, const CodeNames& names, const Sub& sub) const;
  bool elements_;
  int64_t axis_ = 0;
  int reduction_ = 0;  // none, add, mul, max, min
};

}  // namespace kiln
