#include "ops/conv_pack.h"

#include <cstring>

#include "util/error.h"

namespace kiln {

Shape conv_blocks_shape(int64_t m, int64_t taps) {
  return {(m + kConvBlock - 1) / kConvBlock, taps, kConvBlock};
}

Tensor pack_conv_blocks(const Tensor& w) {
  if (w.ndim() < 3 || (w.dtype() != DType::kFloat32 && w.dtype() != DType::kFloat64)) {
    throw InternalError("pack_conv_blocks: W must be a float (M, C, k...) weight, got " +
                        w.describe());
  }
  const int64_t m = w.shape()[0], taps = m > 0 ? w.numel() / m : 0;
  Tensor out = Tensor::zeros(w.dtype(), conv_blocks_shape(m, taps));
  const Tensor src = w.contiguous();
  const auto es = static_cast<int64_t>(dtype_size(w.dtype()));
  const char* from = static_cast<const char*>(src.data());
  char* to = static_cast<char*>(out.data());
  for (int64_t r = 0; r < m; ++r) {
    for (int64_t t = 0; t < taps; ++t) {
      std::memcpy(to + conv_blocks_index(r, t, taps) * es, from + (r * taps + t) * es,
                  static_cast<size_t>(es));
    }
  }
  return out;
}

}  // namespace kiln
