#include "frontend/onnx/compress.h"

#include <cstring>

#include "util/error.h"

namespace kiln {

Tensor compress(const Tensor& x_in, const Tensor& cond_in, std::optional<int64_t> axis) {
  const Tensor c = cond_in.contiguous();
  if (c.ndim() != 1) throw UserError("Compress's condition must be 1-D, got " + c.describe());
  Tensor x = x_in.contiguous();
  if (!axis) x = Tensor(x.storage(), 0, x.dtype(), Shape{x.numel()}, {1});
  const int rank = x.ndim();
  const int64_t a = axis.value_or(0);
  if (a < -rank || a >= rank)
    throw UserError("Compress's axis " + std::to_string(a) + " is outside " + x.describe());
  const auto ax = static_cast<size_t>(a < 0 ? a + rank : a);
  const int64_t len = x.shape()[ax];
  std::vector<int64_t> kept;
  for (int64_t i = 0; i < c.numel(); ++i) {
    if (c.load(i) == 0) continue;
    if (i >= len)
      throw UserError("Compress's condition is true at " + std::to_string(i) +
                      ", past the axis's " + std::to_string(len) + " entries");
    kept.push_back(i);
  }
  int64_t outer = 1, inner = 1;
  for (size_t d = 0; d < ax; ++d) outer *= x.shape()[d];
  for (size_t d = ax + 1; d < x.shape().size(); ++d) inner *= x.shape()[d];
  Shape shape = x.shape();
  shape[ax] = static_cast<int64_t>(kept.size());
  Tensor out = Tensor::empty(x.dtype(), shape);
  const size_t row = static_cast<size_t>(inner) * dtype_size(x.dtype());
  const auto* src = static_cast<const char*>(x.data());
  auto* dst = static_cast<char*>(out.data());
  for (int64_t o = 0; o < outer; ++o) {
    for (int64_t k : kept) {
      std::memcpy(dst, src + (o * len + k) * static_cast<int64_t>(row), row);
      dst += row;
    }
  }
  return out;
}

}  // namespace kiln
