#pragma once
// layer_norm{axis, epsilon}(x) -> y: each slice over the axes from `axis` on, less its mean,
// times 1 / sqrt(its mean square deviation + epsilon). The scale and shift of ONNX
// LayerNormalization stay separate nodes (one fused elementwise step, or none where
// simplify finds them ones and zeros). The
// `norm` pass makes it from the chain the ONNX importer writes (mean, sub, square, mean,
// add, sqrt, reciprocal, mul), whose values it computes in one pass over each slice where the
// chain took five steps and wrote three slice-sized temporaries.
#include "ops/cop.h"

namespace kiln {

class LayerNorm : public COp {
 public:
  explicit LayerNorm(Attrs props);
  std::vector<Variable*> grad(const GradArgs& args) const override;  // autodiff: grad_linear.cpp
  std::vector<TensorType> infer_type(const std::vector<TensorType>& inputs) const override;
  std::vector<Shape> infer_shape(const std::vector<Shape>& inputs) const override;
  void perform(const std::vector<Tensor>& inputs, std::vector<Tensor>& outputs) const override;
  std::optional<int> cache_version() const override { return 1; }
  std::string c_code(const Node& node, const CodeNames& names, const Sub& sub) const override;
  // Each element is read twice and scaled after a reduction: ViT's 197 x 384 norms (30-40 us
  // on one core) ran on one worker under the light grain while the other waited.
  bool c_heavy(const Node&) const override { return true; }
  // Parts take whole slices (static sizes from the axis on).
  bool c_splittable(const Node& node) const override;
  int64_t c_split_unit(const Node& node) const override;
  std::vector<std::string> c_headers() const override { return {"<math.h>"}; }
  std::vector<std::string> c_preludes() const override { return {"kiln_index.h", "kiln_norm.h"}; }

  int64_t axis() const { return axis_; }
  double epsilon() const { return epsilon_; }

 private:
  int64_t axis_;
  double epsilon_;
};

}  // namespace kiln
