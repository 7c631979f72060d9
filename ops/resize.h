#pragma once
// ONNX Resize (opsets 11-17) as one op: props mode ("nearest" | "linear" | "cubic"),
// coordinate_transformation_mode, nearest_mode, cubic_coeff_a, exclude_outside,
// extrapolation_value, roi (tf_crop_and_resize: starts then ends, per dimension), and either
// scales (output = floor(input * scale)) or sizes. Every dimension is interpolated on its
// own (separable): nearest picks one input index, linear two and cubic four, with edge
// values past the borders, as ONNX's reference does.
#include "ops/cop.h"

namespace kiln {

class Resize : public COp {
 public:
  explicit Resize(Attrs props);
  std::vector<TensorType> infer_type(const std::vector<TensorType>& inputs) const override;
  std::vector<Shape> infer_shape(const std::vector<Shape>& inputs) const override;
  void perform(const std::vector<Tensor>& inputs, std::vector<Tensor>& outputs) const override;
  std::optional<int> cache_version() const override { return 2; }
  std::string c_code(const Node& node, const CodeNames& names, const Sub& sub) const override;
  std::string c_support_code() const override;
  std::vector<std::string> c_preludes() const override { return {"kiln_index.h"}; }
  std::vector<std::string> c_headers() const override { return {"<math.h>"}; }
  // Parts take runs of output elements (each builds the small tap tables itself).
  bool c_splittable(const Node&) const override { return true; }

 private:
  Shape out_shape(const Shape& in) const;
  std::vector<double> scales_for(const Shape& in, const Shape& out) const;
  int mode_ = 0, ctm_ = 0, nearest_ = 0;
  double cubic_a_ = -0.75, extrapolation_ = 0;
  bool exclude_outside_ = false;
  std::vector<double> scales_, roi_;
  std::vector<int64_t> sizes_;
};

}  // namespace kiln
