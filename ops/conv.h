#pragma once
// ONNX Conv, 1-D and 2-D (props: group, kernel_shape, strides, dilations, pads, auto_pad):
// inputs X (N, C, ...), W (M, C/group, ...) and an optional bias B (M). Each image group
// is unfolded (im2col, skipped for 1x1 stride-1 kernels) and multiplied by OpenBLAS GEMM.
#include "ops/cop.h"
#include "ops/window.h"

namespace kiln {

class Conv : public COp {
 public:
  explicit Conv(Attrs props);
  std::vector<TensorType> infer_type(const std::vector<TensorType>& inputs) const override;
  std::vector<Shape> infer_shape(const std::vector<Shape>& inputs) const override;
  void perform(const std::vector<Tensor>& inputs, std::vector<Tensor>& outputs) const override;
  std::optional<int> cache_version() const override { return 4; }
  std::string c_code(const Node& node, const CodeNames& names, const Sub& sub) const override;
  std::vector<std::string> c_preludes() const override { return {"kiln_index.h", "kiln_window.h"}; }
  std::string c_support_code_apply(const Node& node, const std::string& prefix) const override;

 private:
  std::vector<WindowDims> geometry(const std::vector<int64_t>& x,
                                   const std::vector<int64_t>& w) const;
  WindowAttrs window_;
  int64_t group_;
};

}  // namespace kiln
