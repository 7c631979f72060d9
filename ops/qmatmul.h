#pragma once
// Integer matrix product (ONNX MatMulInteger and QLinearMatMul): Y[..., M, N] from A[..., M,
// K] and B (K, N), or one B per leading index of A (B of A's rank, same leading dims), both
// int8 or uint8, as the sum of (a - a_zp)(b - b_zp) in int32, then (requant) rescaled to
// Y's bytes; the quantization inputs follow the data (ops/quant_params.h). Props: requant,
// bias, relu, and packed_n: B arrives packed (ops/c/qgemm_pack.h) for N = packed_n columns,
// its original dtype in b_u8, K in packed_k; scaled: a float32 output (quant_params.h);
// split_rows: parts are runs of whole rows (never column panels), so an epilogue can follow
// them. It runs kiln_support.qgemm_u8s8 (VNNI where the CPU has it), split over rows, or over
// B's column panels for few rows or a large B.
#include "ops/cop.h"
#include "ops/quant_params.h"

namespace kiln {

class QMatMul : public COp {
 public:
  explicit QMatMul(Attrs props);
  std::vector<TensorType> infer_type(const std::vector<TensorType>& inputs) const override;
  std::vector<Shape> infer_shape(const std::vector<Shape>& inputs) const override;
  double flops(const std::vector<Shape>& inputs, const std::vector<Shape>& outputs) const override;
  void perform(const std::vector<Tensor>& inputs, std::vector<Tensor>& outputs) const override;
  std::optional<int> cache_version() const override { return 5; }
  std::string c_code(const Node& node, const CodeNames& names, const Sub& sub) const override;
  std::vector<std::string> c_preludes() const override { return {"kiln_quant.h"}; }
  bool c_splittable(const Node&) const override { return true; }
  int64_t c_split_unit(const Node& node) const override;
  bool c_heavy(const Node&) const override { return true; }

  bool packed() const { return packed_n_ != 0; }

 private:
  DType b_dtype(const TensorType& b) const;
  QuantLayout q_;
  int64_t packed_n_, packed_k_;
  bool b_u8_, split_rows_;
};

}  // namespace kiln
