#pragma once
// Softmax and log-softmax over one axis (props: axis, default -1), numerically stable:
// the maximum along the axis is subtracted before exponentiating. Softmax's `safe` (0 or 1)
// makes a slice that is -inf throughout all zeros rather than NaN: PyTorch's _safe_softmax,
// which its scaled-dot-product attention uses, so a fully masked row attends to nothing.
#include "ops/cop.h"

namespace kiln {

class Softmax : public COp {
 public:
  Softmax(bool log, Attrs props);
  std::vector<Variable*> grad(const GradArgs& args) const override;  // autodiff: ops/grad_*.cpp
  std::vector<TensorType> infer_type(const std::vector<TensorType>& inputs) const override;
  std::vector<Shape> infer_shape(const std::vector<Shape>& inputs) const override;
  void perform(const std::vector<Tensor>& inputs, std::vector<Tensor>& outputs) const override;
  std::optional<int> cache_version() const override { return 6; }
  // Each element costs an exponential: a 128 x 128 attention softmax per head is worth
  // splitting, where a copy of that size is not.
  bool c_heavy(const Node&) const override { return true; }
  std::string c_code(const Node& node, const CodeNames& names, const Sub& sub) const override;
  // Parts take whole slices along the axis (static sizes from the axis on), e.g. rows.
  bool c_splittable(const Node& node) const override;
  int64_t c_split_unit(const Node& node) const override;
  std::vector<std::string> c_headers() const override { return {"<math.h>"}; }
  std::vector<std::string> c_preludes() const override {
    return {"kiln_index.h", "kiln_math.h", "kiln_softmax.h"};
  }

  bool log() const { return log_; }
  bool safe() const { return safe_; }
  int64_t axis() const { return axis_; }

 private:
  bool log_;
  bool safe_;
  int64_t axis_;
};

}  // namespace kiln
