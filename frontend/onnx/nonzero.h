#pragma once
// ONNX NonZero evaluated on the host: its output's size is the count of non-zero elements, so
// kiln computes it between compiled stages (frontend/model_function.h) or at load time.
#include "runtime/tensor.h"

namespace kiln {

// int64 (rank, count): the indices of x's non-zero elements in row-major order, one row per
// dimension (a scalar counts as one element of a 1-D tensor, as numpy does). NaN is non-zero
// and -0.0 is zero.
Tensor nonzero_indices(const Tensor& x);

}  // namespace kiln
