#pragma once
// A float32 convolution in the blocked channel layout NCHW8c (ctemplate/preludes/
// kiln_nchwc.h): X (N, C/8, H, W, 8) to Y (N, M/8, OH, OW, 8), channel c of position (y, x)
// at [c / 8, y, x, c % 8]. The layout pass (rewrite/cpu/layout_nchwc.cpp) makes these from ONNX
// convolutions; vectors then hold 8 channels of one position, so small maps (7 x 7, 14 x 14)
// fill them as well as large ones.
//
// Props: group (1: a full convolution; C: a depthwise one), kernel_shape (kh, kw), strides
// (sh, sw), pads (top, left, bottom, right); dilation 1; channel_groups G (with group 1, a
// blocked X: a grouped convolution whose C/G input and M/G output channels per group are
// whole blocks, RegNet's and ResNeXt's; W then (M/8, C/G x kh x kw, 8), each output block
// reading its group's input blocks). Inputs:
//   group 1    W (M/8, C/8 x kh x kw x 8, 8): output block b's weights for tap (c / 8, i, j)
//              and input channel c % 8 at [b, ((c / 8 x kh + i) x kw + j) x 8 + c % 8]
//              (a 1x1 window: [b, c]);
//   depthwise  W (C/8, kh, kw, 8): channel block b's taps;
// X may also be a plain (N, C, H, W) image with group 1 (a stem: C under 8), W then
// (M/8, C x kh x kw, 8) with tap (c, i, j) at [b, (c x kh + i) x kw + j];
// and an optional bias B (M).
// Prop winograd T (2 or 4; a 3x3 window, stride 1, pads 1, group 1, a blocked X): the
// convolution runs by Winograd's F(T x T, 3x3) (kiln_support.conv_nchwc_wino_f32 and
// conv_nchwc_wino4_f32), W then ((T + 2)^2, M/8, C, 8), the weights transformed: [e, b, c, l]
// = (G g G^T)[e / (T + 2)][e % (T + 2)] for g the window of output channel b x 8 + l and input
// channel c, G F(2x2)'s {{1, 0, 0}, {.5, .5, .5}, {.5, -.5, .5}, {0, 0, 1}} or F(4x4)'s (see
// module_abi.h).
#include "ops/cop.h"

namespace kiln {

// The channels of one block (KILN_NCHWC_B of kiln_nchwc.h).
constexpr int64_t kNchwcBlock = 8;

// F(T x T, 3x3)'s weights for prop winograd T (2 or 4), ((T + 2)^2, M/8, C, 8), from a
// group-1 3x3 weight in the blocked order (M/8, C x 9, 8): U = G g G^T per channel pair, in
// double.
Tensor winograd_weights(const Tensor& w, int tile);

class ConvNchwc : public COp {
 public:
  explicit ConvNchwc(Attrs props);
  std::vector<TensorType> infer_type(const std::vector<TensorType>& inputs) const override;
  std::vector<Shape> infer_shape(const std::vector<Shape>& inputs) const override;
  double flops(const std::vector<Shape>& inputs, const std::vector<Shape>& outputs) const override;
  void perform(const std::vector<Tensor>& inputs, std::vector<Tensor>& outputs) const override;
  std::optional<int> cache_version() const override { return 11; }
  std::string c_code(const Node& node, const CodeNames& names, const Sub& sub) const override;
  // Both kernels clamp as they store, and run a longer epilogue on each piece they finish.
  bool c_store_clamp(const Node&) const override { return true; }
  std::string c_code_with_clamp(const Node& node, const CodeNames& names, const Sub& sub,
                                const StoreClamp& clamp) const override;
  bool c_inline_epilogue(const Node&) const override { return true; }
  std::string c_code_with_epilogue(const Node& node, const CodeNames& names, const Sub& sub,
                                   const std::string& epilogue) const override;
  std::vector<std::string> c_preludes() const override { return {"kiln_index.h", "kiln_nchwc.h"}; }
  // Parts take tiles of output blocks (rows) by positions x 8 (columns): pairs of blocks by
  // runs of positions (pointwise), single blocks by whole output rows (depthwise).
  bool c_splittable(const Node&) const override { return true; }
  int64_t c_split_unit(const Node& node) const override;
  std::optional<SplitTiles> c_split_tiles(const Node& node, const CodeNames& names,
                                          const Sub& sub) const override;
  bool c_heavy(const Node&) const override { return true; }

  bool depthwise() const { return group_ != 1; }
  int64_t channel_groups() const { return channel_groups_; }
  int64_t winograd() const { return winograd_; }  // the output tile; 0: direct
  // A 1x1 window, stride 1, no padding: the positions read in place, no padded rows.
  bool pointwise() const {
    return group_ == 1 && channel_groups_ == 1 && kernel_ == std::vector<int64_t>{1, 1} &&
           strides_ == std::vector<int64_t>{1, 1} && pads_ == std::vector<int64_t>{0, 0, 0, 0};
  }

 private:
  struct Geometry {
    int64_t c = 0, m = 0, h = 0, w = 0, oh = 0, ow = 0;
    bool plain = false;  // X in NCHW: each tap one channel (a few-channel image's stem)
  };
  Geometry geometry(const std::vector<int64_t>& x, const std::vector<int64_t>& w) const;
  std::string code(const Node& node, const CodeNames& names, const Sub& sub,
                   const std::string& epilogue, const StoreClamp* clamp) const;
  // The code of each variant, for one node (conv_nchwc.cpp).
  struct Emit;
  std::string direct_setup(const Emit& e) const;
  std::string direct_image(const Emit& e) const;
  std::string winograd_image(const Emit& e) const;
  std::string pointwise_image(const Emit& e) const;
  std::string depthwise_image(const Emit& e) const;
  int64_t group_;
  int64_t channel_groups_ = 1;
  int64_t winograd_;
  std::vector<int64_t> kernel_, strides_, pads_;
};

}  // namespace kiln
