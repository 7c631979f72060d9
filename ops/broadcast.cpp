#include "ops/broadcast.h"

#include <algorithm>

#include "util/error.h"
#include "util/strings.h"

namespace kiln {

std::vector<int64_t> broadcast_dims(const std::vector<std::vector<int64_t>>& dims) {
  size_t rank = 0;
  for (const auto& d : dims) rank = std::max(rank, d.size());
  std::vector<int64_t> out(rank, 1);
  for (size_t i = 0; i < rank; ++i) {
    bool any_dynamic = false;
    int64_t known = 1;
    for (const auto& d : dims) {
      if (i + d.size() < rank) continue;  // operand has no dimension here (left-padded with 1)
      int64_t v = d[i + d.size() - rank];
      if (v == kDynamic) {
        any_dynamic = true;
      } else if (v != 1) {
        if (known != 1 && known != v) {
          std::vector<std::string> parts;
          for (const auto& x : dims) parts.push_back(dims_to_string(x));
          throw UserError("cannot broadcast " + join(parts, " with ") + ": dimension " +
                          std::to_string(i) + " is " + std::to_string(known) + " vs " +
                          std::to_string(v));
        }
        known = v;
      }
    }
    out[i] = known != 1 ? known : (any_dynamic ? kDynamic : 1);
  }
  return out;
}

Shape broadcast_shapes(const std::vector<Shape>& shapes) {
  size_t rank = 0;
  for (const auto& s : shapes) rank = std::max(rank, s.size());
  Shape out(rank, 1);
  for (size_t i = 0; i < rank; ++i) {
    for (const auto& s : shapes) {
      if (i + s.size() < rank) continue;
      int64_t v = s[i + s.size() - rank];
      if (v == 1) continue;
      if (out[i] != 1 && out[i] != v) {
        std::vector<std::string> parts;
        for (const auto& x : shapes) parts.push_back(dims_to_string(x));
        throw UserError("cannot broadcast shapes " + join(parts, " with ") + ": dimension " +
                        std::to_string(i) + " is " + std::to_string(out[i]) + " vs " +
                        std::to_string(v));
      }
      out[i] = v;
    }
  }
  return out;
}

int64_t broadcast_source_index(int64_t flat, const Shape& out_shape, const Shape& in_shape) {
  int64_t src = 0, mult = 1;
  const size_t off = out_shape.size() - in_shape.size();
  for (size_t i = out_shape.size(); i-- > 0;) {
    int64_t idx = flat % out_shape[i];
    flat /= out_shape[i];
    if (i < off) continue;
    int64_t d = in_shape[i - off];
    if (d != 1) src += idx * mult;
    mult *= d;
  }
  return src;
}

int normalize_axis(int64_t axis, int rank, const std::string& what) {
  if (axis < -rank || axis >= std::max(rank, 1)) {
    throw UserError(what + ": axis " + std::to_string(axis) + " is out of range for rank " +
                    std::to_string(rank));
  }
  return static_cast<int>(axis < 0 ? axis + rank : axis);
}

}  // namespace kiln
