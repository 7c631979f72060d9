// Tensors, .npy files, the allocator, the memory planner and executor input validation.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <limits>
#include <random>
#include <set>

#include "compiler/compile.h"
#include "ops/builders.h"
#include "ops/c/gemm_pack.h"
#include "runtime/exec/memory_plan.h"
#include "runtime/module/module_abi.h"
#include "runtime/io/npy.h"
#include "runtime/storage.h"
#include "runtime/support/conv_nchwc.h"
#include "runtime/support/conv_nchwc_dw.h"
#include "runtime/support/conv_nchwc_wino.h"
#include "runtime/support/gemm_tile.h"
#include "runtime/support/kiln_half.h"
#include "tests/helpers.h"
#include "util/fs.h"

// The AVX-512-shaped copy built for this test alone (tests/CMakeLists.txt).
extern "C" {
void kiln_gemm_packed_f32_wide(int64_t m, int64_t n, int64_t k, float alpha, const float* a,
                               int64_t rsa, int64_t csa, const float* bp, float beta, float* c,
                               int64_t ldc, const float* bias, int64_t rsb, int64_t csb, float lo,
                               float hi);
void kiln_gemm_packed_f64_wide(int64_t m, int64_t n, int64_t k, double alpha, const double* a,
                               int64_t rsa, int64_t csa, const double* bp, double beta, double* c,
                               int64_t ldc, const double* bias, int64_t rsb, int64_t csb, double lo,
                               double hi);
void kiln_conv_nchwc_f32_wide(const float* buf, const int32_t* pos, const int32_t* toff,
                              int64_t taps, int64_t kb, const float* w, const float* bias, float* y,
                              int64_t hw, int64_t ow, int64_t sx, int64_t mb0, int64_t mb1,
                              int64_t p0, int64_t p1, int64_t chunk_rows, float lo, float hi);
void kiln_conv_nchwc_pw_f32_wide(const float* x, int64_t c, int64_t hw, const float* w,
                                 const float* bias, float* y, int64_t mb0, int64_t mb1, int64_t p0,
                                 int64_t p1, float lo, float hi);
}

namespace kiln {
namespace {

template <class T>
using GemmPacked = void (*)(int64_t, int64_t, int64_t, T, const T*, int64_t, int64_t, const T*, T,
                            T*, int64_t, const T*, int64_t, int64_t, T, T);

// Every copy of the packed GEMM this CPU can run (the loader picks the widest), by name, and
// the AVX-512-shaped copy this test builds from generic vectors (tests/CMakeLists.txt).
template <class T>
std::vector<std::pair<std::string, GemmPacked<T>>> gemm_copies() {
  constexpr bool f32 = sizeof(T) == 4;
  std::vector<std::pair<std::string, GemmPacked<T>>> copies;
  copies.emplace_back("base", f32 ? (GemmPacked<T>)kiln_gemm_packed_f32_base
                                  : (GemmPacked<T>)kiln_gemm_packed_f64_base);
  copies.emplace_back("wide", f32 ? (GemmPacked<T>)kiln_gemm_packed_f32_wide
                                  : (GemmPacked<T>)kiln_gemm_packed_f64_wide);
#if defined(__x86_64__)
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) {
    copies.emplace_back("avx2", f32 ? (GemmPacked<T>)kiln_gemm_packed_f32_avx2
                                    : (GemmPacked<T>)kiln_gemm_packed_f64_avx2);
  }
  if (__builtin_cpu_supports("avx512f")) {
    copies.emplace_back("avx512", f32 ? (GemmPacked<T>)kiln_gemm_packed_f32_avx512
                                      : (GemmPacked<T>)kiln_gemm_packed_f64_avx512);
  }
#endif
  return copies;
}

// C = clamp(alpha * A B + beta * C + bias, lo, hi) against a long-double loop, for each ISA's
// copy: row blocks with remainders (one and two rows take wider column blocks: m = 1, 2, 13,
// 14), partial vectors and panels, column chunks (128 floats or
// 64 doubles) with a remainder, k past one k block (512 floats or 256 doubles), A
// read transposed (column stride != 1), beta 0 over a NaN-filled C (which must not be read),
// ldc > n; a bias per row, per column, per element (columns 2 apart) or none; no clamp, a
// relu and a clip (which must apply once, after the last k block, and let a NaN through).
template <class T>
void check_gemm_packed(DType dt, double tol) {
  ASSERT_EQ(kGemmPanelBytes, KILN_GEMM_PANEL_BYTES);
  std::mt19937 rng(53);
  std::uniform_real_distribution<double> u(-1, 1);
  const T inf = std::numeric_limits<T>::infinity(), nan = std::numeric_limits<T>::quiet_NaN();
  const std::pair<T, T> clamps[] = {{-inf, inf}, {T(0), inf}, {T(-0.25), T(0.5)}};
  for (auto [isa, fn] : gemm_copies<T>()) {
    int variant = 0;
    for (int64_t m : {1, 2, 5, 6, 13, 14}) {
      for (int64_t n : {1, 7, 17, 64, 65, 130}) {
        for (int64_t k : {1, 9, 300, 600}) {
          for (bool trans_a : {false, true}) {
            const int bias_mode = variant % 4;  // none, per row, per column, per element
            const auto [lo, hi] = clamps[variant / 4 % 3];
            ++variant;
            const T alpha = static_cast<T>(0.75), beta = trans_a ? T(0) : static_cast<T>(-0.5);
            std::vector<T> a(static_cast<size_t>(m * k)), b(static_cast<size_t>(k * n));
            for (auto& x : a) x = static_cast<T>(u(rng));
            for (auto& x : b) x = static_cast<T>(u(rng));
            const int64_t rsa = trans_a ? 1 : k, csa = trans_a ? m : 1, ldc = n + 3;
            if (m > 1 && lo > -inf) a[static_cast<size_t>((m - 1) * rsa)] = nan;  // a NaN row
            std::vector<T> bias(static_cast<size_t>(m * 2 * n));
            for (auto& x : bias) x = static_cast<T>(u(rng));
            const int64_t rsb = bias_mode == 1 ? 1 : bias_mode == 3 ? 2 * n : 0;
            const int64_t csb = bias_mode == 2 ? 1 : bias_mode == 3 ? 2 : 0;
            std::vector<T> c(static_cast<size_t>(m * ldc));
            for (auto& x : c) x = beta == 0 ? nan : static_cast<T>(u(rng));
            std::vector<T> want = c;
            for (int64_t i = 0; i < m; ++i) {
              for (int64_t j = 0; j < n; ++j) {
                long double acc = 0;
                for (int64_t t = 0; t < k; ++t)
                  acc += (long double)a[i * rsa + t * csa] * b[t * n + j];
                T& w = want[static_cast<size_t>(i * ldc + j)];
                long double x = alpha * acc + (beta == 0 ? 0 : (long double)beta * w);
                if (bias_mode) x += bias[static_cast<size_t>(i * rsb + j * csb)];
                x = x < lo ? lo : x;
                w = static_cast<T>(x > hi ? hi : x);
              }
            }
            Tensor bt = Tensor::empty(dt, {k, n});
            std::memcpy(bt.data(), b.data(), b.size() * sizeof(T));
            Tensor bp = pack_gemm_panels(bt, false);
            fn(m, n, k, alpha, a.data(), rsa, csa, static_cast<const T*>(bp.data()), beta, c.data(),
               ldc, bias_mode ? bias.data() : nullptr, rsb, csb, lo, hi);
            for (int64_t i = 0; i < m; ++i) {
              for (int64_t j = 0; j < ldc; ++j) {
                const T got = c[static_cast<size_t>(i * ldc + j)],
                        exp = want[static_cast<size_t>(i * ldc + j)];
                if (j >= n) {  // past the row: untouched
                  ASSERT_TRUE(std::memcmp(&got, &exp, sizeof(T)) == 0)
                      << isa << " wrote past column " << n;
                  continue;
                }
                const std::string where =
                    isa + " m=" + std::to_string(m) + " n=" + std::to_string(n) +
                    " k=" + std::to_string(k) + " trans_a=" + std::to_string(trans_a) +
                    " bias=" + std::to_string(bias_mode) + " clamp=[" + std::to_string(lo) + ", " +
                    std::to_string(hi) + "] at (" + std::to_string(i) + ", " + std::to_string(j) +
                    ")";
                if (std::isnan(exp)) {
                  ASSERT_TRUE(std::isnan(got)) << where << ": " << got;
                  continue;
                }
                ASSERT_NEAR(got, exp, tol * (1 + std::abs(exp))) << where;
              }
            }
          }
        }
      }
    }
  }
}

TEST(GemmPacked, EveryIsaCopyMatchesALongDoubleLoop) {
  check_gemm_packed<float>(DType::kFloat32, 1e-4);
  check_gemm_packed<double>(DType::kFloat64, 1e-12);
}

using ConvNchwcFn = decltype(&kiln_conv_nchwc_f32_base);

// A kernel's float result against clamp(acc, lo, hi) summed in long double: NaN for NaN,
// infinities exactly, anything else within 1e-5 of the magnitude of the summed terms.
::testing::AssertionResult matches_clamped(float got, long double acc, long double mag, float lo,
                                           float hi) {
  long double want = acc < lo ? lo : acc;
  want = want > hi ? hi : want;
  if (std::isnan(want)) {
    if (std::isnan(got)) return ::testing::AssertionSuccess();
    return ::testing::AssertionFailure() << got << " where NaN was due";
  }
  const double tol = std::isinf(want) ? 0.0 : 1e-5 * (1 + static_cast<double>(mag));
  if (std::isinf(want) ? got == static_cast<float>(want)
                       : std::fabs(got - static_cast<double>(want)) <= tol) {
    return ::testing::AssertionSuccess();
  }
  return ::testing::AssertionFailure()
         << got << " against " << static_cast<double>(want) << " (tolerance " << tol << ")";
}

// The blocked direct convolution (kiln_support.conv_nchwc_f32) of every ISA copy this CPU
// runs, and of one with 32 registers built from generic vectors (7-position blocks), against
// its contract computed in long double. The geometries reach each way the kernel walks a row:
// runs along a row at stride 1, 2 and 3 (the constant and the variable step; several runs of
// one length per call), from a blocked
// input (8 channels per tap) and a plain one (1), rows short enough to take a pointer per
// position across rows (4 and 8 wide), rows cut into uneven runs (13, 29), a part starting
// and ending inside a row, an odd number of output blocks (a last block alone), chunks of one
// row, and a NaN and infinities in the input, with no clamp, a relu and a clip.
TEST(ConvNchwc, EveryIsaCopyMatchesALongDoubleLoop) {
  std::vector<std::pair<std::string, ConvNchwcFn>> copies = {{"base", kiln_conv_nchwc_f32_base},
                                                             {"wide", kiln_conv_nchwc_f32_wide}};
#if defined(__x86_64__)
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
    copies.emplace_back("avx2", kiln_conv_nchwc_f32_avx2);
  if (__builtin_cpu_supports("avx512f")) copies.emplace_back("avx512", kiln_conv_nchwc_f32_avx512);
#endif
  struct Case {
    int64_t kb, c, m, h, w, k, stride, pad;
  };
  const Case cases[] = {
      {8, 16, 24, 7, 13, 3, 1, 1}, {8, 8, 16, 6, 29, 3, 1, 1}, {8, 16, 16, 9, 14, 3, 2, 1},
      {8, 8, 8, 5, 4, 3, 1, 1},    {8, 8, 24, 8, 8, 3, 1, 1},  {8, 8, 16, 11, 22, 1, 3, 0},
      {1, 3, 16, 15, 29, 7, 2, 3}, {1, 3, 8, 6, 7, 3, 1, 1},   {1, 2, 24, 9, 25, 3, 3, 1},
      {8, 8, 16, 7, 7, 3, 1, 1},   {1, 3, 16, 5, 4, 3, 1, 1},  {8, 8, 16, 3, 50, 3, 2, 1},
      {8, 8, 16, 7, 50, 3, 3, 1},  {1, 3, 8, 8, 60, 3, 3, 1}};
  const float inf = std::numeric_limits<float>::infinity();
  const std::pair<float, float> clamps[] = {{-inf, inf}, {0.0f, inf}, {-0.25f, 0.5f}};
  std::mt19937 rng(71);
  std::uniform_real_distribution<float> u(-1, 1);
  int variant = 0;
  for (const Case& cs : cases) {
    const int64_t oh = (cs.h + 2 * cs.pad - cs.k) / cs.stride + 1;
    const int64_t ow = (cs.w + 2 * cs.pad - cs.k) / cs.stride + 1, hw = oh * ow;
    const int64_t wpad = cs.w + 2 * cs.pad, rows = cs.h + 2 * cs.pad, cb = cs.c / cs.kb;
    const int64_t taps = cb * cs.k * cs.k, mblocks = cs.m / 8;
    // The padded input rows as the generated code lays them out: channel group, row, column,
    // kb channels; one NaN and two infinities inside the image.
    std::vector<float> buf(static_cast<size_t>(cb * rows * wpad * cs.kb), 0.0f);
    for (int64_t g = 0; g < cb; ++g)
      for (int64_t y = cs.pad; y < cs.pad + cs.h; ++y)
        for (int64_t x = cs.pad; x < cs.pad + cs.w; ++x)
          for (int64_t k = 0; k < cs.kb; ++k)
            buf[static_cast<size_t>(((g * rows + y) * wpad + x) * cs.kb + k)] = u(rng);
    const size_t mid = static_cast<size_t>(((cs.pad + cs.h / 2) * wpad + cs.pad + 1) * cs.kb);
    buf[mid] = std::nanf("");
    buf[mid + static_cast<size_t>(cs.kb)] = inf;
    buf[mid + static_cast<size_t>(2 * cs.kb)] = -inf;
    std::vector<int32_t> toff, pos;
    for (int64_t g = 0; g < cb; ++g)
      for (int64_t i = 0; i < cs.k; ++i)
        for (int64_t j = 0; j < cs.k; ++j)
          toff.push_back(static_cast<int32_t>(((g * rows + i) * wpad + j) * cs.kb));
    // A part from inside the first row to inside the last (whole rows when there is one).
    const int64_t p0 = oh > 1 ? ow / 2 : 0, p1 = oh > 1 ? hw - ow / 3 : hw;
    for (int64_t p = p0; p < p1; ++p)
      pos.push_back(static_cast<int32_t>((p / ow * cs.stride * wpad + p % ow * cs.stride) * cs.kb));
    std::vector<float> w(static_cast<size_t>(mblocks * taps * cs.kb * 8)), bias(cs.m);
    for (auto& x : w) x = u(rng);
    for (auto& x : bias) x = u(rng);
    const bool with_bias = variant % 2 == 0;
    const auto [lo, hi] = clamps[variant % 3];
    const int64_t mb0 = mblocks > 1 ? 1 : 0, chunk_rows = variant % 4 == 1 ? 1 : 64;
    ++variant;
    for (const auto& [isa, fn] : copies) {
      std::vector<float> y(static_cast<size_t>(cs.m * hw), -7.0f);  // -7: not written
      fn(buf.data(), pos.data(), toff.data(), taps, cs.kb, w.data(),
         with_bias ? bias.data() : nullptr, y.data(), hw, ow, cs.stride * cs.kb, mb0, mblocks, p0,
         p1, chunk_rows, lo, hi);
      for (int64_t b = 0; b < mblocks; ++b) {
        for (int64_t p = 0; p < hw; ++p) {
          for (int64_t l = 0; l < 8; ++l) {
            const float got = y[static_cast<size_t>((b * hw + p) * 8 + l)];
            const std::string where = isa + " case " + std::to_string(variant - 1) + " block " +
                                      std::to_string(b) + " position " + std::to_string(p) +
                                      " lane " + std::to_string(l);
            if (b < mb0 || p < p0 || p >= p1) {
              ASSERT_EQ(got, -7.0f) << where << ": written outside the part";
              continue;
            }
            long double acc = with_bias ? bias[static_cast<size_t>(b * 8 + l)] : 0.0L;
            long double mag = std::fabs(acc);
            for (int64_t t = 0; t < taps; ++t) {
              for (int64_t k = 0; k < cs.kb; ++k) {
                const long double term =
                    (long double)w[static_cast<size_t>(((b * taps + t) * cs.kb + k) * 8 + l)] *
                    buf[static_cast<size_t>(pos[static_cast<size_t>(p - p0)] +
                                            toff[static_cast<size_t>(t)] + k)];
                acc += term;
                mag += std::fabs(term);
              }
            }
            ASSERT_TRUE(matches_clamped(got, acc, mag, lo, hi)) << where;
          }
        }
      }
    }
  }
}

using ConvNchwcPwFn = decltype(&kiln_conv_nchwc_pw_f32_base);

// The blocked pointwise convolution (kiln_support.conv_nchwc_pw_f32) of every ISA copy this CPU
// runs and the 32-register one, against its contract in long double: 8 to 1056 input channels
// (one block, many, and enough that a chunk holds fewer positions than a register block),
// parts that start and end between register blocks, chunks with and without a tail, an odd
// number of output blocks, and a NaN and infinities in the input, with no clamp, a relu and a
// clip.
TEST(ConvNchwc, PointwiseCopiesMatchALongDoubleLoop) {
  std::vector<std::pair<std::string, ConvNchwcPwFn>> copies = {
      {"base", kiln_conv_nchwc_pw_f32_base}, {"wide", kiln_conv_nchwc_pw_f32_wide}};
#if defined(__x86_64__)
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
    copies.emplace_back("avx2", kiln_conv_nchwc_pw_f32_avx2);
  if (__builtin_cpu_supports("avx512f"))
    copies.emplace_back("avx512", kiln_conv_nchwc_pw_f32_avx512);
#endif
  struct Case {
    int64_t c, m, hw, p0, p1;
  };
  const Case cases[] = {{8, 8, 5, 0, 5},       {16, 24, 50, 3, 47},   {24, 16, 29, 1, 29},
                        {64, 40, 200, 5, 193}, {1056, 16, 30, 2, 27}, {8, 24, 1000, 0, 1000}};
  const float inf = std::numeric_limits<float>::infinity();
  const std::pair<float, float> clamps[] = {{-inf, inf}, {0.0f, inf}, {-0.25f, 0.5f}};
  std::mt19937 rng(72);
  std::uniform_real_distribution<float> u(-1, 1);
  int variant = 0;
  for (const Case& cs : cases) {
    std::vector<float> x(static_cast<size_t>(cs.c * cs.hw)), w(static_cast<size_t>(cs.m * cs.c)),
        bias(static_cast<size_t>(cs.m));
    for (auto& e : x) e = u(rng);
    for (auto& e : w) e = u(rng);
    for (auto& e : bias) e = u(rng);
    x[static_cast<size_t>(cs.hw / 2 * 8 + 3)] = std::nanf("");
    x[static_cast<size_t>((cs.hw - 1) * 8 + 1)] = inf;
    x[static_cast<size_t>(2)] = -inf;
    const bool with_bias = variant % 2 == 1;
    const auto [lo, hi] = clamps[variant % 3];
    const int64_t mblocks = cs.m / 8, mb0 = mblocks > 2 ? 1 : 0;
    ++variant;
    for (const auto& [isa, fn] : copies) {
      std::vector<float> y(static_cast<size_t>(cs.m * cs.hw), -7.0f);
      fn(x.data(), cs.c, cs.hw, w.data(), with_bias ? bias.data() : nullptr, y.data(), mb0, mblocks,
         cs.p0, cs.p1, lo, hi);
      for (int64_t b = 0; b < mblocks; ++b) {
        for (int64_t p = 0; p < cs.hw; ++p) {
          for (int64_t l = 0; l < 8; ++l) {
            const float got = y[static_cast<size_t>((b * cs.hw + p) * 8 + l)];
            const std::string where = isa + " case " + std::to_string(variant - 1) + " block " +
                                      std::to_string(b) + " position " + std::to_string(p) +
                                      " lane " + std::to_string(l);
            if (b < mb0 || p < cs.p0 || p >= cs.p1) {
              ASSERT_EQ(got, -7.0f) << where << ": written outside the part";
              continue;
            }
            long double acc = with_bias ? bias[static_cast<size_t>(b * 8 + l)] : 0.0L;
            long double mag = std::fabs(acc);
            for (int64_t i = 0; i < cs.c; ++i) {
              const long double term = (long double)w[static_cast<size_t>((b * cs.c + i) * 8 + l)] *
                                       x[static_cast<size_t>(((i / 8) * cs.hw + p) * 8 + i % 8)];
              acc += term;
              mag += std::fabs(term);
            }
            ASSERT_TRUE(matches_clamped(got, acc, mag, lo, hi)) << where;
          }
        }
      }
    }
  }
}

using ConvNchwcDwFn = decltype(&kiln_conv_nchwc_dw_f32_base);

// The blocked depthwise convolution (kiln_support.conv_nchwc_dw_f32) of every ISA copy this CPU
// runs, against its contract in long double. The 3x3 and 5x5 windows at stride 1 and 2 take
// the grouped path: rows of 1 to 29 positions (every group size, a group alone, groups that
// touch both edges, rows narrower than the window), no padding (no edge group) and uneven
// padding. Other windows (7x7, 3x5, stride 3, strides that differ) take a tap at a time. Parts
// start after the first channel block and row and end before the last row; a NaN and
// infinities sit in the input, with no clamp, a relu and a clip.
TEST(ConvNchwc, DepthwiseCopiesMatchALongDoubleLoop) {
  std::vector<std::pair<std::string, ConvNchwcDwFn>> copies = {
      {"base", kiln_conv_nchwc_dw_f32_base}};
#if defined(__x86_64__)
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
    copies.emplace_back("avx2", kiln_conv_nchwc_dw_f32_avx2);
  if (__builtin_cpu_supports("avx512f"))
    copies.emplace_back("avx512", kiln_conv_nchwc_dw_f32_avx512);
#endif
  struct Case {
    int64_t c, h, w, kh, kw, sh, sw, pt, pl, pb, pr;
  };
  const Case cases[] = {{16, 6, 1, 3, 3, 1, 1, 1, 1, 1, 1},   {16, 5, 2, 3, 3, 1, 1, 1, 1, 1, 1},
                        {24, 7, 7, 3, 3, 1, 1, 1, 1, 1, 1},   {16, 9, 9, 3, 3, 1, 1, 1, 1, 1, 1},
                        {16, 6, 13, 3, 3, 1, 1, 1, 1, 1, 1},  {8, 5, 29, 3, 3, 1, 1, 1, 1, 1, 1},
                        {16, 7, 17, 3, 3, 1, 1, 0, 0, 0, 0},  {16, 9, 15, 3, 3, 2, 2, 1, 1, 1, 1},
                        {16, 8, 16, 3, 3, 2, 2, 0, 0, 1, 1},  {16, 14, 14, 5, 5, 1, 1, 2, 2, 2, 2},
                        {16, 7, 7, 5, 5, 1, 1, 2, 2, 2, 2},   {16, 5, 3, 5, 5, 1, 1, 2, 2, 2, 2},
                        {16, 12, 28, 5, 5, 2, 2, 2, 2, 2, 2}, {16, 9, 9, 5, 5, 2, 2, 2, 2, 2, 2},
                        {16, 9, 20, 5, 5, 1, 1, 0, 0, 0, 0},  {16, 8, 11, 3, 3, 1, 1, 0, 2, 2, 0},
                        {16, 9, 12, 7, 7, 1, 1, 3, 3, 3, 3},  {16, 7, 10, 3, 5, 1, 1, 1, 2, 1, 2},
                        {16, 10, 11, 3, 3, 3, 3, 1, 1, 1, 1}, {16, 9, 13, 3, 3, 1, 2, 1, 1, 1, 1}};
  const float inf = std::numeric_limits<float>::infinity();
  const std::pair<float, float> clamps[] = {{-inf, inf}, {0.0f, inf}, {-0.25f, 0.5f}};
  std::mt19937 rng(73);
  std::uniform_real_distribution<float> u(-1, 1);
  int variant = 0;
  for (const Case& cs : cases) {
    const int64_t oh = (cs.h + cs.pt + cs.pb - cs.kh) / cs.sh + 1;
    const int64_t ow = (cs.w + cs.pl + cs.pr - cs.kw) / cs.sw + 1, blocks = cs.c / 8;
    std::vector<float> x(static_cast<size_t>(cs.c * cs.h * cs.w)),
        w(static_cast<size_t>(cs.c * cs.kh * cs.kw)), bias(static_cast<size_t>(cs.c));
    for (auto& e : x) e = u(rng);
    for (auto& e : w) e = u(rng);
    for (auto& e : bias) e = u(rng);
    // In the last block: a NaN mid-image, +inf at the first column and -inf at the last.
    const int64_t last = (blocks - 1) * cs.h * cs.w * 8;
    x[static_cast<size_t>(last + ((cs.h / 2) * cs.w + cs.w / 2) * 8 + 3)] = std::nanf("");
    x[static_cast<size_t>(last + (cs.h / 2) * cs.w * 8 + 5)] = inf;
    x[static_cast<size_t>(last + ((cs.h / 2) * cs.w + cs.w - 1) * 8 + 6)] = -inf;
    const bool with_bias = variant % 2 == 0;
    const auto [lo, hi] = clamps[variant % 3];
    const int64_t cb0 = 1, oy0 = oh > 2 ? 1 : 0, oy1 = oh > 3 ? oh - 1 : oh;
    ++variant;
    for (const auto& [isa, fn] : copies) {
      std::vector<float> y(static_cast<size_t>(cs.c * oh * ow), -7.0f);  // -7: not written
      fn(x.data(), cs.h, cs.w, w.data(), with_bias ? bias.data() : nullptr, y.data(), oh, ow, cs.kh,
         cs.kw, cs.sh, cs.sw, cs.pt, cs.pl, cb0, blocks, oy0, oy1, lo, hi);
      for (int64_t b = 0; b < blocks; ++b) {
        for (int64_t oy = 0; oy < oh; ++oy) {
          for (int64_t ox = 0; ox < ow; ++ox) {
            for (int64_t l = 0; l < 8; ++l) {
              const float got = y[static_cast<size_t>(((b * oh + oy) * ow + ox) * 8 + l)];
              const std::string where = isa + " case " + std::to_string(variant - 1) + " block " +
                                        std::to_string(b) + " at (" + std::to_string(oy) + ", " +
                                        std::to_string(ox) + ") lane " + std::to_string(l);
              if (b < cb0 || oy < oy0 || oy >= oy1) {
                ASSERT_EQ(got, -7.0f) << where << ": written outside the part";
                continue;
              }
              long double acc = with_bias ? bias[static_cast<size_t>(b * 8 + l)] : 0.0L;
              long double mag = std::fabs(acc);
              for (int64_t i = 0; i < cs.kh; ++i) {
                for (int64_t j = 0; j < cs.kw; ++j) {
                  const int64_t iy = oy * cs.sh - cs.pt + i, ix = ox * cs.sw - cs.pl + j;
                  if (iy < 0 || iy >= cs.h || ix < 0 || ix >= cs.w) continue;
                  const long double term =
                      (long double)w[static_cast<size_t>(((b * cs.kh + i) * cs.kw + j) * 8 + l)] *
                      x[static_cast<size_t>(((b * cs.h + iy) * cs.w + ix) * 8 + l)];
                  acc += term;
                  mag += std::fabs(term);
                }
              }
              ASSERT_TRUE(matches_clamped(got, acc, mag, lo, hi)) << where;
            }
          }
        }
      }
    }
  }
}

using ConvNchwcWinoFn = decltype(&kiln_conv_nchwc_wino_f32_base);

// The Winograd F(2x2, 3x3) and F(4x4, 3x3) convolutions (kiln_support.conv_nchwc_wino_f32 and
// conv_nchwc_wino4_f32) of every ISA copy this CPU runs, against their contract in long
// double: the direct 3x3 sum of the weights the transform was made from (the test transforms
// them itself). Maps whose height and width are no multiple of the tile (a last tile partly
// outside), a single row or column, parts that start at a tile row after the first and end
// before the last, output blocks after the first; each case once with finite
// inputs (the transformed products) and once with a NaN and infinities in the part's input
// rows, whose outputs must be what the direct sum gives (an infinity stays an infinity), and
// once with them outside those rows (the products again, unaffected); no clamp, a relu and a
// clip.
TEST(ConvNchwc, WinogradCopiesMatchALongDoubleLoop) {
  // Per tile (2, 4), the ISA copies.
  std::vector<std::pair<std::string, ConvNchwcWinoFn>> copies[2] = {
      {{"base", kiln_conv_nchwc_wino_f32_base}}, {{"base", kiln_conv_nchwc_wino4_f32_base}}};
#if defined(__x86_64__)
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) {
    copies[0].emplace_back("avx2", kiln_conv_nchwc_wino_f32_avx2);
    copies[1].emplace_back("avx2", kiln_conv_nchwc_wino4_f32_avx2);
  }
  if (__builtin_cpu_supports("avx512f")) {
    copies[0].emplace_back("avx512", kiln_conv_nchwc_wino_f32_avx512);
    copies[1].emplace_back("avx512", kiln_conv_nchwc_wino4_f32_avx512);
  }
#endif
  struct Case {
    int64_t c, m, h, w, oy0, oy1, mb0;
  };
  // oy0 is rounded down to a multiple of the tile.
  const Case cases[] = {{8, 8, 2, 2, 0, 2, 0},      {16, 24, 5, 7, 0, 5, 1},
                        {24, 16, 13, 12, 2, 13, 0}, {64, 40, 14, 14, 4, 10, 2},
                        {8, 16, 1, 9, 0, 1, 0},     {16, 8, 9, 1, 2, 7, 0},
                        {32, 16, 17, 15, 6, 12, 1}, {16, 16, 26, 25, 8, 23, 1}};
  const float inf = std::numeric_limits<float>::infinity();
  const std::pair<float, float> clamps[] = {{-inf, inf}, {0.0f, inf}, {-0.25f, 0.5f}};
  const long double G2[4][3] = {{1, 0, 0}, {0.5L, 0.5L, 0.5L}, {0.5L, -0.5L, 0.5L}, {0, 0, 1}};
  const long double G4[6][3] = {{0.25L, 0, 0},
                                {-1.0L / 6, -1.0L / 6, -1.0L / 6},
                                {-1.0L / 6, 1.0L / 6, -1.0L / 6},
                                {1.0L / 24, 1.0L / 12, 1.0L / 6},
                                {1.0L / 24, -1.0L / 12, 1.0L / 6},
                                {0, 0, 1}};
  std::mt19937 rng(75);
  std::uniform_real_distribution<float> uni(-1, 1);
  int variant = 0;
  for (const int tile : {2, 4}) {
    const int A = tile + 2;
    auto G = [&](int a, int r) { return tile == 2 ? G2[a][r] : G4[a][r]; };
    for (Case cs : cases) {
      cs.oy0 = cs.oy0 / tile * tile;
      const int64_t mbs = cs.m / 8, cb = cs.c / 8, hw = cs.h * cs.w;
      std::vector<float> g(static_cast<size_t>(cs.m * cs.c * 9)), bias(static_cast<size_t>(cs.m));
      for (auto& e : g) e = uni(rng);
      for (auto& e : bias) e = uni(rng);
      // u (A^2, M/8, C, 8): (G g G^T)[e / A][e % A] of output channel b * 8 + l, input channel
      // i (A = tile + 2).
      std::vector<float> u(static_cast<size_t>(A * A * cs.m * cs.c));
      for (int64_t o = 0; o < cs.m; ++o) {
        for (int64_t i = 0; i < cs.c; ++i) {
          const float* k = &g[static_cast<size_t>((o * cs.c + i) * 9)];
          for (int a = 0; a < A; ++a) {
            for (int e = 0; e < A; ++e) {
              long double v = 0;
              for (int r = 0; r < 3; ++r) {
                for (int q = 0; q < 3; ++q) v += G(a, r) * k[r * 3 + q] * G(e, q);
              }
              u[static_cast<size_t>((((a * A + e) * mbs + o / 8) * cs.c + i) * 8 + o % 8)] =
                  static_cast<float>(v);
            }
          }
        }
      }
      for (int special = 0; special < 3; ++special) {
        std::vector<float> x(static_cast<size_t>(cs.c * hw));
        for (auto& e : x) e = uni(rng);
        // special 1: in the part's rows (its last input row, a first and last column); 2: two
        // rows or more outside them, where no output of the part reads.
        const int64_t row = special == 1 ? cs.oy1 - 1 : cs.oy1 + 1 < cs.h ? cs.oy1 + 1 : -1;
        if (special > 0 && row >= 0) {
          const int64_t last = (cb - 1) * hw * 8;
          x[static_cast<size_t>(last + (row * cs.w + cs.w / 2) * 8 + 3)] = std::nanf("");
          x[static_cast<size_t>(last + row * cs.w * 8 + 5)] = inf;
          x[static_cast<size_t>((row * cs.w + cs.w - 1) * 8 + 6)] = -inf;
        }
        const bool with_bias = variant % 2 == 0;
        const auto [lo, hi] = clamps[variant % 3];
        ++variant;
        const int64_t work = A * A * (cs.c + 8 * (mbs - cs.mb0)) *
                             ((cs.oy1 - cs.oy0 + tile - 1) / tile) * ((cs.w + tile - 1) / tile);
        for (const auto& [isa, fn] : copies[tile / 4]) {
          std::vector<float> y(static_cast<size_t>(cs.m * hw), -7.0f);  // -7: not written
          std::vector<float> wk(static_cast<size_t>(work), std::nanf(""));
          fn(x.data(), cs.c, cs.h, cs.w, u.data(), cs.m, with_bias ? bias.data() : nullptr,
             y.data(), cs.mb0, mbs, cs.oy0, cs.oy1, wk.data(), lo, hi);
          for (int64_t o = 0; o < cs.m; ++o) {
            for (int64_t oy = 0; oy < cs.h; ++oy) {
              for (int64_t ox = 0; ox < cs.w; ++ox) {
                const float got =
                    y[static_cast<size_t>(((o / 8 * cs.h + oy) * cs.w + ox) * 8 + o % 8)];
                const std::string where = isa + " F(" + std::to_string(tile) + ") case " +
                                          std::to_string(variant - 1) + " channel " +
                                          std::to_string(o) + " at (" + std::to_string(oy) + ", " +
                                          std::to_string(ox) + ")";
                if (o / 8 < cs.mb0 || oy < cs.oy0 || oy >= cs.oy1) {
                  ASSERT_EQ(got, -7.0f) << where << ": written outside the part";
                  continue;
                }
                long double acc = with_bias ? bias[static_cast<size_t>(o)] : 0.0L;
                long double mag = std::fabs(acc);
                for (int64_t i = 0; i < cs.c; ++i) {
                  for (int64_t r = 0; r < 3; ++r) {
                    for (int64_t q = 0; q < 3; ++q) {
                      const int64_t iy = oy - 1 + r, ix = ox - 1 + q;
                      if (iy < 0 || iy >= cs.h || ix < 0 || ix >= cs.w) continue;
                      const long double term =
                          (long double)g[static_cast<size_t>((o * cs.c + i) * 9 + r * 3 + q)] *
                          x[static_cast<size_t>(((i / 8 * cs.h + iy) * cs.w + ix) * 8 + i % 8)];
                      acc += term;
                      mag += std::fabs(term);
                    }
                  }
                }
                ASSERT_TRUE(matches_clamped(got, acc, mag, lo, hi)) << where;
              }
            }
          }
        }
      }
    }
  }
}

// The panel layout: B[i][j] at (j / P) * k * P + i * P + j % P, from B or its transpose, with
// the last panel's missing columns zero.
TEST(GemmPacked, PanelsHoldBInOrderAndZeroPadding) {
  Tensor b = Tensor::from_doubles(DType::kFloat64, {2, 3}, {1, 2, 3, 4, 5, 6});  // N x K when trans
  // A panel is one 64-byte cache line: 8 doubles, 16 floats.
  for (bool trans : {false, true}) {
    Tensor p = pack_gemm_panels(b, trans);
    const int64_t k = trans ? 3 : 2, n = trans ? 2 : 3;
    ASSERT_EQ(p.shape(), (Shape{1, k, 8}));
    for (int64_t i = 0; i < k; ++i) {
      for (int64_t j = 0; j < 8; ++j) {
        const double want = j >= n ? 0 : trans ? b.load(j * 3 + i) : b.load(i * 3 + j);
        EXPECT_EQ(p.load(gemm_packed_index(i, j, k, 8)), want) << trans << " " << i << " " << j;
      }
    }
  }
  // Columns past the first panel land in the next one, k rows further on.
  Tensor wide = Tensor::empty(DType::kFloat32, {2, 20});
  for (int64_t i = 0; i < 40; ++i) wide.store(i, static_cast<double>(i));
  Tensor wp = pack_gemm_panels(wide, false);
  ASSERT_EQ(wp.shape(), (Shape{2, 2, 16}));
  EXPECT_EQ(wp.load(1 * 2 * 16 + 1 * 16 + 3), wide.load(1 * 20 + 19));
  EXPECT_EQ(wp.load(1 * 2 * 16 + 1 * 16 + 4), 0.0);
  EXPECT_EQ(gemm_packed_shape(DType::kFloat32, 784, 256), (Shape{16, 784, 16}));
  EXPECT_EQ(gemm_packed_shape(DType::kFloat32, 5, 65), (Shape{5, 5, 16}));
  EXPECT_EQ(gemm_packed_shape(DType::kFloat64, 5, 65), (Shape{9, 5, 8}));
}

TEST(Npy, RoundTripsEveryDtypeAndReadsFortranOrder) {
  std::mt19937 rng(1);
  for (DType dt : {DType::kBool, DType::kInt8, DType::kUInt8, DType::kInt32, DType::kInt64,
                   DType::kFloat32, DType::kFloat64, DType::kFloat16, DType::kInt16, DType::kUInt16,
                   DType::kUInt32, DType::kUInt64}) {
    Tensor t = testing::random_tensor(dt, {3, 4}, rng, 0, 100);
    Tensor back = parse_npy(to_npy(t), "mem");
    EXPECT_TRUE(testing::tensors_close(back, t, 0, 0)) << dtype_name(dt);
  }
  Tensor s = Tensor::scalar(DType::kFloat64, 2.5);
  EXPECT_EQ(parse_npy(to_npy(s), "mem").shape(), Shape{});
  // Fortran order: the bytes are the transpose's C order.
  Tensor t = Tensor::from_doubles(DType::kInt32, {2, 3}, {1, 2, 3, 4, 5, 6});
  std::string bytes = to_npy(t.permute({1, 0}).contiguous());
  size_t p = bytes.find("False");
  bytes.replace(p, 5, "True ");
  size_t q = bytes.find("(3, 2)");
  bytes.replace(q, 6, "(2, 3)");
  EXPECT_EQ(parse_npy(bytes, "mem").to_doubles(), t.to_doubles());
}

// Found by fuzz_npy: an empty array whose other dimensions multiply past 64 bits.
TEST(Npy, EmptyArraysWithHugeDimensionsRead) {
  const std::string header =
      "{'descr': '<i4', 'fortran_order': True, 'shape': (0, 43064666885385, 510384), }";
  std::string bytes = std::string("\x93NUMPY\x01\x00", 8);
  const uint16_t len = static_cast<uint16_t>(header.size() + 1);
  bytes.append(reinterpret_cast<const char*>(&len), 2);
  bytes += header + "\n";
  Tensor t = parse_npy(bytes, "empty.npy");
  EXPECT_EQ(t.numel(), 0);
  EXPECT_EQ(t.shape(), (Shape{0, 43064666885385, 510384}));
}

// float16 / bfloat16 rounding (round to nearest even), checked against hand-computed bit
// patterns, and every one of the 65536 patterns converting back to itself.
TEST(HalfFloats, RoundToNearestEvenWithSubnormalsInfinitiesAndNaN) {
  struct Case {
    float f;
    uint16_t h;
  };
  for (const Case& c : std::vector<Case>{{1.0f, 0x3c00},
                                         {-2.0f, 0xc000},
                                         {65504.0f, 0x7bff},
                                         {65519.99f, 0x7bff},
                                         {65520.0f, 0x7c00},  // the first value rounding to inf
                                         {1e9f, 0x7c00},
                                         {-INFINITY, 0xfc00},
                                         {std::ldexp(1.0f, -24), 0x0001},
                                         {std::ldexp(1.0f, -25), 0x0000},  // tie: to even 0
                                         {std::ldexp(3.0f, -25), 0x0002},  // tie: to even 2
                                         {std::ldexp(1.0f, -14), 0x0400},
                                         {std::ldexp(1023.0f, -24), 0x03ff},
                                         {0.1f, 0x2e66},
                                         {1.0f + std::ldexp(1.0f, -11), 0x3c00},  // tie
                                         {1.0f + std::ldexp(3.0f, -11), 0x3c02},  // tie
                                         {-0.0f, 0x8000}}) {
    EXPECT_EQ(kiln_f32_to_f16(c.f), c.h) << c.f;
  }
  EXPECT_TRUE(std::isnan(kiln_f16_to_f32(kiln_f32_to_f16(NAN))));
  EXPECT_EQ(kiln_f32_to_bf16(1.0f), 0x3f80);
  EXPECT_EQ(kiln_f32_to_bf16(1.0f + std::ldexp(1.0f, -8)), 0x3f80);  // tie: to even
  EXPECT_EQ(kiln_f32_to_bf16(1.0f + std::ldexp(3.0f, -8)), 0x3f82);  // tie: to even
  EXPECT_EQ(kiln_f32_to_bf16(-0.0f), 0x8000);
  EXPECT_EQ(kiln_f32_to_bf16(3.4e38f), 0x7f80);  // rounds past the largest: infinity
  EXPECT_TRUE(std::isnan(kiln_bf16_to_f32(kiln_f32_to_bf16(NAN))));
  for (uint32_t h = 0; h < 65536; ++h) {
    const float f = kiln_f16_to_f32(static_cast<uint16_t>(h)),
                b = kiln_bf16_to_f32(static_cast<uint16_t>(h));
    if (std::isnan(f)) {
      EXPECT_TRUE(std::isnan(kiln_f16_to_f32(kiln_f32_to_f16(f))));
    } else {
      ASSERT_EQ(kiln_f32_to_f16(f), h) << std::hex << h;
    }
    if (!std::isnan(b)) {
      ASSERT_EQ(kiln_f32_to_bf16(b), h) << std::hex << h;
    }
  }
  // Element access rounds the same way.
  Tensor t = Tensor::empty(DType::kFloat16, {2});
  t.store(0, 0.1);
  t.store(1, 70000.0);
  EXPECT_EQ(static_cast<const uint16_t*>(t.data())[0], 0x2e66);
  EXPECT_TRUE(std::isinf(t.load(1)));
}

TEST(Npy, MalformedFilesNameTheFileAndOffset) {
  Tensor t = Tensor::from_doubles(DType::kFloat32, {4}, {1, 2, 3, 4});
  std::string good = to_npy(t);
  auto message = [](const std::string& bytes) {
    return testing::error_of([&] { parse_npy(bytes, "w.npy"); });
  };
  EXPECT_NE(message("garbage").find("w.npy: byte 0"), std::string::npos);
  std::string truncated = good.substr(0, good.size() - 3);
  std::string m = message(truncated);
  EXPECT_NE(m.find("data truncated"), std::string::npos) << m;
  EXPECT_NE(m.find("w.npy: byte"), std::string::npos) << m;
  std::string bad_dtype = good;
  bad_dtype.replace(bad_dtype.find("<f4"), 3, "<c8");
  EXPECT_NE(message(bad_dtype).find("unsupported dtype '<c8'"), std::string::npos);
  std::string header_cut = good.substr(0, 20);
  EXPECT_NE(message(header_cut).find("runs past the end"), std::string::npos);
  EXPECT_THROW(read_npy("/nonexistent/file.npy"), UserError);
}

TEST(Storage, AlignedAndPooled) {
  pool_trim();
  auto before = pool_stats();
  for (int i = 0; i < 10; ++i) {
    auto s = allocate_storage(1000 + i);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(s->data()) % 64, 0u);
  }
  auto after = pool_stats();
  EXPECT_EQ(after.allocations - before.allocations, 1u);  // one block, reused nine times
  EXPECT_EQ(after.reuses - before.reuses, 9u);
}

TEST(MemoryPlan, LiveBuffersNeverOverlapAndDeadOnesAreReused) {
  std::mt19937 rng(9);
  for (int trial = 0; trial < 200; ++trial) {
    std::vector<BufferRequest> reqs;
    int n = 1 + static_cast<int>(rng() % 30);
    for (int i = 0; i < n; ++i) {
      BufferRequest r;
      r.first_step = static_cast<int>(rng() % 20);
      r.last_step = r.first_step + static_cast<int>(rng() % 6);
      r.bytes = 1 + rng() % 5000;
      reqs.push_back(r);
    }
    MemoryPlan plan = plan_memory(reqs);
    size_t total = 0;
    for (int i = 0; i < n; ++i) {
      EXPECT_EQ(plan.offsets[i] % 64, 0u);
      EXPECT_LE(plan.offsets[i] + reqs[i].bytes, plan.arena_bytes);
      total += (reqs[i].bytes + 63) / 64 * 64;
      for (int j = 0; j < i; ++j) {
        bool overlap_time =
            reqs[i].first_step <= reqs[j].last_step && reqs[j].first_step <= reqs[i].last_step;
        bool overlap_mem = plan.offsets[i] < plan.offsets[j] + reqs[j].bytes &&
                           plan.offsets[j] < plan.offsets[i] + reqs[i].bytes;
        EXPECT_FALSE(overlap_time && overlap_mem)
            << "trial " << trial << " buffers " << i << "," << j;
      }
    }
    EXPECT_LE(plan.arena_bytes, total);
  }
  // A chain a -> b -> c -> d: a and c can share memory.
  MemoryPlan chain = plan_memory({{1024, 0, 1}, {1024, 1, 2}, {1024, 2, 3}, {1024, 3, 4}});
  EXPECT_EQ(chain.arena_bytes, 2048u);
}

TEST(MemoryPlan, AReuseRuleKeepsParallelBranchesApart) {
  // Two chains, steps 0-1 and 2-3, that may run at the same time: by step order buffer 0 is
  // dead before buffer 2 is born, but the rule knows the chains are not ordered.
  std::vector<BufferRequest> reqs{{1024, 0, 1}, {1024, 1, 4}, {1024, 2, 3}, {1024, 3, 4}};
  EXPECT_EQ(plan_memory(reqs).offsets[2], plan_memory(reqs).offsets[0]);
  auto chain = [](size_t r) { return r < 2 ? 0 : 1; };
  MemoryPlan apart = plan_memory(reqs, [&](size_t dead, size_t born) {
    return chain(dead) == chain(born) && reqs[dead].last_step < reqs[born].first_step;
  });
  std::set<size_t> offsets(apart.offsets.begin(), apart.offsets.end());
  EXPECT_EQ(offsets.size(), 4u) << "no two buffers of different chains may share bytes";
  EXPECT_EQ(apart.arena_bytes, 4096u);
}

TEST(Executor, RejectsWrongInputsWithClearMessages) {
  Graph g("validate");
  Var x = input(g, "x", DType::kFloat32, {kDynamic, 784});
  g.set_outputs({relu(x)});
  Function f = compile(g);
  auto message = [&](const std::vector<Tensor>& in) { return testing::error_of([&] { f(in); }); };
  EXPECT_EQ(message({Tensor::zeros(DType::kFloat64, {2, 784})}),
            "input 'x': wrong dtype: expected float32 (?, 784), got float64 (2, 784)");
  EXPECT_EQ(message({Tensor::zeros(DType::kFloat32, {784})}),
            "input 'x': wrong rank: expected float32 (?, 784), got float32 (784,)");
  EXPECT_EQ(message({Tensor::zeros(DType::kFloat32, {2, 783})}),
            "input 'x': dimension 1 is 783: expected float32 (?, 784), got float32 (2, 783)");
  EXPECT_NE(message({}).find("expected 1 inputs (x), got 0"), std::string::npos);
  EXPECT_NE(message({Tensor()}).find("missing"), std::string::npos);
  EXPECT_THROW(f.run({{"y", Tensor::zeros(DType::kFloat32, {1, 784})}}), UserError);
}

TEST(Executor, OutputsAreFreshAndPlansFollowShapeChanges) {
  Graph g("fresh");
  Var x = input(g, "x", DType::kFloat32, {kDynamic});
  g.set_outputs({exp(relu(x) * 2.0)});
  Function f = compile(g);
  Tensor a = Tensor::from_doubles(DType::kFloat32, {2}, {0, 1});
  auto first = f({a});
  auto second = f({Tensor::from_doubles(DType::kFloat32, {3}, {1, 1, 1})});
  EXPECT_NE(first[0].data(), second[0].data());
  EXPECT_FLOAT_EQ(first[0].to_doubles()[1], std::exp(2.0f));
  EXPECT_EQ(second[0].shape(), Shape{3});
}

}  // namespace
}  // namespace kiln
