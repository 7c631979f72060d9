#pragma once
// Max pooling of bytes channels-last: X (N, H, W, C) uint8 or int8 to Y (N, OH, OW, C), so a
// quantized model's pool between integer convolutions (ResNet's stem) stays inside their
// channels-last region (rewrite/cpu/layout_nhwc_int8.cpp) with no transpose on either side.
// Props: max_pool's (kernel_shape, strides, dilations, pads, auto_pad, ceil_mode; 2-D).
// Each output position takes the maximum of its window's channel rows, a vector of channels
// at a time; padding is skipped.
#include "ops/cop.h"
#include "ops/window.h"

namespace kiln {

class MaxPoolNhwc : public COp {
 public:
  explicit MaxPoolNhwc(Attrs props);
  std::vector<TensorType> infer_type(const std::vector<TensorType>& inputs) const override;
  std::vector<Shape> infer_shape(const std::vector<Shape>& inputs) const override;
  void perform(const std::vector<Tensor>& inputs, std::vector<Tensor>& outputs) const override;
  std::optional<int> cache_version() const override { return 1; }
  std::string c_code(const Node& node, const CodeNames& names, const Sub& sub) const override;
  // Parts take runs of output rows.
  bool c_splittable(const Node&) const override { return true; }

 private:
  // (H, W) of an (N, H, W, C) input.
  std::vector<WindowDims> geometry(const std::vector<int64_t>& x) const;
  WindowAttrs window_;
};

}  // namespace kiln
