#pragma once
// The weight layout of kiln's packed-weight direct convolution (kiln_support.conv_blocks_*,
// module_abi.h): W (M, C/group, k...) as ceil(M / B) blocks, each its taps (C/group x k...)
// by B output channels, B = KILN_CONV_BLOCK, the last block's channels past M zero. Model
// weights are packed once, at compile time.
#include "runtime/tensor.h"

namespace kiln {

// KILN_CONV_BLOCK of module_abi.h (ops/ does not see the ABI; each packed convolution's
// code asserts the two agree when its module compiles).
constexpr int64_t kConvBlock = 16;

// The packed shape (blocks, taps, B) of M output channels over `taps` taps.
Shape conv_blocks_shape(int64_t m, int64_t taps);
// Packs W (M, C/group, k...), any float dtype.
Tensor pack_conv_blocks(const Tensor& w);
// Where output channel r's tap t sits in a packed weight of `taps` taps.
inline int64_t conv_blocks_index(int64_t r, int64_t t, int64_t taps) {
  return r / kConvBlock * taps * kConvBlock + t * kConvBlock + r % kConvBlock;
}

}  // namespace kiln
