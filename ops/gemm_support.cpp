#include "ops/gemm_support.h"

#include "ctemplate/template.h"
#include "util/error.h"

namespace kiln {
namespace {

// Chooses (trans, ld) so BLAS reads element (i, k) of an R x C operand at i*rs + k*cs.
constexpr const char* kBlasTemplate = R"kiln(/* C[M,N] = alpha * A[M,K] B[K,N] + beta * C; A and B by (row, column) element strides. */
static int kiln_blas_layout_${S}(int64_t R, int64_t C, int64_t rs, int64_t cs, int *trans, int64_t *ld) {
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
static const ${T} *kiln_blas_pack_${S}(kiln_ctx *ctx, const ${T} *X, int64_t R, int64_t C, int64_t rs, int64_t cs) {
  ${T} *P = (${T} *)ctx->workspace(ctx, (size_t)(R * C) * sizeof(${T}));
  if (!P) return NULL;
  for (int64_t i = 0; i < R; ++i)
    for (int64_t k = 0; k < C; ++k) P[i * C + k] = X[i * rs + k * cs];
  return P;
}
static int kiln_gemm_${S}(kiln_ctx *ctx, int64_t M, int64_t N, int64_t K, ${T} alpha,
                          const ${T} *A, int64_t rsa, int64_t csa, const ${T} *B, int64_t rsb,
                          int64_t csb, ${T} beta, ${T} *C, int64_t ldc) {
  if (M == 0 || N == 0) return 0;
  if (K == 0) {
    for (int64_t i = 0; i < M; ++i)
      for (int64_t j = 0; j < N; ++j) C[i * ldc + j] = beta == 0 ? (${T})0 : beta * C[i * ldc + j];
    return 0;
  }
  if (M > INT32_MAX || N > INT32_MAX || K > INT32_MAX) {
    ctx->fail(ctx, "matrix too large for BLAS (%lld x %lld x %lld)", (long long)M, (long long)N, (long long)K);
    return 1;
  }
  int ta, tb;
  int64_t lda, ldb;
  if (!kiln_blas_layout_${S}(M, K, rsa, csa, &ta, &lda)) {
    A = kiln_blas_pack_${S}(ctx, A, M, K, rsa, csa);
    if (!A) { ctx->fail(ctx, "out of workspace memory packing A"); return 1; }
    ta = 0;
    lda = K;
  }
  if (!kiln_blas_layout_${S}(K, N, rsb, csb, &tb, &ldb)) {
    B = kiln_blas_pack_${S}(ctx, B, K, N, rsb, csb);
    if (!B) { ctx->fail(ctx, "out of workspace memory packing B"); return 1; }
    tb = 0;
    ldb = N;
  }
  if (lda > INT32_MAX || ldb > INT32_MAX || ldc > INT32_MAX) {
    ctx->fail(ctx, "leading dimension too large for BLAS");
    return 1;
  }
  cblas_${B}gemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans,
                 (int)M, (int)N, (int)K, alpha, A, (int)lda, B, (int)ldb, beta, C, (int)(ldc > 0 ? ldc : 1));
  return 0;
}
)kiln";

constexpr const char* kLoopTemplate = R"kiln(/* Integer GEMM: no BLAS routine exists, so a plain loop with int64 accumulation. */
static int kiln_gemm_${S}(kiln_ctx *ctx, int64_t M, int64_t N, int64_t K, ${T} alpha,
                          const ${T} *A, int64_t rsa, int64_t csa, const ${T} *B, int64_t rsb,
                          int64_t csb, ${T} beta, ${T} *C, int64_t ldc) {
  (void)ctx;
  for (int64_t i = 0; i < M; ++i) {
    for (int64_t j = 0; j < N; ++j) {
      int64_t acc = 0;
      for (int64_t k = 0; k < K; ++k) acc += (int64_t)A[i * rsa + k * csa] * (int64_t)B[k * rsb + j * csb];
      C[i * ldc + j] = (${T})(alpha * acc + (beta == 0 ? 0 : beta * C[i * ldc + j]));
    }
  }
  return 0;
}
)kiln";

}  // namespace

std::string gemm_fn_name(DType dtype) {
  switch (dtype) {
    case DType::kFloat32: return "kiln_gemm_f32";
    case DType::kFloat64: return "kiln_gemm_f64";
    case DType::kInt32: return "kiln_gemm_i32";
    case DType::kInt64: return "kiln_gemm_i64";
    default: throw InternalError("no gemm for " + std::string(dtype_name(dtype)));
  }
}

std::string gemm_support_code(DType dtype) {
  TemplateValues v;
  v["T"] = std::string(dtype_c_type(dtype));
  switch (dtype) {
    case DType::kFloat32: v["S"] = "f32"; v["B"] = "s"; return render_template(kBlasTemplate, v, "gemm support");
    case DType::kFloat64: v["S"] = "f64"; v["B"] = "d"; return render_template(kBlasTemplate, v, "gemm support");
    case DType::kInt32: v["S"] = "i32"; return render_template(kLoopTemplate, v, "gemm support");
    case DType::kInt64: v["S"] = "i64"; return render_template(kLoopTemplate, v, "gemm support");
    default: throw InternalError("no gemm for " + std::string(dtype_name(dtype)));
  }
}

}  // namespace kiln
