#pragma once
// Max pooling in the blocked channel layout NCHW8c (ops/conv_nchwc.h): X (N, C/8, H, W, 8)
// to Y (N, C/8, OH, OW, 8), so a pool between blocked convolutions (ResNet's stem, SqueezeNet's
// stages) needs no reorder. Props: kernel_shape (kh, kw), strides (sh, sw), pads (top, left,
// bottom, right); floor rounding, dilation 1. Padding is skipped; a NaN in a window wins.
#include "ops/cop.h"

namespace kiln {

class MaxPoolNchwc : public COp {
 public:
  explicit MaxPoolNchwc(Attrs props);
  std::vector<TensorType> infer_type(const std::vector<TensorType>& inputs) const override;
  std::vector<Shape> infer_shape(const std::vector<Shape>& inputs) const override;
  void perform(const std::vector<Tensor>& inputs, std::vector<Tensor>& outputs) const override;
  std::optional<int> cache_version() const override { return 2; }
  std::string c_code(const Node& node, const CodeNames& names, const Sub& sub) const override;
  std::vector<std::string> c_preludes() const override { return {"kiln_index.h", "kiln_nchwc.h"}; }
  // Parts take channel blocks by whole output rows.
  bool c_splittable(const Node&) const override { return true; }

 private:
  Shape out_shape(const Shape& x) const;
  std::vector<int64_t> kernel_, strides_, pads_;
};

}  // namespace kiln
