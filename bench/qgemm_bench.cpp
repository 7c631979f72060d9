// kiln's integer GEMM (kiln_support.qgemm_u8s8, the copy the loader picks for this CPU: VNNI's
// vpdpbusd where there is one) on one thread, against the machine's int8 peak measured here
// (independent vpdpbusd chains: 4 multiply-adds per lane per instruction) and against kiln's
// own float32 packed GEMM on the same shape (the speed an int8 model replaces). B is packed as
// the pack pass leaves constant weights; the output is requantized bytes, as in a QDQ model.
// Every shape's result is checked against a plain int64 loop first.
// Usage: qgemm_bench [--repeat N] [--smoke]
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "ops/c/gemm_pack.h"
#include "ops/c/qgemm_pack.h"
#include "runtime/support/support.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

using namespace kiln;
using Clock = std::chrono::steady_clock;

namespace {

template <class F>
double best_us(F&& f, int repeat) {
  double best = 1e30;
  for (int r = 0; r < repeat; ++r) {
    auto t = Clock::now();
    f();
    best = std::min(best, std::chrono::duration<double, std::micro>(Clock::now() - t).count());
  }
  return best;
}

#if defined(__x86_64__)
// GOP/s (a multiply-add counts two) of 24 independent vpdpbusd chains on one thread; 0 where
// the CPU has no AVX512-VNNI.
#define KILN_CHAINS(X)                                                                         \
  X(0)                                                                                         \
  X(1) X(2) X(3) X(4) X(5) X(6) X(7) X(8) X(9) X(10) X(11) X(12) X(13) X(14) X(15) X(16) X(17) \
      X(18) X(19) X(20) X(21) X(22) X(23)
__attribute__((target("avx512f,avx512vnni"))) double vnni_peak_kernel(int64_t steps) {
  // Named variables, not an array: an array's elements stayed in memory around each asm.
#define KILN_DECL(c) __m512i acc##c = _mm512_set1_epi32(c);
  KILN_CHAINS(KILN_DECL)
  const __m512i a = _mm512_set1_epi8(3), b = _mm512_set1_epi8(-1);
  const auto t0 = Clock::now();
  for (int64_t s = 0; s < steps; ++s) {
#define KILN_STEP(c) __asm__ volatile("vpdpbusd %2, %1, %0" : "+v"(acc##c) : "v"(a), "v"(b));
    KILN_CHAINS(KILN_STEP)
  }
  const double sec = std::chrono::duration<double>(Clock::now() - t0).count();
  int sink = 0;
#define KILN_SUM(c) sink += _mm512_reduce_add_epi32(acc##c);
  KILN_CHAINS(KILN_SUM)
  return 2.0 * 64 * 24 * static_cast<double>(steps) / sec / 1e9 + 0 * sink;
}
#endif

double vnni_peak(int64_t steps) {
#if defined(__x86_64__)
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512vnni")) return vnni_peak_kernel(steps);
#endif
  return 0;
}

// Requantized uint8 outputs (zero points 128, per-column scales, rows n apart) of the
// product by B packed at bp (n columns, k rows), as a QDQ model's convolutions store them.
kiln_qgemm_epi byte_epilogue(const int8_t* bp, int64_t n, int64_t k, const int32_t* b_zp,
                             const float* scale) {
  kiln_qgemm_epi e{};
  e.a_zp = 128;
  e.b_zp = b_zp;
  e.b_zp_step = 0;
  e.colsum = reinterpret_cast<const int32_t*>(bp + ((n + 15) / 16) * ((k + 3) / 4) * 64);
  e.scale = scale;
  e.scale_step = 1;
  e.y_zp = 128;
  e.lo = 0;
  e.hi = 255;
  e.out_u8 = 1;
  e.rsc = n;
  e.csc = 1;
  return e;
}

}  // namespace

int main(int argc, char** argv) {
  int repeat = 50;
  bool smoke = false;
  for (int i = 1; i < argc; ++i) {
    if (std::string(argv[i]) == "--repeat" && i + 1 < argc)
      repeat = std::max(1, std::atoi(argv[++i]));
    if (std::string(argv[i]) == "--smoke") smoke = true;
  }
  if (smoke) repeat = 1;
  const kiln_support* sup = kiln_host_support();
  const double peak = vnni_peak(smoke ? 1'000'000 : 100'000'000);
  if (peak > 0) {
    std::printf("int8 peak (vpdpbusd, one thread): %.0f GOP/s\n", peak);
  } else {
    std::printf("int8 peak: no AVX512-VNNI on this CPU (the plain C kernel runs)\n");
  }
  struct Shape3 {
    const char* what;
    int m, n, k;
  };
  const Shape3 shapes[] = {{"square 512", 512, 512, 512},
                           {"square 1024", 1024, 1024, 1024},
                           {"bert qkv (128 tokens)", 128, 2304, 768},
                           {"bert mlp up (128 tokens)", 128, 3072, 768},
                           {"bert mlp down (128 tokens)", 128, 768, 3072},
                           {"resnet 3x3 64ch 56x56", 3136, 64, 576},
                           {"resnet 3x3 256ch 14x14", 196, 256, 2304},
                           {"resnet 1x1 64->256 56x56", 3136, 256, 64},
                           {"mobilenet 1x1 16->96 112x112", 12544, 96, 16},
                           {"effnet 1x1 40->240 28x28", 784, 240, 40},
                           {"effnet 1x1 144->24 56x56", 3136, 24, 144},
                           {"effnet 1x1 240->40 28x28", 784, 40, 240},
                           {"effnet 1x1 672->112 14x14", 196, 112, 672},
                           {"gpt2 lm head (128 tokens)", 128, 50257, 768},
                           {"odd 37 x 50 x 131", 37, 50, 131}};
  std::mt19937 rng(1);
  std::uniform_int_distribution<int> u8(0, 255), s8(-128, 127);
  std::printf("%-28s %18s %10s %10s %9s %12s %10s\n", "shape", "M x N x K", "int8 us", "GOP/s",
              "of peak", "float32 us", "f32/int8");
  for (const auto& s : shapes) {
    std::vector<uint8_t> a(static_cast<size_t>(s.m) * s.k);
    for (auto& v : a) v = static_cast<uint8_t>(u8(rng));
    Tensor b = Tensor::empty(DType::kInt8, {s.k, s.n});
    auto* pb = static_cast<int8_t*>(b.data());
    for (int64_t i = 0; i < b.numel(); ++i) pb[i] = static_cast<int8_t>(s8(rng));
    Tensor packed = pack_qgemm(b);
    const auto* bp = static_cast<const int8_t*>(packed.data());
    std::vector<int32_t> bz(1, 3);
    std::vector<float> scale(static_cast<size_t>(s.n), 1.0f / 4096);
    const kiln_qgemm_epi e = byte_epilogue(bp, s.n, s.k, bz.data(), scale.data());
    std::vector<uint8_t> c(static_cast<size_t>(s.m) * s.n);
    sup->qgemm_u8s8(s.m, s.n, s.k, a.data(), s.k, bp, &e, c.data());
    // The check: int64 sums, then the same float32 requantization.
    for (int i = 0; i < s.m; i += std::max(1, s.m / 7)) {
      for (int j = 0; j < s.n; ++j) {
        int64_t acc = 0;
        for (int t = 0; t < s.k; ++t)
          acc += (int64_t{a[static_cast<size_t>(i) * s.k + t]} - 128) * (pb[t * s.n + j] - 3);
        float y = std::nearbyint(static_cast<float>(acc) * scale[static_cast<size_t>(j)]) + 128.f;
        y = std::min(255.f, std::max(0.f, y));
        if (c[static_cast<size_t>(i) * s.n + j] != static_cast<uint8_t>(y)) {
          std::fprintf(stderr, "%s: wrong at (%d, %d): %d, want %d\n", s.what, i, j,
                       c[static_cast<size_t>(i) * s.n + j], static_cast<int>(y));
          return 1;
        }
      }
    }
    const double us =
        best_us([&] { sup->qgemm_u8s8(s.m, s.n, s.k, a.data(), s.k, bp, &e, c.data()); }, repeat);
    // float32 on the same shape: kiln's packed kernel.
    Tensor af = Tensor::empty(DType::kFloat32, {s.m, s.k}),
           wf = Tensor::empty(DType::kFloat32, {s.k, s.n});
    for (Tensor* t : {&af, &wf}) {
      auto* p = static_cast<float*>(t->data());
      for (int64_t i = 0; i < t->numel(); ++i) p[i] = 0.5f;
    }
    Tensor wp = pack_gemm_panels(wf, false);
    std::vector<float> cf(static_cast<size_t>(s.m) * s.n);
    const double fus = best_us(
        [&] {
          sup->gemm_packed_f32(s.m, s.n, s.k, 1.f, static_cast<const float*>(af.data()), s.k, 1,
                               static_cast<const float*>(wp.data()), 0.f, cf.data(), s.n, nullptr,
                               0, 0, -INFINITY, INFINITY);
        },
        repeat);
    const double gops = 2.0 * s.m * s.n * s.k / us / 1e3;
    char dims[64];
    std::snprintf(dims, sizeof dims, "%d x %d x %d", s.m, s.n, s.k);
    std::printf("%-28s %18s %10.1f %10.1f %8.0f%% %12.1f %10.2f\n", s.what, dims, us, gops,
                peak > 0 ? 100.0 * gops / peak : 0.0, fus, fus / us);
  }
  if (!sup->qgemm_u8s8_gather) return 0;
  // 3x3 convolutions as kiln_qconv runs them: each output position's window read in place
  // from the padded channels-last image (three segments of 3*C bytes, one per window row),
  // against the same product from a materialized im2row matrix. The outputs must agree.
  struct ConvShape {
    const char* what;
    int c, m, h;
  };
  const ConvShape convs[] = {{"3x3 64->64 56x56", 64, 64, 56},
                             {"3x3 128->128 28x28", 128, 128, 28},
                             {"3x3 256->256 14x14", 256, 256, 14},
                             // k past the kernel's offset table: its segment loops instead
                             {"3x3 2048->32 4x4", 2048, 32, 4}};
  std::printf("\n%-28s %18s %10s %10s %9s %12s %10s\n", "windows in place", "M x N x K",
              "gather us", "GOP/s", "of peak", "im2row us", "im2row/gather");
  for (const auto& cs : convs) {
    const int wp = cs.h + 2, m = cs.h * cs.h, k = 9 * cs.c;
    std::vector<uint8_t> img(static_cast<size_t>(wp) * wp * cs.c);
    for (auto& v : img) v = static_cast<uint8_t>(u8(rng));
    std::vector<const uint8_t*> rows(static_cast<size_t>(m));
    std::vector<uint8_t> a(static_cast<size_t>(m) * k);
    for (int p = 0; p < m; ++p) {
      const uint8_t* at = img.data() + ((p / cs.h) * wp + p % cs.h) * cs.c;
      rows[static_cast<size_t>(p)] = at;
      for (int ky = 0; ky < 3; ++ky)
        std::memcpy(&a[static_cast<size_t>(p) * k + ky * 3 * cs.c], at + ky * wp * cs.c,
                    static_cast<size_t>(3 * cs.c));
    }
    const int64_t seg[3] = {0, int64_t{wp} * cs.c, 2 * int64_t{wp} * cs.c};
    Tensor b = Tensor::empty(DType::kInt8, {k, cs.m});
    auto* pb = static_cast<int8_t*>(b.data());
    for (int64_t i = 0; i < b.numel(); ++i) pb[i] = static_cast<int8_t>(s8(rng));
    Tensor packed = pack_qgemm(b);
    const auto* bp = static_cast<const int8_t*>(packed.data());
    std::vector<int32_t> bz(1, 0);
    std::vector<float> scale(static_cast<size_t>(cs.m), 1.0f / 8192);
    const kiln_qgemm_epi e = byte_epilogue(bp, cs.m, k, bz.data(), scale.data());
    std::vector<uint8_t> cg(static_cast<size_t>(m) * cs.m), cm(cg.size());
    sup->qgemm_u8s8(m, cs.m, k, a.data(), k, bp, &e, cm.data());
    sup->qgemm_u8s8_gather(m, cs.m, 3 * cs.c, 3, rows.data(), seg, bp, &e, cg.data());
    if (cg != cm) {
      std::fprintf(stderr, "%s: the gathered product differs from the im2row one\n", cs.what);
      return 1;
    }
    const double gus = best_us(
        [&] { sup->qgemm_u8s8_gather(m, cs.m, 3 * cs.c, 3, rows.data(), seg, bp, &e, cg.data()); },
        repeat);
    const double mus =
        best_us([&] { sup->qgemm_u8s8(m, cs.m, k, a.data(), k, bp, &e, cm.data()); }, repeat);
    const double gops = 2.0 * m * cs.m * k / gus / 1e3;
    char dims[64];
    std::snprintf(dims, sizeof dims, "%d x %d x %d", m, cs.m, k);
    std::printf("%-28s %18s %10.1f %10.1f %8.0f%% %12.1f %10.2f\n", cs.what, dims, gus, gops,
                peak > 0 ? 100.0 * gops / peak : 0.0, mus, mus / gus);
  }
  return 0;
}
