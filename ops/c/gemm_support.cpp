#include "ops/c/gemm_support.h"

#include "ctemplate/template.h"
#include "util/error.h"

namespace kiln {
namespace {

constexpr const char* kLoopTemplate =
    R"kiln(/* Integer GEMM: no BLAS routine exists, so a plain loop with int64 accumulation. */
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
    case DType::kFloat32:
      return "kiln_gemm_f32";
    case DType::kFloat64:
      return "kiln_gemm_f64";
    case DType::kInt32:
      return "kiln_gemm_i32";
    case DType::kInt64:
      return "kiln_gemm_i64";
    default:
      throw InternalError("no gemm for " + std::string(dtype_name(dtype)));
  }
}

std::string gemm_support_code(DType dtype) {
  TemplateValues v;
  v["T"] = std::string(dtype_c_type(dtype));
  switch (dtype) {
    // Floating GEMM is OpenBLAS behind kiln's support table (runtime/support/gemm.c).
    case DType::kFloat32:
      return "#define kiln_gemm_f32 (KILN_SUPPORT->gemm_f32)\n";
    case DType::kFloat64:
      return "#define kiln_gemm_f64 (KILN_SUPPORT->gemm_f64)\n";
    case DType::kInt32:
      v["S"] = "i32";
      return render_template(kLoopTemplate, v, "gemm support");
    case DType::kInt64:
      v["S"] = "i64";
      return render_template(kLoopTemplate, v, "gemm support");
    default:
      throw InternalError("no gemm for " + std::string(dtype_name(dtype)));
  }
}

}  // namespace kiln
