/* C[M,N] = alpha * A[M,K] B[K,N] + beta * C through OpenBLAS, with A and B given by (row,
 * column) element strides: a layout BLAS can read directly goes as is (transposed where
 * that fits), any other is packed into workspace first. */
#include <cblas.h>

#include "runtime/support/gemm.h"

/* Chooses (trans, ld) so BLAS reads element (i, k) of an R x C operand at i*rs + k*cs. */
static int blas_layout(int64_t R, int64_t C, int64_t rs, int64_t cs, int *trans, int64_t *ld) {
  if ((C <= 1 || cs == 1) && (R <= 1 || rs >= C)) {
    *trans = 0;
    *ld = R <= 1 ? (C > 1 ? C : 1) : rs;
    return 1;
  }
  if ((R <= 1 || rs == 1) && (C <= 1 || cs >= R)) {
    *trans = 1;
    *ld = C <= 1 ? (R > 1 ? R : 1) : cs;
    return 1;
  }
  return 0;
}

#define KILN_BLAS_GEMM(T, S, BLAS)                                                                \
  static const T *blas_pack_##S(kiln_ctx *ctx, const T *X, int64_t R, int64_t C, int64_t rs,    \
                                int64_t cs) {                                                    \
    T *P = (T *)ctx->workspace(ctx, (size_t)(R * C) * sizeof(T));                                \
    if (!P) return NULL;                                                                         \
    for (int64_t i = 0; i < R; ++i)                                                              \
      for (int64_t k = 0; k < C; ++k) P[i * C + k] = X[i * rs + k * cs];                         \
    return P;                                                                                    \
  }                                                                                              \
  int kiln_support_gemm_##S(kiln_ctx *ctx, int64_t M, int64_t N, int64_t K, T alpha, const T *A,  \
                            int64_t rsa, int64_t csa, const T *B, int64_t rsb, int64_t csb,      \
                            T beta, T *C, int64_t ldc) {                                         \
    if (M == 0 || N == 0) return 0;                                                              \
    if (K == 0) {                                                                                \
      for (int64_t i = 0; i < M; ++i)                                                            \
        for (int64_t j = 0; j < N; ++j) C[i * ldc + j] = beta == 0 ? (T)0 : beta * C[i * ldc + j]; \
      return 0;                                                                                  \
    }                                                                                            \
    if (M > INT32_MAX || N > INT32_MAX || K > INT32_MAX) {                                       \
      ctx->fail(ctx, "matrix too large for BLAS (%lld x %lld x %lld)", (long long)M,             \
                (long long)N, (long long)K);                                                     \
      return 1;                                                                                  \
    }                                                                                            \
    int ta, tb;                                                                                  \
    int64_t lda, ldb;                                                                            \
    if (!blas_layout(M, K, rsa, csa, &ta, &lda)) {                                               \
      A = blas_pack_##S(ctx, A, M, K, rsa, csa);                                                 \
      if (!A) {                                                                                  \
        ctx->fail(ctx, "out of workspace memory packing A");                                     \
        return 1;                                                                                \
      }                                                                                          \
      ta = 0;                                                                                    \
      lda = K;                                                                                   \
    }                                                                                            \
    if (!blas_layout(K, N, rsb, csb, &tb, &ldb)) {                                               \
      B = blas_pack_##S(ctx, B, K, N, rsb, csb);                                                 \
      if (!B) {                                                                                  \
        ctx->fail(ctx, "out of workspace memory packing B");                                     \
        return 1;                                                                                \
      }                                                                                          \
      tb = 0;                                                                                    \
      ldb = N;                                                                                   \
    }                                                                                            \
    if (lda > INT32_MAX || ldb > INT32_MAX || ldc > INT32_MAX) {                                 \
      ctx->fail(ctx, "leading dimension too large for BLAS");                                    \
      return 1;                                                                                  \
    }                                                                                            \
    BLAS(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, (int)M,  \
         (int)N, (int)K, alpha, A, (int)lda, B, (int)ldb, beta, C, (int)(ldc > 0 ? ldc : 1));    \
    return 0;                                                                                    \
  }

KILN_BLAS_GEMM(float, f32, cblas_sgemm)
KILN_BLAS_GEMM(double, f64, cblas_dgemm)
