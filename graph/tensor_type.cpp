#include "graph/tensor_type.h"

#include "util/strings.h"

namespace kiln {

std::string TensorType::to_string() const {
  return std::string(dtype_name(dtype)) + " " + dims_to_string(dims);
}

bool TensorType::accepts(const std::vector<int64_t>& shape) const {
  if (shape.size() != dims.size()) return false;
  for (size_t i = 0; i < dims.size(); ++i) {
    if (dims[i] != kDynamic && dims[i] != shape[i]) return false;
  }
  return true;
}

}  // namespace kiln
