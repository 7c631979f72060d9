// kiln's packed-panel GEMM kernel (kiln_support.gemm_packed_f32, the copy the loader picks for
// this CPU) against OpenBLAS's cblas_sgemm on the same operands, both on one thread, in one
// run: inference shapes (the example MLP's layers at batch 32 and 1, a narrow output layer)
// and two large ones. OpenBLAS reads the weight as stored (N x K, transposed); kiln reads it
// packed, as the `pack` pass leaves constant weights. The bf16 columns time the bfloat16 kernel
// (kiln_support.gemm_packed_bf16: vdpbf16ps where the CPU has AVX512-BF16, as --precision bf16
// runs it) on the same weight rounded to bfloat16 panels; "bf16/f32" is its speedup over the
// float32 kernel. Usage: gemm_bench [--repeat N] [--smoke]
#include <cblas.h>

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
#include "runtime/support/support.h"

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

}  // namespace

int main(int argc, char** argv) {
  int repeat = 200;
  for (int i = 1; i < argc; ++i) {
    if (std::string(argv[i]) == "--repeat" && i + 1 < argc)
      repeat = std::max(1, std::atoi(argv[++i]));
    if (std::string(argv[i]) == "--smoke") repeat = 1;  // ctest: every shape once, checked
  }
  openblas_set_num_threads(1);
  const kiln_support* support = kiln_host_support();
  struct Shape3 {
    const char* what;
    int m, n, k;
  };
  const Shape3 shapes[] = {{"MLP layer 1, batch 32", 32, 256, 784},
                           {"MLP layer 2, batch 32", 32, 128, 256},
                           {"MLP layer 3, batch 32", 32, 10, 128},
                           {"MLP layer 1, batch 1", 1, 256, 784},
                           {"square 512", 512, 512, 512},
                           {"100 x 1000 x 4096", 100, 1000, 4096},
                           {"pw 144->24 piece", 24, 192, 144},
                           {"pw 144->24 part", 24, 784, 144},
                           {"pw 576->96 14x14", 96, 196, 576},
                           {"pw 960->160 7x7", 160, 49, 960},
                           {"pw 64->384 14x14", 384, 196, 64},
                           {"pw 16->96 piece", 96, 1344, 16},
                           {"vit qkv", 197, 1152, 384},
                           {"vit mlp up", 197, 1536, 384},
                           {"vit mlp down", 197, 384, 1536},
                           {"vit mlp up, half rows", 99, 1536, 384},
                           // BERT-base's MLP at 128 tokens, and the piece a module's part
                           // passes at a time (its epilogue's 128 KB budget).
                           {"bert mlp up", 128, 3072, 768},
                           {"bert mlp down", 128, 768, 3072},
                           {"bert mlp up piece", 128, 256, 768},
                           // One token through weights far past the caches (a decoder's step):
                           // bound by the bytes of B, which bfloat16 halves.
                           {"LM head, one token", 1, 50257, 768},
                           {"LLM MLP up, one token", 1, 11008, 4096}};
  std::mt19937 rng(1);
  std::uniform_real_distribution<float> u(-1, 1);
  std::printf("%-24s %18s %12s %12s %10s %9s %10s %10s %9s\n", "shape", "M x N x K", "kiln us",
              "OpenBLAS us", "kiln GF/s", "speedup", "bf16 us", "bf16 GF/s", "bf16/f32");
  for (const auto& s : shapes) {
    Tensor a = Tensor::empty(DType::kFloat32, {s.m, s.k}),
           w = Tensor::empty(DType::kFloat32, {s.n, s.k});
    for (Tensor* t : {&a, &w}) {
      auto* p = static_cast<float*>(t->data());
      for (int64_t i = 0; i < t->numel(); ++i) p[i] = u(rng);
    }
    Tensor bp = pack_gemm_panels(w, true);
    Tensor bh = gemm_panels_to_bf16(bp, s.n);
    std::vector<float> c(static_cast<size_t>(s.m) * s.n), ref(c.size()), ch(c.size());
    const auto* pa = static_cast<const float*>(a.data());
    const auto* pw = static_cast<const float*>(w.data());
    const auto* pb = static_cast<const float*>(bp.data());
    const int reps = static_cast<double>(s.n) * s.k > 20'000'000 || s.m * s.n * s.k > 50'000'000
                         ? std::max(3, repeat / 20)
                         : repeat;
    const double kiln_us = best_us(
        [&] {
          support->gemm_packed_f32(s.m, s.n, s.k, 1.0f, pa, s.k, 1, pb, 0.0f, c.data(), s.n,
                                   nullptr, 0, 0, -INFINITY, INFINITY);
        },
        reps);
    const double bf16_us = best_us(
        [&] {
          support->gemm_packed_bf16(s.m, s.n, s.k, 1.0f, pa, s.k, 1,
                                    static_cast<const uint16_t*>(bh.data()), 0.0f, ch.data(), s.n,
                                    nullptr, 0, 0, -INFINITY, INFINITY);
        },
        reps);
    const double blas_us = best_us(
        [&] {
          cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, s.m, s.n, s.k, 1.0f, pa, s.k, pw,
                      s.k, 0.0f, ref.data(), s.n);
        },
        reps);
    double err = 0, err16 = 0;
    for (size_t i = 0; i < c.size(); ++i) {
      err = std::max(err, static_cast<double>(std::abs(c[i] - ref[i])));
      err16 = std::max(err16, static_cast<double>(std::abs(ch[i] - ref[i])));
    }
    if (err > 1e-3 * s.k) {
      std::fprintf(stderr, "gemm_bench: %s: kiln and OpenBLAS differ by %g\n", s.what, err);
      return 1;
    }
    // Each of K products is off by at most two roundings to 8 bits (2^-8 each) of |a||b| <= 1.
    if (err16 > s.k * 0x1p-7) {
      std::fprintf(stderr, "gemm_bench: %s: kiln's bf16 kernel and OpenBLAS differ by %g\n", s.what,
                   err16);
      return 1;
    }
    char dims[64];
    std::snprintf(dims, sizeof dims, "%d x %d x %d", s.m, s.n, s.k);
    std::printf("%-24s %18s %12.2f %12.2f %10.1f %8.2fx %10.2f %10.1f %8.2fx\n", s.what, dims,
                kiln_us, blas_us, 2.0 * s.m * s.n * s.k / kiln_us * 1e-3, blas_us / kiln_us,
                bf16_us, 2.0 * s.m * s.n * s.k / bf16_us * 1e-3, kiln_us / bf16_us);
  }
  return 0;
}
