#pragma once
// ONNX ConvTranspose, 1-D to 3-D (props: group, strides, dilations, pads = [begin.., end..],
// output_padding): inputs X (N, C, in...), W (C, M/group, k...) and an optional bias B (M).
// Input position i and tap t land on output position i*stride - pad_begin + t*dilation; the
// output of dimension d has (in-1)*stride + (k-1)*dilation + 1 - pad_begin - pad_end +
// output_padding positions. Pads may be negative (an output_shape larger than the windows
// reach, ONNX's auto-generated pads): those positions receive no taps, only the bias.
//
// Its own code is a direct scatter, for graphs compiled without passes; the `lower` pass
// (rewrite/lower_conv_transpose.cpp) turns it into a packed GEMM (X channels-last times W)
// and conv_transpose_fold, which adds each output position's taps.
#include "ops/cop.h"

namespace kiln {

struct TransposedDim {
  int64_t in = 0, kernel = 1, stride = 1, dilation = 1, pad_begin = 0, out = 0;
};

// The attributes conv_transpose and conv_transpose_fold share.
struct TransposedWindow {
  std::vector<int64_t> strides, dilations, pads, output_padding;  // empty: defaults
  static TransposedWindow from_props(const Attrs& props, const std::string& what);
  // One entry per spatial dimension; a dynamic input size gives a dynamic output size.
  // Throws UserError naming `what` for attributes of the wrong length or an empty output.
  std::vector<TransposedDim> resolve(const std::vector<int64_t>& in,
                                     const std::vector<int64_t>& kernel,
                                     const std::string& what) const;
  int64_t pad_end(size_t d) const { return pads.empty() ? 0 : pads[d + pads.size() / 2]; }
};

// The generated code's `const int64_t t_st[3], t_dl[3], t_pb[3]` (strides, dilations, begin
// pads) for `geo`, padded at the front to three dimensions; each value through sub.value.
std::string transposed_window_c(const std::vector<TransposedDim>& geo, const Sub& sub);

class ConvTranspose : public COp {
 public:
  explicit ConvTranspose(Attrs props);
  std::vector<Variable*> grad(const GradArgs& args) const override;  // ops/grad/window.cpp
  std::vector<TensorType> infer_type(const std::vector<TensorType>& inputs) const override;
  std::vector<Shape> infer_shape(const std::vector<Shape>& inputs) const override;
  double flops(const std::vector<Shape>& inputs, const std::vector<Shape>& outputs) const override;
  void perform(const std::vector<Tensor>& inputs, std::vector<Tensor>& outputs) const override;
  std::optional<int> cache_version() const override { return 1; }
  std::string c_code(const Node& node, const CodeNames& names, const Sub& sub) const override;
  std::vector<std::string> c_preludes() const override { return {"kiln_index.h"}; }

  int64_t group() const { return group_; }
  const TransposedWindow& window() const { return window_; }

 private:
  std::vector<TransposedDim> geometry(const std::vector<int64_t>& x,
                                      const std::vector<int64_t>& w) const;
  TransposedWindow window_;
  int64_t group_;
};

}  // namespace kiln
