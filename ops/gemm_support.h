#pragma once
// C support code shared by matmul and gemm: a strided GEMM that hands OpenBLAS any operand
// it can describe with (trans, ld) and packs the rest into workspace first.
#include <string>

#include "runtime/dtype.h"

namespace kiln {

// Defines kiln_gemm_<f32|f64|i32|i64>(ctx, M, N, K, alpha, A, rsa, csa, B, rsb, csb, beta, C, ldc)
// returning 0 on success. Float types call cblas_?gemm; integer types run a plain loop.
std::string gemm_support_code(DType dtype);
std::string gemm_fn_name(DType dtype);

}  // namespace kiln
