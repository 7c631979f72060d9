/* The bfloat16 packed GEMM (gemm_bf16.c), one copy per vector ISA and one for AVX512-BF16;
 * support.c hands modules the best the running CPU has as kiln_support.gemm_packed_bf16. */
#ifndef KILN_GEMM_BF16_H
#define KILN_GEMM_BF16_H
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define KILN_GEMM_BF16_DECL(ISA)                                                                 \
  void kiln_gemm_packed_bf16_##ISA(int64_t m, int64_t n, int64_t k, float alpha, const float* a, \
                                   int64_t rsa, int64_t csa, const uint16_t* bp, float beta,     \
                                   float* c, int64_t ldc, const float* bias, int64_t rsb,        \
                                   int64_t csb, float lo, float hi);
KILN_GEMM_BF16_DECL(base)
#if defined(__x86_64__)
KILN_GEMM_BF16_DECL(avx2)
KILN_GEMM_BF16_DECL(avx512)
KILN_GEMM_BF16_DECL(avx512bf16)
#endif
#undef KILN_GEMM_BF16_DECL

#ifdef __cplusplus
}
#endif

#endif /* KILN_GEMM_BF16_H */
