#pragma once
// ONNX Unique evaluated on the host: its outputs' sizes are the count of distinct values, so
// kiln computes it between compiled stages (frontend/model_function.h) or at load time.
#include <optional>
#include <vector>

#include "runtime/tensor.h"

namespace kiln {

// {Y, indices, inverse_indices, counts}. Without `axis`, over x's elements in row-major order
// (Y is 1-D); with it, over x's slices along that axis (Y keeps x's other dimensions), slices
// compared element by element in row-major order. `sorted`: Y ascending; else in the order
// each value first occurs. indices: each value's first position; inverse_indices: each
// position's value in Y; counts: each value's occurrences (all int64, 1-D). NaNs equal each
// other and sort last; -0.0 equals 0.0. Throws UserError for an axis outside x's rank.
std::vector<Tensor> unique(const Tensor& x, std::optional<int64_t> axis, bool sorted);

}  // namespace kiln
