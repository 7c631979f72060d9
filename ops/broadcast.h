#pragma once
// NumPy/ONNX broadcasting: static (types with dynamic dimensions) and at run time.
#include <string>
#include <vector>

#include "graph/tensor_type.h"
#include "runtime/tensor.h"

namespace kiln {

// Output dims of broadcasting `dims`; a dynamic dimension against 1 stays dynamic, against
// a known n > 1 becomes n (checked again at run time). Throws UserError on a static conflict.
std::vector<int64_t> broadcast_dims(const std::vector<std::vector<int64_t>>& dims);
// Run-time broadcast of concrete shapes; throws UserError naming both shapes.
Shape broadcast_shapes(const std::vector<Shape>& shapes);
// Logical flat index into `in_shape` for output flat index `flat` of `out_shape`.
int64_t broadcast_source_index(int64_t flat, const Shape& out_shape, const Shape& in_shape);
// Normalises an axis in [-rank, rank) to [0, rank); throws naming `what`.
int normalize_axis(int64_t axis, int rank, const std::string& what);

}  // namespace kiln
