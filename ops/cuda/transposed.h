#pragma once
// CUDA code for transposed convolutions: the direct op (conv_transpose, kept by `-lower`) and
// the fold of a lowered one (conv_transpose_fold, after the GEMM of X channels-last by W).
// One thread per output element gathers the taps that land on it (input i, tap t: position
// i*stride - pad_begin + t*dilation), so no two threads write one element and nothing is
// zeroed first; the bias starts the sum.
#include "ops/conv_transpose.h"
#include "ops/conv_transpose_fold.h"
#include "ops/device_code.h"

namespace kiln {

DeviceCode cuda_conv_transpose(const ConvTranspose& op, const Node& node, const CodeNames& names,
                               const Sub& sub);

DeviceCode cuda_conv_transpose_fold(const ConvTransposeFold& op, const Node& node,
                                    const CodeNames& names, const Sub& sub);

}  // namespace kiln
