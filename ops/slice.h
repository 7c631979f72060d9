#pragma once
// ONNX Slice with constant starts/ends/axes/steps (props): a strided view copied out, so
// negative steps and clamped, out-of-range bounds follow ONNX exactly. Props `starts_dims` /
// `ends_dims` (dimension expressions, graph/dim_expr.h) replace starts / ends with bounds
// that follow the run-time dimensions of the inputs after the first (read for their shapes).
#include "graph/dim_expr.h"
#include "ops/cop.h"

namespace kiln {

class Slice : public COp {
 public:
  explicit Slice(Attrs props);
  std::vector<Variable*> grad(const GradArgs& args) const override;  // autodiff: ops/grad_*.cpp
  std::vector<TensorType> infer_type(const std::vector<TensorType>& inputs) const override;
  std::vector<Shape> infer_shape(const std::vector<Shape>& inputs) const override;
  void perform(const std::vector<Tensor>& inputs, std::vector<Tensor>& outputs) const override;
  std::optional<int> cache_version() const override { return 3; }
  // Parts copy sub-boxes of the output (ops/c/strided_copy.h), as a transpose's do.
  bool c_splittable(const Node&) const override { return true; }
  std::string c_code(const Node& node, const CodeNames& names, const Sub& sub) const override;
  std::vector<std::string> c_preludes() const override { return {"kiln_index.h"}; }

  // C declaring `<prefix>off` (the first element's offset in input 0) and `<prefix>st` (the
  // input stride of each output dimension): the strided view the slice copies out, for the
  // host's code and a device's launch alike. With `sub`, constant bounds and steps come
  // through sub->value (the kernel's arguments); without, they are literals.
  std::string c_offsets(const Node& node, const std::vector<std::string>& inputs,
                        const std::string& prefix, const Sub* sub = nullptr) const;

 private:
  struct AxisSlice {
    int axis;
    DimExpr start, end;
    int64_t step;
  };
  std::vector<AxisSlice> per_axis(int rank) const;
  std::vector<DimExpr> starts_, ends_;
  std::vector<int64_t> axes_, steps_;
  int sources_ = 0;  // inputs after the data that the bounds read
};

// First index and count of one sliced dimension (ONNX clamping rules).
void slice_dim(int64_t dim, int64_t start, int64_t end, int64_t step, int64_t* first,
               int64_t* count);

}  // namespace kiln
