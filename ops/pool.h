#pragma once
// ONNX MaxPool and AveragePool, 1-D and 2-D (props: kernel_shape, strides, dilations,
// pads, auto_pad, ceil_mode, count_include_pad for the average). The maximum also takes
// uint8 and int8 (a quantized model's pool).
#include "ops/cop.h"
#include "ops/window.h"

namespace kiln {

class Pool : public COp {
 public:
  Pool(bool is_max, Attrs props);
  std::vector<Variable*> grad(const GradArgs& args) const override;  // autodiff: ops/grad_*.cpp
  std::vector<TensorType> infer_type(const std::vector<TensorType>& inputs) const override;
  std::vector<Shape> infer_shape(const std::vector<Shape>& inputs) const override;
  void perform(const std::vector<Tensor>& inputs, std::vector<Tensor>& outputs) const override;
  std::optional<int> cache_version() const override { return 5; }
  std::string c_code(const Node& node, const CodeNames& names, const Sub& sub) const override;
  std::vector<std::string> c_preludes() const override { return {"kiln_window.h"}; }
  bool c_splittable(const Node& node) const override { return true; }

  bool is_max() const { return is_max_; }
  bool count_include_pad() const { return count_include_pad_; }
  std::vector<WindowDims> geometry(const std::vector<int64_t>& x) const;

 private:
  std::string max_pool_by_phases(const std::vector<WindowDims>& g, const CodeNames& names,
                                 const Sub& sub, const std::string& T, const std::string& S) const;
  std::string byte_max_pool(const std::vector<WindowDims>& g, const CodeNames& names,
                            const Sub& sub, DType dt) const;
  bool is_max_;
  bool count_include_pad_;
  WindowAttrs window_;
};

}  // namespace kiln
