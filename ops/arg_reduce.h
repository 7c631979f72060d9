#pragma once
// ONNX ArgMax / ArgMin (props: axis, keepdims, select_last_index): the int64 index of the
// largest / smallest value along axis. NaN counts as larger (ArgMax) or smaller (ArgMin) than
// every number, as numpy does, and the first NaN wins; ties take the first index, or the last
// with select_last_index.
#include "ops/cop.h"

namespace kiln {

class ArgReduce : public COp {
 public:
  ArgReduce(bool is_max, Attrs props);
  std::vector<TensorType> infer_type(const std::vector<TensorType>& inputs) const override;
  std::vector<Shape> infer_shape(const std::vector<Shape>& inputs) const override;
  void perform(const std::vector<Tensor>& inputs, std::vector<Tensor>& outputs) const override;
  std::optional<int> cache_version() const override { return 1; }
  std::string c_code(const Node& node, const CodeNames& names, const Sub& sub) const override;
  std::vector<std::string> c_preludes() const override { return {"kiln_index.h"}; }

 private:
  bool is_max_;
  int64_t axis_;
  bool keepdims_, last_;
};

}  // namespace kiln
