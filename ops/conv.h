#pragma once
// ONNX Conv, 1-D and 2-D (props: group, kernel_shape, strides, dilations, pads, auto_pad):
// inputs X (N, C, ...), W (M, C/group, ...) and an optional bias B (M). Each image group
// is convolved directly by kiln_support's tile kernel over a copy split into stride phases.
// packed_m = M (the pack pass, group 1 only, with kernel_shape set) takes W packed in
// blocks of output channels (ops/c/conv_pack.h), for kiln_support's conv_blocks kernel.
#include "ops/cop.h"
#include "ops/window.h"

namespace kiln {

class Conv : public COp {
 public:
  explicit Conv(Attrs props);
  std::vector<Variable*> grad(const GradArgs& args) const override;  // autodiff: ops/grad_*.cpp
  std::vector<TensorType> infer_type(const std::vector<TensorType>& inputs) const override;
  std::vector<Shape> infer_shape(const std::vector<Shape>& inputs) const override;
  double flops(const std::vector<Shape>& inputs, const std::vector<Shape>& outputs) const override;
  void perform(const std::vector<Tensor>& inputs, std::vector<Tensor>& outputs) const override;
  std::optional<int> cache_version() const override { return 21; }
  std::string c_code(const Node& node, const CodeNames& names, const Sub& sub) const override;
  // Pointwise convolutions run an epilogue on each piece of columns they finish, depthwise
  // ones on each run of channels.
  bool c_inline_epilogue(const Node& node) const override;
  std::string c_code_with_epilogue(const Node& node, const CodeNames& names, const Sub& sub,
                                   const std::string& epilogue) const override;
  // Every kernel but the depthwise one (whose epilogue runs inline) clamps (relu, clip) as
  // it stores.
  bool c_store_clamp(const Node& node) const override;
  std::string c_code_with_clamp(const Node& node, const CodeNames& names, const Sub& sub,
                                const StoreClamp& clamp) const override;
  std::vector<std::string> c_preludes() const override { return {"kiln_index.h", "kiln_window.h"}; }
  std::string c_support_code() const override;  // the packed GEMM of pointwise convolutions
  // Parts take tiles of output channels by output rows: an epilogue follows the same split.
  bool c_splittable(const Node&) const override { return true; }
  int64_t c_split_unit(const Node& node) const override;
  std::optional<SplitTiles> c_split_tiles(const Node& node, const CodeNames& names,
                                          const Sub& sub) const override;
  bool c_heavy(const Node&) const override { return true; }

  bool packed() const { return packed_m_ != 0; }  // W in blocks (the pack pass): a CPU layout
  int64_t group() const { return group_; }
  // The node's resolved window (a dynamic batch read as 1: the geometry ignores it).
  std::vector<WindowDims> node_geometry(const Node& node) const;

 private:
  std::vector<WindowDims> geometry(const std::vector<int64_t>& x,
                                   const std::vector<int64_t>& w) const;
  // W's dims as (M, C/group, k...): a packed weight's (blocks, taps, B) read through
  // packed_m and kernel_shape, checked against the input's channels.
  std::vector<int64_t> weight_dims(const std::vector<int64_t>& x,
                                   const std::vector<int64_t>& w) const;
  // The static sizes of a node's code: geometry (2-D; 1-D as height 1), channels per group,
  // the phase planes (hq x wq) and the split's units.
  struct Plan {
    std::vector<WindowDims> g;
    bool one_d = false;
    bool packed = false;      // W in blocks of output channels (packed_m): the conv_blocks kernel
    bool window_1x1 = false;  // a 1x1 window, no padding (any stride): positions gathered
    int64_t m = 0, cg = 0, mg = 0, ohw = 0, ckk = 0, hq = 0, wq = 0, row_unit = 1, col_unit = 1;
  };
  Plan plan(const Node& node) const;
  // c_code, running `epilogue` on each piece of a pointwise convolution's output or each
  // run of a depthwise one's channels (empty: none), or clamping in the stores (`clamp`,
  // where c_store_clamp).
  std::string code(const Node& node, const CodeNames& names, const Sub& sub,
                   const std::string& epilogue, const StoreClamp* clamp = nullptr) const;
  // The code of each variant, for one node (conv.cpp).
  struct Emit;
  static std::string pointwise_code(const Emit& e);
  static std::string gathered_code(const Emit& e);
  static std::string phase_setup(const Emit& e);
  static std::string depthwise_code(const Emit& e);
  static std::string tiled_code(const Emit& e);
  static std::string small_image_code(const Emit& e);
  // Output positions per image up to which a plain convolution runs as a GEMM over the
  // batch's positions (small_image_code), not a direct tile per image.
  static constexpr int64_t kSmallImagePositions = 16;
  static bool small_images(const Plan& p);
  // Output channels per block of tiled_code's outer loop (images inside it), or a bound above
  // any count where the images stay outside.
  static int64_t oc_block(const Plan& p, int64_t phases);
  // 1x1, stride 1, no padding, W not packed: the convolution runs as a packed GEMM.
  static bool pointwise(const Plan& p);
  // One input and one output channel per group, W not packed: the depthwise kernel.
  static bool depthwise(const Plan& p) { return p.cg == 1 && p.mg == 1 && !p.packed; }
  WindowAttrs window_;
  int64_t group_;
  int64_t packed_m_;
};

}  // namespace kiln
