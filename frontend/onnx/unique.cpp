#include "frontend/onnx/unique.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>

#include "util/error.h"

namespace kiln {
namespace {

// -1, 0 or 1: a before, equal to or after b; NaN after every number and equal to NaN.
int compare_values(double a, double b) {
  const bool na = std::isnan(a), nb = std::isnan(b);
  if (na || nb) return na == nb ? 0 : (na ? 1 : -1);
  return a < b ? -1 : (a > b ? 1 : 0);
}

}  // namespace

std::vector<Tensor> unique(const Tensor& x_in, std::optional<int64_t> axis, bool sorted) {
  const Tensor x = x_in.contiguous();
  // Slices along the axis: `count` of them, each `inner` elements at stride 1 within `outer`
  // blocks of count * inner.
  int64_t outer = 1, count = x.numel(), inner = 1;
  if (axis) {
    const int64_t rank = x.ndim();
    if (*axis < -rank || *axis >= rank) {
      throw UserError("Unique's axis " + std::to_string(*axis) + " is outside " + x.describe());
    }
    const int64_t a = *axis < 0 ? *axis + rank : *axis;
    count = x.shape()[static_cast<size_t>(a)];
    for (int64_t d = 0; d < a; ++d) outer *= x.shape()[static_cast<size_t>(d)];
    for (int64_t d = a + 1; d < rank; ++d) inner *= x.shape()[static_cast<size_t>(d)];
    axis = a;
  }
  const bool floats = is_float(x.dtype());
  auto element = [&](int64_t slice, int64_t k) {  // element k (row-major) of a slice
    return (k / inner) * count * inner + slice * inner + k % inner;
  };
  const int64_t per_slice = outer * inner;
  auto cmp = [&](int64_t a, int64_t b) {
    for (int64_t k = 0; k < per_slice; ++k) {
      const int64_t ea = element(a, k), eb = element(b, k);
      int c = 0;
      if (floats) {
        c = compare_values(x.load(ea), x.load(eb));
      } else {
        const int64_t va = x.load_int(ea), vb = x.load_int(eb);
        // uint64 orders as unsigned; every other integer type fits int64's order.
        c = x.dtype() == DType::kUInt64
                ? (static_cast<uint64_t>(va) < static_cast<uint64_t>(vb)
                       ? -1
                       : (static_cast<uint64_t>(va) > static_cast<uint64_t>(vb) ? 1 : 0))
                : (va < vb ? -1 : (va > vb ? 1 : 0));
      }
      if (c != 0) return c;
    }
    return 0;
  };
  std::vector<int64_t> order(static_cast<size_t>(count));
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return cmp(a, b) < 0; });
  // Groups of equal slices in sorted order; the first of each is its first occurrence.
  std::vector<int64_t> first, counts, group_of(static_cast<size_t>(count));
  for (size_t i = 0; i < order.size(); ++i) {
    if (i == 0 || cmp(order[i - 1], order[i]) != 0) {
      first.push_back(order[i]);
      counts.push_back(0);
    }
    group_of[static_cast<size_t>(order[i])] = static_cast<int64_t>(first.size()) - 1;
    ++counts.back();
  }
  const int64_t groups = static_cast<int64_t>(first.size());
  std::vector<int64_t> rank_of(static_cast<size_t>(groups));  // group -> position in Y
  std::iota(rank_of.begin(), rank_of.end(), 0);
  if (!sorted) {
    std::vector<int64_t> by_first(static_cast<size_t>(groups));
    std::iota(by_first.begin(), by_first.end(), 0);
    std::sort(by_first.begin(), by_first.end(), [&](int64_t a, int64_t b) {
      return first[static_cast<size_t>(a)] < first[static_cast<size_t>(b)];
    });
    for (int64_t p = 0; p < groups; ++p)
      rank_of[static_cast<size_t>(by_first[static_cast<size_t>(p)])] = p;
  }
  Shape y_shape{groups};
  if (axis) {
    y_shape = x.shape();
    y_shape[static_cast<size_t>(*axis)] = groups;
  }
  Tensor y = Tensor::empty(x.dtype(), y_shape);
  Tensor indices = Tensor::empty(DType::kInt64, {groups});
  Tensor inverse = Tensor::empty(DType::kInt64, {count});
  Tensor counts_t = Tensor::empty(DType::kInt64, {groups});
  const size_t esize = dtype_size(x.dtype());
  for (int64_t g = 0; g < groups; ++g) {
    const int64_t at = rank_of[static_cast<size_t>(g)];
    indices.store_int(at, first[static_cast<size_t>(g)]);
    counts_t.store_int(at, counts[static_cast<size_t>(g)]);
    // Y's slice `at` is x's slice first[g]: element k of one is element k of the other.
    for (int64_t k = 0; k < per_slice; ++k) {
      const int64_t dst = (k / inner) * groups * inner + at * inner + k % inner;
      std::memcpy(static_cast<char*>(y.data()) + static_cast<size_t>(dst) * esize,
                  static_cast<const char*>(x.data()) +
                      static_cast<size_t>(element(first[static_cast<size_t>(g)], k)) * esize,
                  esize);
    }
  }
  for (int64_t i = 0; i < count; ++i)
    inverse.store_int(i, rank_of[static_cast<size_t>(group_of[static_cast<size_t>(i)])]);
  return {y, indices, inverse, counts_t};
}

}  // namespace kiln
