#include "frontend/onnx/nonzero.h"

#include <cstdint>
#include <vector>

namespace kiln {

namespace {

// The positions of the non-zero elements of n values at p (NaN is non-zero, -0.0 zero).
template <class T>
void scan_nonzero(const void* p, int64_t n, std::vector<int64_t>& hits) {
  const T* v = static_cast<const T*>(p);
  for (int64_t i = 0; i < n; ++i)
    if (v[i] != T(0)) hits.push_back(i);
}

}  // namespace

Tensor nonzero_indices(const Tensor& x) {
  const Tensor c = x.contiguous();
  const Shape shape = c.shape().empty() ? Shape{1} : c.shape();
  const int64_t n = c.numel();
  std::vector<int64_t> hits;
  // A detector's masks hold millions of scores: read them in place, by type.
  switch (c.dtype()) {
    case DType::kBool:
    case DType::kUInt8:
      scan_nonzero<uint8_t>(c.data(), n, hits);
      break;
    case DType::kInt8:
      scan_nonzero<int8_t>(c.data(), n, hits);
      break;
    case DType::kInt32:
      scan_nonzero<int32_t>(c.data(), n, hits);
      break;
    case DType::kInt64:
      scan_nonzero<int64_t>(c.data(), n, hits);
      break;
    case DType::kFloat32:
      scan_nonzero<float>(c.data(), n, hits);
      break;
    case DType::kFloat64:
      scan_nonzero<double>(c.data(), n, hits);
      break;
    default:
      for (int64_t i = 0; i < n; ++i) {
        if (c.load(i) != 0) hits.push_back(i);  // load widens to double: NaN != 0, -0.0 == 0
      }
  }
  const auto rank = static_cast<int64_t>(shape.size());
  const auto count = static_cast<int64_t>(hits.size());
  Tensor out = Tensor::empty(DType::kInt64, {rank, count});
  int64_t* o = static_cast<int64_t*>(out.data());
  for (int64_t k = 0; k < count; ++k) {
    int64_t flat = hits[static_cast<size_t>(k)];
    for (int64_t d = rank - 1; d >= 0; --d) {
      const int64_t extent = shape[static_cast<size_t>(d)];
      o[d * count + k] = flat % extent;
      flat /= extent;
    }
  }
  return out;
}

}  // namespace kiln
