#include "graph/tensor_type.h"

#include "util/error.h"
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

namespace kiln {

void TensorType::check_size(const std::string& what) const {
  constexpr int64_t kLimit = int64_t{1} << 62;
  int64_t n = 1;
  for (int64_t d : dims) {
    if (d <= 0) continue;  // dynamic or empty: the other dimensions still multiply
    if (__builtin_mul_overflow(n, d, &n) || n > kLimit) {
      throw UserError(what + ": " + to_string() + " has more elements than fit in 64 bits");
    }
  }
}

}  // namespace kiln
