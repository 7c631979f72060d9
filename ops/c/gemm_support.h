#pragma once
// C support code shared by matmul, gemm and conv: a strided GEMM. Float types map to kiln's
// support table (OpenBLAS, runtime/support/gemm.c); integer types get a plain loop.
#include <string>

#include "runtime/dtype.h"

namespace kiln {

// Defines kiln_gemm_<f32|f64|i32|i64>(ctx, M, N, K, alpha, A, rsa, csa, B, rsb, csb, beta, C, ldc)
// returning 0 on success (non-zero after ctx->fail).
std::string gemm_support_code(DType dtype);
std::string gemm_fn_name(DType dtype);

}  // namespace kiln
