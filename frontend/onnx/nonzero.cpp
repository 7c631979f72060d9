#include "frontend/onnx/nonzero.h"

namespace kiln {

Tensor nonzero_indices(const Tensor& x) {
  const Tensor c = x.contiguous();
  const Shape shape = c.shape().empty() ? Shape{1} : c.shape();
  const int64_t n = c.numel();
  std::vector<int64_t> hits;
  for (int64_t i = 0; i < n; ++i) {
    if (c.load(i) != 0) hits.push_back(i);  // load widens to double: NaN != 0, -0.0 == 0
  }
  const auto rank = static_cast<int64_t>(shape.size());
  const auto count = static_cast<int64_t>(hits.size());
  Tensor out = Tensor::empty(DType::kInt64, {rank, count});
  for (int64_t k = 0; k < count; ++k) {
    int64_t flat = hits[static_cast<size_t>(k)];
    for (int64_t d = rank - 1; d >= 0; --d) {
      const int64_t extent = shape[static_cast<size_t>(d)];
      out.store_int(d * count + k, flat % extent);
      flat /= extent;
    }
  }
  return out;
}

}  // namespace kiln
