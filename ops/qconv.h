#pragma once
// Integer convolution (ONNX ConvInteger and QLinearConv), 1-D and 2-D: X (N, C, ...) and W
// (M, C/group, ...), int8 or uint8, summed as (x - x_zp)(w - w_zp) in int32 (padding counts
// as x_zp, so it adds nothing), then (requant) rescaled to Y's bytes; the quantization inputs
// follow the data (ops/quant_params.h), B's zero point and the scale per output channel.
// Props: the window's (kernel_shape, strides, dilations, pads, auto_pad), group, requant,
// bias, relu, and packed_m: W arrives packed per group (ops/c/qgemm_pack.h) for M = packed_m
// channels (kernel_shape then set, W's original dtype in w_u8), and nhwc: X (N, H, W, C) and
// Y (N, OH, OW, M), channels-last (rewrite/cpu/layout_nhwc_int8.cpp sets it; W keeps its
// layout), with x_nchw X staying (N, C, H, W) (a region's first convolution reads the
// graph's image as it is; not for depthwise). c4: a three-channel channels-first image (a
// network's stem) is padded to four channels per pixel, the fourth its zero point, and W packed
// for four, so every tap is one 4-byte group and the GEMM reads windows in place (no rows
// copied). Each chunk of output positions is gathered into rows and multiplied by
// kiln_support.qgemm_u8s8.
#include "ops/cop.h"
#include "ops/quant_params.h"
#include "ops/window.h"

namespace kiln {

class QConv : public COp {
 public:
  explicit QConv(Attrs props);
  std::vector<TensorType> infer_type(const std::vector<TensorType>& inputs) const override;
  std::vector<Shape> infer_shape(const std::vector<Shape>& inputs) const override;
  double flops(const std::vector<Shape>& inputs, const std::vector<Shape>& outputs) const override;
  void perform(const std::vector<Tensor>& inputs, std::vector<Tensor>& outputs) const override;
  std::optional<int> cache_version() const override { return 10; }
  std::string c_code(const Node& node, const CodeNames& names, const Sub& sub) const override;
  // The code with a byte table (a C expression naming 256 bytes) applied to each part's output
  // bytes as they are made (kiln_qparams.table): a quantized activation as the epilogue. Only
  // channels-last with bytes out (takes_table).
  std::string c_code_with_table(const Node& node, const CodeNames& names, const Sub& sub,
                                const std::string& table) const;
  bool takes_table(const Node& node) const;
  std::vector<std::string> c_preludes() const override { return {"kiln_quant.h"}; }
  bool c_splittable(const Node&) const override { return true; }
  // Channels-last and not depthwise: parts are runs of whole output positions (M bytes each),
  // which an epilogue can follow; 0 otherwise.
  int64_t c_split_unit(const Node& node) const override;
  bool c_heavy(const Node&) const override { return true; }

  bool packed() const { return packed_m_ != 0; }
  bool nhwc() const { return nhwc_; }
  int64_t group() const { return group_; }

 private:
  // W's dims (M, C/group, k...), read through packed_m and kernel_shape when packed.
  std::vector<int64_t> weight_dims(const std::vector<int64_t>& x,
                                   const std::vector<int64_t>& w) const;
  std::vector<WindowDims> geometry(const std::vector<int64_t>& x,
                                   const std::vector<int64_t>& w) const;
  WindowAttrs window_;
  QuantLayout q_;
  // X's dims as (N, C, spatial...) whatever its layout.
  std::vector<int64_t> channels_first(const std::vector<int64_t>& x) const;
  int64_t group_, packed_m_;
  bool w_u8_, nhwc_, x_nhwc_, c4_;
};

}  // namespace kiln
