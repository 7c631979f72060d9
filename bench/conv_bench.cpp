// Convolution layers of the zoo's shapes (batch 1), compiled and run by kiln on the engine's
// threads, against the cores' FMA peak (measured here: independent vector multiply-adds on
// every thread) and against OpenBLAS's SGEMM on the equivalent GEMM (M x OH*OW x C*KH*KW,
// the same threads; an im2col that OpenBLAS would also need is not counted). Layers whose
// channels come in whole blocks of 8 run a second time as the layout pass runs them inside a
// model: conv_nchwc on a blocked (1, C/8, H, W, 8) input, or an RGB stem's plain image
// (ops/conv_nchwc.h; the reorders at a region's edges are not counted). The rounds take turns; each
// figure is the median round of the median of runs. Depthwise layers have no equivalent GEMM.
// Transposed convolutions (decoders, U-Nets, GANs) follow in a table of their own, against
// OpenBLAS on the GEMM they reduce to (H*W x C_in x C_out*KH*KW), which leaves out the fold
// that adds each output position's taps: the ratio is what the fold and the reorders cost.
// Usage: conv_bench [--rounds R] [--only SUBSTRING] [--smoke]
#include <cblas.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "compiler/compile.h"
#include "ops/builders.h"

using namespace kiln;
using Clock = std::chrono::steady_clock;

extern "C" void openblas_set_num_threads(int);

namespace {

struct Layer {
  const char* name;
  int64_t c, m, h, k, stride, group;
};

// A transposed convolution: input c x h x h, m output channels, k x k taps at `stride`, pads
// `pad` on every side, output_padding `out_pad`.
struct TransposedLayer {
  const char* name;
  int64_t c, m, h, k, stride, pad, out_pad;
};

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Median us of `runs` calls, after one.
template <class F>
double median_us(F&& f, int runs) {
  f();
  std::vector<double> t;
  for (int r = 0; r < runs; ++r) {
    const auto t0 = Clock::now();
    f();
    t.push_back(std::chrono::duration<double, std::micro>(Clock::now() - t0).count());
  }
  return median(t);
}

// GFLOP/s of independent chains of vector multiply-adds per thread (about half a second,
// long enough for the clocks to settle), on `threads` threads at once: what the cores' FMA
// units give at the widest vectors this build targets. The chains must fit in the
// registers (16 ymm under AVX2, 32 zmm under AVX-512) or the loop measures spills.
double fma_peak(int threads) {
#if defined(__AVX512F__)
  constexpr int kLanes = 16, kChains = 16;
#elif defined(__AVX__)
  constexpr int kLanes = 8, kChains = 12;
#else
  constexpr int kLanes = 4, kChains = 12;
#endif
  typedef float V __attribute__((vector_size(4 * kLanes)));
  volatile int64_t steps_v = 200'000'000;  // a run-time count: the chains cannot be folded
  const int64_t kSteps = steps_v;
  std::vector<double> sink(static_cast<size_t>(threads));
  auto body = [&](int id) {
    V acc[kChains];
    for (int c = 0; c < kChains; ++c) acc[c] = (V){} + static_cast<float>(c + id);
    const V a = (V){} + 0.999999f, b = (V){} + 1e-7f;
    for (int64_t s = 0; s < kSteps; ++s) {
      for (int c = 0; c < kChains; ++c) acc[c] = acc[c] * a + b;
    }
    double total = 0;
    for (int c = 0; c < kChains; ++c) total += acc[c][0];
    sink[static_cast<size_t>(id)] = total;
  };
  const auto t0 = Clock::now();
  std::vector<std::thread> pool;
  for (int i = 0; i < threads; ++i) pool.emplace_back(body, i);
  for (auto& t : pool) t.join();
  const double s = std::chrono::duration<double>(Clock::now() - t0).count();
  return 2.0 * kLanes * kChains * kSteps * threads / s / 1e9 + 0 * sink[0];
}

Tensor random_tensor(const Shape& shape, std::mt19937& rng) {
  std::uniform_real_distribution<double> u(-1, 1);
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  std::vector<double> v(static_cast<size_t>(n));
  for (double& x : v) x = u(rng);
  return Tensor::from_doubles(DType::kFloat32, shape, v);
}

}  // namespace

int main(int argc, char** argv) {
  int rounds = 5;
  const char* only = nullptr;  // --only: the layers whose name holds this
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--rounds") && i + 1 < argc) {
      rounds = std::max(1, std::atoi(argv[++i]));
    } else if (!std::strcmp(argv[i], "--only") && i + 1 < argc) {
      only = argv[++i];
    } else if (!std::strcmp(argv[i], "--smoke")) {  // ctest: the 7x7 layers (each kind), once
      rounds = 1;
      only = "7x7";
    } else {
      std::fprintf(stderr, "usage: conv_bench [--rounds R] [--only SUBSTRING] [--smoke]\n");
      return 2;
    }
  }
  const int threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  openblas_set_num_threads(threads);
  const std::vector<Layer> layers{
      {"mobilenet expand 16->96 112x112", 16, 96, 112, 1, 1, 1},
      {"mobilenet project 144->24 56x56", 144, 24, 56, 1, 1, 1},
      {"mobilenet expand 64->384 14x14", 64, 384, 14, 1, 1, 1},
      {"mobilenet project 960->160 7x7", 960, 160, 7, 1, 1, 1},
      {"squeezenet classifier 512->1000 13x13", 512, 1000, 13, 1, 1, 1},
      {"resnet stem 3->64 7x7/2 224x224", 3, 64, 224, 7, 2, 1},
      {"shufflenet stem 3->24 3x3/2 224x224", 3, 24, 224, 3, 2, 1},
      {"mobilenet stem 3->32 3x3/2 224x224", 3, 32, 224, 3, 2, 1},
      {"squeezenet stem 3->64 3x3/2 224x224", 3, 64, 224, 3, 2, 1},
      {"resnet downsample 64->128 1x1/2 56x56", 64, 128, 56, 1, 2, 1},
      {"resnet bottleneck in 256->64 56x56", 256, 64, 56, 1, 1, 1},
      {"resnet bottleneck out 64->256 56x56", 64, 256, 56, 1, 1, 1},
      {"resnet bottleneck in 1024->256 14x14", 1024, 256, 14, 1, 1, 1},
      {"resnet downsample 256->512 1x1/2 14x14", 256, 512, 14, 1, 2, 1},
      {"resnet 3x3 64->64 56x56", 64, 64, 56, 3, 1, 1},
      {"resnet 3x3/2 64->128 56x56", 64, 128, 56, 3, 2, 1},
      {"resnet 3x3 128->128 28x28", 128, 128, 28, 3, 1, 1},
      {"resnet 3x3 256->256 14x14", 256, 256, 14, 3, 1, 1},
      {"resnet 3x3 512->512 7x7", 512, 512, 7, 3, 1, 1},
      {"depthwise 3x3 144 56x56", 144, 144, 56, 3, 1, 144},
      {"depthwise 3x3/2 96 112x112", 96, 96, 112, 3, 2, 96},
      {"depthwise 5x5 480 14x14", 480, 480, 14, 5, 1, 480},
      {"depthwise 3x3 32 112x112", 32, 32, 112, 3, 1, 32},
      {"depthwise 3x3 576 14x14", 576, 576, 14, 3, 1, 576},
      {"depthwise 3x3 960 7x7", 960, 960, 7, 3, 1, 960},
  };
  const double peak = fma_peak(threads);
  std::printf("%d threads; FMA peak (measured): %.1f GFLOP/s\n\n", threads, peak);
  std::printf("%-40s %9s %9s %9s %10s %9s %9s %8s %9s %10s\n", "layer", "kiln us", "GFLOP/s",
              "of peak", "blocked us", "GFLOP/s", "of peak", "BLAS us", "kiln/BLAS",
              "blocked/BLAS");
  std::mt19937 rng(3);
  for (const Layer& l : layers) {
    if (only && !std::strstr(l.name, only)) continue;
    const int64_t pad = l.k / 2, oh = (l.h + 2 * pad - l.k) / l.stride + 1;
    Graph g("conv");
    Var x = input(g, "x", DType::kFloat32, {1, l.c, l.h, l.h});
    Var w = parameter(g, random_tensor({l.m, l.c / l.group, l.k, l.k}, rng), "w");
    g.set_outputs({apply("conv", {x, w},
                         {{"pads", std::vector<int64_t>(4, pad)},
                          {"strides", std::vector<int64_t>{l.stride, l.stride}},
                          {"group", l.group}})});
    Function f = compile(g);
    const std::vector<Tensor> in{random_tensor({1, l.c, l.h, l.h}, rng)};
    // An RGB stem reads its image in NCHW and writes blocks (a plain input to conv_nchwc).
    const bool stem = l.c < 8 && l.group == 1;
    const bool blockable = (l.c % 8 == 0 || stem) && l.m % 8 == 0;
    const Shape xb_shape = stem ? Shape{1, l.c, l.h, l.h} : Shape{1, l.c / 8, l.h, l.h, 8};
    Graph gb("conv_nchwc");
    std::vector<Tensor> in_b;
    if (blockable) {
      Var xb = input(gb, "x", DType::kFloat32, xb_shape);
      const Shape ws =
          l.group == 1 ? Shape{l.m / 8, l.c * l.k * l.k, 8} : Shape{l.c / 8, l.k, l.k, 8};
      Var wb = parameter(gb, random_tensor(ws, rng), "w");
      // A strided 1x1 layer reads a strided copy of its input through the pointwise kernel,
      // as the layout pass runs it.
      const bool strided_1x1 = l.k == 1 && l.stride > 1 && l.group == 1 && !stem;
      if (strided_1x1) {
        xb = apply("slice", {xb},
                   {{"starts", std::vector<int64_t>{0, 0}},
                    {"ends", std::vector<int64_t>{l.h, l.h}},
                    {"axes", std::vector<int64_t>{2, 3}},
                    {"steps", std::vector<int64_t>{l.stride, l.stride}}});
      }
      const int64_t sb = strided_1x1 ? 1 : l.stride;
      gb.set_outputs({apply("conv_nchwc", {xb, wb},
                            {{"group", l.group},
                             {"kernel_shape", std::vector<int64_t>{l.k, l.k}},
                             {"strides", std::vector<int64_t>{sb, sb}},
                             {"pads", std::vector<int64_t>(4, pad)}})});
      in_b.push_back(random_tensor(xb_shape, rng));
    }
    Function fb = blockable ? compile(gb) : compile(g);
    const int64_t gm = l.m, gn = oh * oh, gk = l.c / l.group * l.k * l.k;
    const double flops = 2.0 * static_cast<double>(gm * gn * gk);
    std::vector<float> a(static_cast<size_t>(gm * gk), 0.5f),
        b(static_cast<size_t>(gk * gn), 0.25f), c(static_cast<size_t>(gm * gn));
    const bool gemm_like = l.group == 1;
    const int runs = std::clamp(static_cast<int>(2e8 / flops), 5, 200);
    std::vector<double> kiln_us, blocked_us, blas_us;
    for (int r = 0; r < rounds; ++r) {
      kiln_us.push_back(median_us([&] { f(in); }, runs));
      if (blockable) blocked_us.push_back(median_us([&] { fb(in_b); }, runs));
      if (gemm_like) {
        blas_us.push_back(median_us(
            [&] {
              cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, static_cast<int>(gm),
                          static_cast<int>(gn), static_cast<int>(gk), 1.f, a.data(),
                          static_cast<int>(gk), b.data(), static_cast<int>(gn), 0.f, c.data(),
                          static_cast<int>(gn));
            },
            runs));
      }
    }
    const double k_us = median(kiln_us), gf = flops / k_us / 1e3;
    std::printf("%-40s %9.1f %9.1f %8.0f%%", l.name, k_us, gf, 100 * gf / peak);
    const double kb_us = blockable ? median(blocked_us) : 0,
                 gfb = blockable ? flops / kb_us / 1e3 : 0;
    if (blockable) {
      std::printf(" %10.1f %9.1f %8.0f%%", kb_us, gfb, 100 * gfb / peak);
    } else {
      std::printf(" %10s %9s %9s", "-", "-", "-");
    }
    if (gemm_like) {
      const double b_us = median(blas_us);
      std::printf(" %8.1f %9.2f", b_us, k_us / b_us);
      if (blockable) {
        std::printf(" %10.2f\n", kb_us / b_us);
      } else {
        std::printf(" %10s\n", "-");
      }
    } else {
      std::printf(" %8s %9s %10s\n", "-", "-", "-");
    }
  }
  const std::vector<TransposedLayer> transposed{
      {"unet up 2x2/2 512->256 28x28", 512, 256, 28, 2, 2, 0, 0},
      {"unet up 2x2/2 128->64 112x112", 128, 64, 112, 2, 2, 0, 0},
      {"dcgan 4x4/2 512->256 8x8", 512, 256, 8, 4, 2, 1, 0},
      {"dcgan 4x4/2 128->64 32x32", 128, 64, 32, 4, 2, 1, 0},
      {"fcn 3x3/2 256->128 28x28 out_pad 1", 256, 128, 28, 3, 2, 1, 1},
      {"decoder 3x3/1 64->64 56x56", 64, 64, 56, 3, 1, 1, 0},
      {"up 2x2/2 512->256 7x7", 512, 256, 7, 2, 2, 0, 0},
  };
  std::printf("\n%-40s %9s %9s %9s %8s %9s\n", "transposed layer", "kiln us", "GFLOP/s",
              "of peak", "BLAS us", "kiln/BLAS");
  for (const TransposedLayer& l : transposed) {
    if (only && !std::strstr(l.name, only)) continue;
    Graph g("conv_transpose");
    Var x = input(g, "x", DType::kFloat32, {1, l.c, l.h, l.h});
    Var w = parameter(g, random_tensor({l.c, l.m, l.k, l.k}, rng), "w");
    g.set_outputs({apply("conv_transpose", {x, w},
                         {{"pads", std::vector<int64_t>(4, l.pad)},
                          {"strides", std::vector<int64_t>{l.stride, l.stride}},
                          {"output_padding", std::vector<int64_t>{l.out_pad, l.out_pad}}})});
    Function f = compile(g);
    const std::vector<Tensor> in{random_tensor({1, l.c, l.h, l.h}, rng)};
    const int64_t gm = l.h * l.h, gn = l.m * l.k * l.k, gk = l.c;
    const double flops = 2.0 * static_cast<double>(gm * gn * gk);
    std::vector<float> a(static_cast<size_t>(gm * gk), 0.5f),
        b(static_cast<size_t>(gk * gn), 0.25f), c(static_cast<size_t>(gm * gn));
    const int runs = std::clamp(static_cast<int>(2e8 / flops), 5, 200);
    std::vector<double> kiln_us, blas_us;
    for (int r = 0; r < rounds; ++r) {
      kiln_us.push_back(median_us([&] { f(in); }, runs));
      blas_us.push_back(median_us(
          [&] {
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, static_cast<int>(gm),
                        static_cast<int>(gn), static_cast<int>(gk), 1.f, a.data(),
                        static_cast<int>(gk), b.data(), static_cast<int>(gn), 0.f, c.data(),
                        static_cast<int>(gn));
          },
          runs));
    }
    const double k_us = median(kiln_us), gf = flops / k_us / 1e3, b_us = median(blas_us);
    std::printf("%-40s %9.1f %9.1f %8.0f%% %8.1f %9.2f\n", l.name, k_us, gf, 100 * gf / peak,
                b_us, k_us / b_us);
  }
}
