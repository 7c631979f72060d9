#pragma once
// The panel layout of kiln's packed GEMM (kiln_support.gemm_packed_*, module_abi.h): B
// (K x N) as ceil(N / P) panels of K rows by P columns, P = KILN_GEMM_PANEL_BYTES / element
// size, the last panel zero-padded. Model weights are packed once, at compile time.
#include "runtime/tensor.h"

namespace kiln {

// KILN_GEMM_PANEL_BYTES of module_abi.h (ops/ does not see the ABI; each packed gemm's code
// asserts the two agree when its module compiles).
constexpr int64_t kGemmPanelBytes = 64;

// Columns per panel for a floating dtype (16 for float32, 8 for float64): one cache line.
int64_t gemm_panel_width(DType dtype);
// The packed shape (panels, K, P) of a K x N operand.
Shape gemm_packed_shape(DType dtype, int64_t k, int64_t n);
// Packs B, given as K x N, or as N x K when `trans` (ONNX Gemm's transB).
Tensor pack_gemm_panels(const Tensor& b, bool trans);
// Element (i, j) of the K x N matrix a packed tensor holds.
inline int64_t gemm_packed_index(int64_t i, int64_t j, int64_t k, int64_t p) {
  return j / p * k * p + i * p + j % p;
}

// bfloat16 panels (kiln_support.gemm_packed_bf16): ceil(N / 16) panels of ceil(K / 2) rows,
// each row 16 columns of a pair of k (the even k first), zero padded.
constexpr int64_t kBf16PanelWidth = kGemmPanelBytes / 4;
Shape gemm_packed_bf16_shape(int64_t k, int64_t n);
inline int64_t gemm_packed_bf16_index(int64_t i, int64_t j, int64_t k) {
  const int64_t pairs = (k + 1) / 2;
  return j / kBf16PanelWidth * pairs * 2 * kBf16PanelWidth + i / 2 * 2 * kBf16PanelWidth +
         j % kBf16PanelWidth * 2 + i % 2;
}
// float32 panels (pack_gemm_panels) of a K x N matrix as bfloat16 panels, each value
// rounded to nearest, ties to even.
Tensor gemm_panels_to_bf16(const Tensor& panels, int64_t n);

}  // namespace kiln
