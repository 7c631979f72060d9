#pragma once
// ONNX Conv, 1-D and 2-D (props: group, kernel_shape, strides, dilations, pads, auto_pad):
// inputs X (N, C, ...), W (M, C/group, ...) and an optional bias B (M). Each image group
// is convolved directly by kiln_support's tile kernel (strided windows unfolded first).
#include "ops/cop.h"
#include "ops/window.h"

namespace kiln {

class Conv : public COp {
 public:
  explicit Conv(Attrs props);
  std::vector<TensorType> infer_type(const std::vector<TensorType>& inputs) const override;
  std::vector<Shape> infer_shape(const std::vector<Shape>& inputs) const override;
  void perform(const std::vector<Tensor>& inputs, std::vector<Tensor>& outputs) const override;
  std::optional<int> cache_version() const override { return 5; }
  std::string c_code(const Node& node, const CodeNames& names, const Sub& sub) const override;
  std::vector<std::string> c_preludes() const override { return {"kiln_index.h", "kiln_window.h"}; }
  // Parts take whole output planes (image, channel): an epilogue follows the same split.
  bool c_splittable(const Node&) const override { return true; }
  int64_t c_split_unit(const Node& node) const override;
  bool c_heavy(const Node&) const override { return true; }
  bool has_cuda_code(const Node& node) const override;
  CudaCode cuda_code(const Node& node, const CodeNames& names, const Sub& sub) const override;
  bool has_cuda_epilogue(const Node& node) const override { return has_cuda_code(node); }
  CudaCode cuda_code_with(const Node& node, const CodeNames& names, const Sub& sub,
                          const CudaEpilogue& epi) const override;

 private:
  std::vector<WindowDims> geometry(const std::vector<int64_t>& x,
                                   const std::vector<int64_t>& w) const;
  WindowAttrs window_;
  int64_t group_;
};

}  // namespace kiln
