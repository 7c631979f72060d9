#include "ops/c/qgemm_pack.h"

#include <cstring>

#include "util/error.h"

namespace kiln {
namespace {

constexpr int64_t kPanel = 16;

// Packs a K x N operand read through at(t, j) into dst.
template <class At>
void pack_into(int8_t* dst, int64_t k, int64_t n, At at) {
  const int64_t k4 = (k + 3) / 4, np = (n + kPanel - 1) / kPanel;
  std::memset(dst, 0, static_cast<size_t>(qgemm_packed_bytes(k, n)));
  auto* colsum = reinterpret_cast<int32_t*>(dst + np * k4 * 64);
  for (int64_t t = 0; t < k; ++t) {
    for (int64_t j = 0; j < n; ++j) {
      const int8_t v = at(t, j);
      dst[((j / kPanel) * k4 + t / 4) * 64 + (j % kPanel) * 4 + t % 4] = v;
      int32_t s;
      std::memcpy(&s, colsum + j, sizeof s);
      s += v;
      std::memcpy(colsum + j, &s, sizeof s);
    }
  }
}

// Element i of an int8 or uint8 tensor as the kernel stores it (uint8 shifted by -128).
int8_t stored_byte(const Tensor& b, int64_t i) {
  const int64_t v = b.load_int(i);
  return static_cast<int8_t>(b.dtype() == DType::kUInt8 ? v - 128 : v);
}

void check_bytes(const Tensor& b, const char* what) {
  if (b.dtype() != DType::kInt8 && b.dtype() != DType::kUInt8) {
    throw InternalError(std::string(what) + ": an int8 or uint8 weight, not " + b.describe());
  }
}

}  // namespace

int64_t qgemm_packed_bytes(int64_t k, int64_t n) {
  const int64_t np = (n + kPanel - 1) / kPanel;
  return np * ((k + 3) / 4) * 64 + np * kPanel * static_cast<int64_t>(sizeof(int32_t));
}

Tensor pack_qgemm(const Tensor& b) {
  check_bytes(b, "pack_qgemm");
  if (b.ndim() != 2) throw InternalError("pack_qgemm: B must be 2-D, got " + b.describe());
  const Tensor src = b.contiguous();
  const int64_t k = b.shape()[0], n = b.shape()[1];
  Tensor out = Tensor::zeros(DType::kInt8, {qgemm_packed_bytes(k, n)});
  pack_into(static_cast<int8_t*>(out.data()), k, n,
            [&](int64_t t, int64_t j) { return stored_byte(src, t * n + j); });
  return out;
}

Tensor pack_qconv(const Tensor& w, int64_t group, bool c4) {
  check_bytes(w, "pack_qconv");
  if (w.ndim() < 3 || group < 1 || w.shape()[0] % group != 0) {
    throw InternalError("pack_qconv: a weight (M, C/group, k...) of group " +
                        std::to_string(group) + ", not " + w.describe());
  }
  if (c4 && (group != 1 || w.shape()[1] != 3)) {
    throw InternalError("pack_qconv: c4 takes a weight of three channels and group 1, not " +
                        w.describe());
  }
  const Tensor src = w.contiguous();
  const int64_t mg = w.shape()[0] / group, kw = w.numel() / w.shape()[0];
  const int64_t cg = w.shape()[1], taps = kw / cg;
  const int64_t cp = c4 ? 4 : cg, kg = cp * taps;  // each tap's channels in the packed rows
  const int64_t gbytes = qgemm_packed_bytes(kg, mg);
  Tensor out = Tensor::zeros(DType::kInt8, {gbytes * group});
  auto* dst = static_cast<int8_t*>(out.data());
  for (int64_t g = 0; g < group; ++g) {
    pack_into(dst + g * gbytes, kg, mg, [&](int64_t t, int64_t m) -> int8_t {
      // Taps in the rows' order (ky, kx, ci), as the module gathers them. The widened
      // channel's weight is 0: its pixel is the zero point, so it adds nothing either way.
      if (t % cp >= cg) return 0;
      return stored_byte(src, ((g * mg + m) * cg + t % cp) * taps + t / cp);
    });
  }
  return out;
}

int32_t qgemm_packed_at(const int8_t* packed, int64_t k, int64_t t, int64_t j) {
  return packed[((j / kPanel) * ((k + 3) / 4) + t / 4) * 64 + (j % kPanel) * 4 + t % 4];
}

}  // namespace kiln
