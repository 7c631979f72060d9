#include "ops/c/gemm_pack.h"

#include <cstring>

#include "util/error.h"

namespace kiln {

int64_t gemm_panel_width(DType dtype) {
  if (dtype != DType::kFloat32 && dtype != DType::kFloat64) {
    throw InternalError("gemm panels hold float32 or float64, not " +
                        std::string(dtype_name(dtype)));
  }
  return kGemmPanelBytes / static_cast<int64_t>(dtype_size(dtype));
}

Shape gemm_packed_shape(DType dtype, int64_t k, int64_t n) {
  const int64_t p = gemm_panel_width(dtype);
  return {(n + p - 1) / p, k, p};
}

Tensor pack_gemm_panels(const Tensor& b, bool trans) {
  if (b.ndim() != 2) throw InternalError("pack_gemm_panels: B must be 2-D, got " + b.describe());
  const int64_t k = b.shape()[trans ? 1 : 0], n = b.shape()[trans ? 0 : 1];
  const int64_t p = gemm_panel_width(b.dtype());
  Tensor out = Tensor::zeros(b.dtype(), gemm_packed_shape(b.dtype(), k, n));
  const Tensor src = b.contiguous();
  const size_t es = dtype_size(b.dtype());
  const char* from = static_cast<const char*>(src.data());
  char* to = static_cast<char*>(out.data());
  for (int64_t i = 0; i < k; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      const int64_t s = trans ? j * k + i : i * n + j;
      std::memcpy(to + gemm_packed_index(i, j, k, p) * static_cast<int64_t>(es),
                  from + s * static_cast<int64_t>(es), es);
    }
  }
  return out;
}

Shape gemm_packed_bf16_shape(int64_t k, int64_t n) {
  return {(n + kBf16PanelWidth - 1) / kBf16PanelWidth, (k + 1) / 2, 2 * kBf16PanelWidth};
}

Tensor gemm_panels_to_bf16(const Tensor& panels, int64_t n) {
  if (panels.dtype() != DType::kFloat32 || panels.ndim() != 3 ||
      panels.shape()[2] != kBf16PanelWidth ||
      panels.shape()[0] != (n + kBf16PanelWidth - 1) / kBf16PanelWidth) {
    throw UserError("gemm_panels_to_bf16 takes float32 GEMM panels of " + std::to_string(n) +
                    " columns, got " + panels.describe());
  }
  const int64_t k = panels.shape()[1];
  Tensor out = Tensor::zeros(DType::kBFloat16, gemm_packed_bf16_shape(k, n));
  const Tensor src = panels.contiguous();
  const auto* from = static_cast<const float*>(src.data());
  auto* to = static_cast<uint16_t*>(out.data());
  for (int64_t i = 0; i < k; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      to[gemm_packed_bf16_index(i, j, k)] =
          bfloat16_bits(from[gemm_packed_index(i, j, k, kBf16PanelWidth)]);
    }
  }
  return out;
}

}  // namespace kiln
