#pragma once
// The windows of a 2-D convolution laid out as rows, from a channels-last image: X (N, H, W,
// C) to Y (N, OH, OW, kh * kw * C), column (ky * kw + kx) * C + c holding channel c under tap
// (ky, kx), zero where the tap falls in the padding. Each tap copies a run of C channels. A
// convolution is then one GEMM of these rows by its weight as a (kh * kw * C, M) matrix
// (rewrite/cpu/bf16_convs.cpp runs bfloat16 convolutions so). Props: conv's kernel_shape,
// strides, dilations, pads, auto_pad.
#include "ops/cop.h"
#include "ops/window.h"

namespace kiln {

class Im2Col : public COp {
 public:
  explicit Im2Col(Attrs props);
  std::vector<TensorType> infer_type(const std::vector<TensorType>& inputs) const override;
  std::vector<Shape> infer_shape(const std::vector<Shape>& inputs) const override;
  void perform(const std::vector<Tensor>& inputs, std::vector<Tensor>& outputs) const override;
  std::optional<int> cache_version() const override { return 1; }
  std::string c_code(const Node& node, const CodeNames& names, const Sub& sub) const override;
  // Parts take runs of output rows.
  bool c_splittable(const Node&) const override { return true; }

 private:
  std::vector<WindowDims> geometry(const std::vector<int64_t>& x) const;
  WindowAttrs window_;
};

}  // namespace kiln
