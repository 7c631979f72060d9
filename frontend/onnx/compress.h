#pragma once
// ONNX Compress by a condition known only at run time, evaluated on the host between compiled
// stages (frontend/model_function.h): its output's size is the count of true entries. A
// condition known at load time is a gather by constant indices instead (onnx_ops_shape.cpp).
#include <optional>

#include "runtime/tensor.h"

namespace kiln {

// The slices of x along `axis` (of x flattened, without one) whose entry of the 1-D `cond` is
// non-zero; a non-zero entry past the axis is an error naming its position.
Tensor compress(const Tensor& x, const Tensor& cond, std::optional<int64_t> axis);

}  // namespace kiln
