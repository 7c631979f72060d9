/* Floating GEMM for generated modules (kiln_support.gemm_f32/f64). */
#ifndef KILN_SUPPORT_GEMM_H
#define KILN_SUPPORT_GEMM_H
#include "runtime/module/module_abi.h"

int kiln_support_gemm_f32(kiln_ctx* ctx, int64_t M, int64_t N, int64_t K, float alpha,
                          const float* A, int64_t rsa, int64_t csa, const float* B, int64_t rsb,
                          int64_t csb, float beta, float* C, int64_t ldc);
int kiln_support_gemm_f64(kiln_ctx* ctx, int64_t M, int64_t N, int64_t K, double alpha,
                          const double* A, int64_t rsa, int64_t csa, const double* B, int64_t rsb,
                          int64_t csb, double beta, double* C, int64_t ldc);

#endif /* KILN_SUPPORT_GEMM_H */
