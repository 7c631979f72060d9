#include "ops/c/conv_pack.h"

#include "util/error.h"

namespace kiln {

Shape conv_blocks_shape(int64_t m, int64_t taps) {
  return {(m + kConvBlock - 1) / kConvBlock, taps, kConvBlock};
}

namespace {

// Row by row of W: reads run along each row, and a block's writes (taps x B) stay in L2.
// (A memcpy per element made a warm cache hit of ResNet-18, which repacks 11M weights for
// a new weight set, 47 ms where it took 3.)
template <typename T>
void pack_rows(const T* from, T* to, int64_t m, int64_t taps) {
  const int64_t padded = (m + kConvBlock - 1) / kConvBlock * kConvBlock;
  for (int64_t r = m; r < padded; ++r) {  // the last block's rows past M: zero
    T* dst = to + conv_blocks_index(r, 0, taps);
    for (int64_t t = 0; t < taps; ++t) dst[t * kConvBlock] = T(0);
  }
  for (int64_t r = 0; r < m; ++r) {
    const T* src = from + r * taps;
    T* dst = to + conv_blocks_index(r, 0, taps);
    for (int64_t t = 0; t < taps; ++t) dst[t * kConvBlock] = src[t];
  }
}

}  // namespace

Tensor pack_conv_blocks(const Tensor& w) {
  if (w.ndim() < 3 || (w.dtype() != DType::kFloat32 && w.dtype() != DType::kFloat64)) {
    throw InternalError("pack_conv_blocks: W must be a float (M, C, k...) weight, got " +
                        w.describe());
  }
  const int64_t m = w.shape()[0], taps = m > 0 ? w.numel() / m : 0;
  Tensor out = Tensor::empty(w.dtype(), conv_blocks_shape(m, taps));  // every element written
  const Tensor src = w.contiguous();
  if (w.dtype() == DType::kFloat32) {
    pack_rows(static_cast<const float*>(src.data()), static_cast<float*>(out.data()), m, taps);
  } else {
    pack_rows(static_cast<const double*>(src.data()), static_cast<double*>(out.data()), m, taps);
  }
  return out;
}

}  // namespace kiln
