#pragma once
// A tensor's static type: dtype plus per-dimension size, each known or dynamic (kDynamic).
#include <cstdint>
#include <string>
#include <vector>

#include "runtime/dtype.h"

namespace kiln {

constexpr int64_t kDynamic = -1;

struct TensorType {
  DType dtype = DType::kFloat32;
  std::vector<int64_t> dims;

  int rank() const { return static_cast<int>(dims.size()); }
  bool operator==(const TensorType&) const = default;
  bool is_static() const {
    for (int64_t d : dims) {
      if (d == kDynamic) return false;
    }
    return true;
  }
  // The element count, or kDynamic when a dimension is unknown.
  int64_t static_numel() const {
    int64_t n = 1;
    for (int64_t d : dims) {
      if (d == kDynamic) return kDynamic;
      n *= d;
    }
    return n;
  }
  std::string to_string() const;  // "float32 (?, 256)"
  // True when a concrete shape fits: same rank, equal wherever a dimension is known.
  bool accepts(const std::vector<int64_t>& shape) const;
  // Throws UserError naming `what` when the known non-zero dimensions multiply past 2^62:
  // no tensor can have that shape, and the shape rules' products must not overflow.
  void check_size(const std::string& what) const;
};

}  // namespace kiln
