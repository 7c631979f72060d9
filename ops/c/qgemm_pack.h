#pragma once
// The packed operand of kiln's integer GEMM (kiln_support.qgemm_u8s8, module_abi.h): a K x N
// int8 matrix as panels of 16 columns by groups of 4 rows, element (t, j) at byte
// ((j/16)*ceil(K/4) + t/4)*64 + (j%16)*4 + t%4, zero padded, then its column sums as int32
// (ceil(N/16)*16 of them). uint8 weights are stored shifted by -128 (their zero point
// follows at run time). Constant weights are packed once, at compile time; the module packs
// the others per call with kiln_support.qpack, to the same layout.
#include "runtime/tensor.h"

namespace kiln {

// Bytes of one packed K x N operand (panels and column sums).
int64_t qgemm_packed_bytes(int64_t k, int64_t n);
// B (K x N, int8 or uint8) packed: an int8 tensor of qgemm_packed_bytes(K, N).
Tensor pack_qgemm(const Tensor& b);
// A convolution weight (M, C/group, k...) packed per group, each group's product being
// (C/group * taps) x (M/group) with its rows in the order (tap, channel), as the module
// gathers its input: B[tap * C/group + ci][m] = W[g*M/group + m][ci][tap]. An int8 tensor of
// group * qgemm_packed_bytes(...) bytes.
// `c4`: W has three channels (group 1), packed as four per tap, the fourth weight 0, for an
// image widened to four channels (QConv's c4).
Tensor pack_qconv(const Tensor& w, int64_t group, bool c4 = false);
// Element (t, j) of a packed K x N operand as stored (after the uint8 shift), and column
// sum j: the reference perform of the ops reads packed weights through these.
int32_t qgemm_packed_at(const int8_t* packed, int64_t k, int64_t t, int64_t j);

}  // namespace kiln
