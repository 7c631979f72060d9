#pragma once
// ONNX Pad in constant mode (props: pads = [begin_0.., end_0..], value). Negative pads crop.
#include "ops/cop.h"

namespace kiln {

class Pad : public COp {
 public:
  explicit Pad(Attrs props);
  std::vector<Variable*> grad(const GradArgs& args) const override;  // autodiff: ops/grad_*.cpp
  std::vector<TensorType> infer_type(const std::vector<TensorType>& inputs) const override;
  std::vector<Shape> infer_shape(const std::vector<Shape>& inputs) const override;
  void perform(const std::vector<Tensor>& inputs, std::vector<Tensor>& outputs) const override;
  std::optional<int> cache_version() const override { return 2; }
  std::string c_code(const Node& node, const CodeNames& names, const Sub& sub) const override;
  std::vector<std::string> c_preludes() const override { return {"kiln_index.h"}; }
  // A pad value of ±inf or NaN is written as INFINITY / NAN.
  std::vector<std::string> c_headers() const override { return {"<math.h>"}; }

 private:
  void check_rank(int rank) const;
  std::vector<int64_t> pads_;
  double value_;
};

}  // namespace kiln
