#pragma once
// Conversion between any two dtypes (props: to), storage types included: float16 and
// bfloat16 round to nearest even (runtime/support/kiln_half.h; float64 goes through float32,
// as onnxruntime does), integers keep their low bits (two's complement), floats become
// integers by truncation, saturating at the 64-bit limits with NaN as 0, and anything
// becomes bool as "not zero". The ONNX frontend converts storage-only types (float16,
// bfloat16, int16, uint16, uint32, uint64) to a compute type at the graph's edges with it.
#include "ops/cop.h"

namespace kiln {

class Convert : public COp {
 public:
  explicit Convert(Attrs props);
  std::vector<Variable*> grad(const GradArgs& args) const override;  // autodiff: ops/grad_*.cpp
  std::vector<TensorType> infer_type(const std::vector<TensorType>& inputs) const override;
  std::vector<Shape> infer_shape(const std::vector<Shape>& inputs) const override;
  void perform(const std::vector<Tensor>& inputs, std::vector<Tensor>& outputs) const override;
  std::optional<int> cache_version() const override { return 1; }
  std::string c_code(const Node& node, const CodeNames& names, const Sub& sub) const override;
  std::string c_support_code() const override;
  std::vector<std::string> c_preludes() const override { return {"kiln_index.h", "kiln_half.h"}; }

  DType to() const { return to_; }

 private:
  DType to_;
};

}  // namespace kiln
