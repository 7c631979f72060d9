/* The packed-panel GEMM kernel, one copy per vector ISA (gemm_tile.c); support.c hands
 * modules the copy the running CPU supports, as kiln_support.gemm_packed_f32/f64 (whose
 * contract, and the panel layout, module_abi.h states). */
#ifndef KILN_GEMM_TILE_H
#define KILN_GEMM_TILE_H
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define KILN_GEMM_TILE_DECL(T, S, ISA)                                                             \
  void kiln_gemm_packed_##S##_##ISA(                                                               \
      int64_t m, int64_t n, int64_t k, T alpha, const T* a, int64_t rsa, int64_t csa, const T* bp, \
      T beta, T* c, int64_t ldc, const T* bias, int64_t rsb, int64_t csb, T lo, T hi);
KILN_GEMM_TILE_DECL(float, f32, base)
KILN_GEMM_TILE_DECL(double, f64, base)
#if defined(__x86_64__)
KILN_GEMM_TILE_DECL(float, f32, avx2)
KILN_GEMM_TILE_DECL(double, f64, avx2)
KILN_GEMM_TILE_DECL(float, f32, avx512)
KILN_GEMM_TILE_DECL(double, f64, avx512)
#endif
#undef KILN_GEMM_TILE_DECL

#ifdef __cplusplus
}
#endif

#endif /* KILN_GEMM_TILE_H */
