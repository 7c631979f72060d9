#pragma once
// The second half of a lowered conv_transpose (rewrite/lower_conv_transpose.cpp):
//   conv_transpose_fold(cols, [B]) -> Y (N, G*mg, out...)
// cols (N, in..., G, k..., mg) holds, for each input position, every tap's contribution to
// each output channel (the GEMM of X channels-last by W); each output position sums the
// taps that land on it (input i, tap t: position i*stride - pad_begin + t*dilation), plus
// the bias. Props: conv_transpose's strides, dilations, pads, output_padding.
//
// Parts take runs of output rows (every position but the last dimension's); a row gathers
// its taps channels-last in a buffer, adding runs of mg contiguous values, then writes the
// row out channel by channel. No two parts write one element, so nothing is zeroed twice.
#include "ops/conv_transpose.h"

namespace kiln {

class ConvTransposeFold : public COp {
 public:
  explicit ConvTransposeFold(Attrs props);
  std::vector<TensorType> infer_type(const std::vector<TensorType>& inputs) const override;
  std::vector<Shape> infer_shape(const std::vector<Shape>& inputs) const override;
  void perform(const std::vector<Tensor>& inputs, std::vector<Tensor>& outputs) const override;
  std::optional<int> cache_version() const override { return 1; }
  std::string c_code(const Node& node, const CodeNames& names, const Sub& sub) const override;
  std::string c_support_code() const override;
  std::vector<std::string> c_preludes() const override { return {"kiln_index.h"}; }
  bool c_splittable(const Node&) const override { return true; }

  const TransposedWindow& window() const { return window_; }

 private:
  // The spatial rank k of a cols type of rank 2k + 3, or a clear error.
  static int spatial_rank(int rank);
  std::vector<TransposedDim> geometry(const std::vector<int64_t>& cols) const;
  TransposedWindow window_;
};

}  // namespace kiln
