#pragma once
// The quantization inputs that qmatmul and qconv share. After their two data inputs (A and
// B, or X and W) come A's zero point (a scalar of A's dtype) and B's (a scalar, or one per
// output column, of B's dtype); with props requant = 1, a float32 multiplier (scalar or per
// column: A's scale times B's over Y's) and Y's zero point (uint8 or int8: Y's dtype); with
// bias = 1, an int32 bias per output column. relu = 1 clamps below at Y's zero point.
// With scaled = 1 (qmatmul only), instead of requant's two, a float32 scale (scalar or per
// column) and the output is float32: the accumulator times it, a dynamically quantized
// product's dequantization done in the kernel's store. Otherwise the output is the int32
// accumulator.
#include <cstdint>
#include <string>
#include <vector>

#include "graph/attrs.h"
#include "graph/tensor_type.h"
#include "ops/cop.h"
#include "runtime/tensor.h"

namespace kiln {

struct QuantLayout {
  bool requant = false, bias = false, relu = false, scaled = false;

  static QuantLayout from_props(const Attrs& props, const std::string& op);
  size_t input_count() const { return bias_index() + (bias ? 1 : 0); }
  size_t bias_index() const { return 4 + (requant ? 2 : 0) + (scaled ? 1 : 0); }
};

// Checks the quantization inputs of `op` (after its data inputs, with B's logical dtype
// b_dtype and `cols` output columns, kDynamic when unknown) and returns the output dtype.
// Errors name the op and the input.
DType check_quant_inputs(const std::string& op, const QuantLayout& q,
                         const std::vector<TensorType>& inputs, DType b_dtype, int64_t cols);

// The reference of the kernel's epilogue: accumulators corrected and written as the
// generated code writes them (float32 rounding included), for the ops' perform.
class QuantReference {
 public:
  QuantReference(const QuantLayout& q, const std::vector<Tensor>& inputs);
  int32_t a_zp() const { return a_zp_; }
  int32_t b_zp(int64_t j) const;
  // The output value for a raw sum of (a - a_zp)(b - b_zp) at column j.
  int64_t out(int64_t acc, int64_t j) const;
  // The same with scaled: the float32 the kernel stores.
  float scaled_out(int64_t acc, int64_t j) const;

 private:
  QuantLayout q_;
  int32_t a_zp_ = 0;
  Tensor b_zp_, scale_, bias_;
  int32_t y_zp_ = 0, lo_ = 0, hi_ = 0;
};

// The generated C that declares `kiln_qparams qp` for a node (inputs as laid out above).
std::string quant_c_params(const QuantLayout& q, const Node& node, const CodeNames& names,
                           bool b_u8);

}  // namespace kiln
