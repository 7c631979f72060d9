#pragma once
// ONNX Det: det(X (..., M, M)) -> (...), the determinant of each square matrix by LU
// decomposition with partial pivoting in double (the product of the pivots, its sign flipped
// per row swap); a singular matrix gives 0 (or -0), NaN and infinities propagate. Parts take
// runs of matrices.
#include "ops/cop.h"

namespace kiln {

class Det : public COp {
 public:
  explicit Det(Attrs props);
  std::vector<TensorType> infer_type(const std::vector<TensorType>& inputs) const override;
  std::vector<Shape> infer_shape(const std::vector<Shape>& inputs) const override;
  void perform(const std::vector<Tensor>& inputs, std::vector<Tensor>& outputs) const override;
  std::optional<int> cache_version() const override { return 1; }
  std::string c_code(const Node& node, const CodeNames& names, const Sub& sub) const override;
  std::string c_support_code() const override;
  std::vector<std::string> c_headers() const override { return {"<math.h>"}; }
  bool c_splittable(const Node&) const override { return true; }
};

}  // namespace kiln
