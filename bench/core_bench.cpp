// Core pipeline numbers on this machine, in one run:
//  - cold compile (graph -> callable) of the MLP and of a 20-node elementwise graph;
//  - MLP inference at batch 1 and 64, against the same computation calling OpenBLAS
//    directly (cblas_sgemm + plain C++ bias/ReLU/softmax loops), measured in the same run.
// Usage: core_bench [--repeat N] [--smoke]   (--smoke: one round, short timings; for ctest)
#include <cblas.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include "compiler/compile.h"
#include "compiler/entries/background_stores.h"
#include "ops/builders.h"

using namespace kiln;
using Clock = std::chrono::steady_clock;

namespace {

double since_ms(Clock::time_point t) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t).count();
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

Tensor random(Shape s, std::mt19937& rng, double scale) {
  std::normal_distribution<double> nd(0, scale);
  std::vector<double> v(static_cast<size_t>(shape_numel(s)));
  for (auto& x : v) x = nd(rng);
  return Tensor::from_doubles(DType::kFloat32, std::move(s), v);
}

struct Mlp {
  Tensor w1, b1, w2, b2, w3, b3;
};

Graph mlp_graph(const Mlp& m) {
  Graph g("bench_mlp");
  Var x = input(g, "x", DType::kFloat32, {kDynamic, 784});
  Var h1 = relu(matmul(x, parameter(g, m.w1, "w1")) + parameter(g, m.b1, "b1"));
  Var h2 = relu(matmul(h1, parameter(g, m.w2, "w2")) + parameter(g, m.b2, "b2"));
  g.set_outputs({softmax(matmul(h2, parameter(g, m.w3, "w3")) + parameter(g, m.b3, "b3"))});
  return g;
}

Graph elementwise_graph() {
  Graph g("bench_elementwise20");
  Var a = input(g, "a", DType::kFloat32, {kDynamic});
  Var b = input(g, "b", DType::kFloat32, {kDynamic});
  Var t = a;
  // 20 nodes: arithmetic and transcendentals, as an unfused chain.
  for (int i = 0; i < 5; ++i) t = exp(tanh(t * b + a));
  g.set_outputs({t});
  return g;
}

// The MLP written by hand on OpenBLAS: the baseline kiln's module should match.
void mlp_openblas(const Mlp& m, const float* x, int n, std::vector<float>& h1,
                  std::vector<float>& h2, std::vector<float>& y) {
  auto layer = [&](const float* in, int k, const Tensor& w, const Tensor& b, int out_dim,
                   std::vector<float>& out, bool relu) {
    out.resize(static_cast<size_t>(n) * out_dim);
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, out_dim, k, 1.0f, in, k,
                static_cast<const float*>(w.data()), out_dim, 0.0f, out.data(), out_dim);
    const float* bias = static_cast<const float*>(b.data());
    for (int i = 0; i < n; ++i) {
      float* row = out.data() + static_cast<size_t>(i) * out_dim;
      for (int j = 0; j < out_dim; ++j) {
        float v = row[j] + bias[j];
        row[j] = relu ? (v < 0 ? 0 : v) : v;
      }
    }
  };
  layer(x, 784, m.w1, m.b1, 256, h1, true);
  layer(h1.data(), 256, m.w2, m.b2, 128, h2, true);
  layer(h2.data(), 128, m.w3, m.b3, 10, y, false);
  for (int i = 0; i < n; ++i) {
    float* row = y.data() + static_cast<size_t>(i) * 10;
    float mx = *std::max_element(row, row + 10), sum = 0;
    for (int j = 0; j < 10; ++j) sum += (row[j] = std::exp(row[j] - mx));
    for (int j = 0; j < 10; ++j) row[j] /= sum;
  }
}

double g_min_ms = 300;  // --smoke: a few milliseconds per measurement

template <class F>
double time_per_call_us(F&& f) {
  f();  // warm up (plans memory, faults pages in)
  int iters = 0;
  auto start = Clock::now();
  while (since_ms(start) < g_min_ms) {
    f();
    ++iters;
  }
  return since_ms(start) * 1000.0 / iters;
}

}  // namespace

int main(int argc, char** argv) {
  int repeat = 5;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--repeat") == 0 && i + 1 < argc)
      repeat = std::max(1, std::atoi(argv[i + 1]));
    if (std::strcmp(argv[i], "--smoke") == 0)
      repeat = 1, g_min_ms = 5;  // ctest: it runs, it agrees
  }
  std::mt19937 rng(1);
  Mlp m{random({784, 256}, rng, 0.05), random({256}, rng, 0.01),     random({256, 128}, rng, 0.09),
        random({128}, rng, 0.01),      random({128, 10}, rng, 0.12), random({10}, rng, 0.01)};
  auto work = std::filesystem::temp_directory_path() / "kiln-bench-work";
  wait_for_background_stores();  // nothing may still write into it
  std::filesystem::remove_all(work);
  CompileOptions opts;
  opts.cache_dir = work;  // emptied before every cold compile

  std::printf("kiln core benchmark (%d repeats; medians)\n\n", repeat);
  std::printf("%-28s %10s %10s %10s %10s %12s\n", "cold compile", "key ms", "codegen", "clang ms",
              "load ms", "total ms");
  for (auto make : {+[](const Mlp& mm) { return mlp_graph(mm); },
                    +[](const Mlp&) { return elementwise_graph(); }}) {
    std::vector<double> key, gen, cc, load, total;
    std::string name;
    for (int r = 0; r < repeat; ++r) {
      Graph g = make(m);
      name = g.name() + " (" + std::to_string(g.nodes().size()) + " nodes)";
      wait_for_background_stores();  // nothing may still write into it
      std::filesystem::remove_all(work);  // nothing from the last round is reused
      clear_compile_memo();
      auto t = Clock::now();
      Function f = compile(g, opts);
      total.push_back(since_ms(t));
      key.push_back(f.info().times.key_ms);
      gen.push_back(f.info().times.codegen_ms);
      cc.push_back(f.info().times.compile_ms);
      load.push_back(f.info().times.load_ms);
    }
    std::printf("%-28s %10.2f %10.2f %10.1f %10.2f %12.1f\n", name.c_str(), median(key),
                median(gen), median(cc), median(load), median(total));
  }

  Function f = compile(mlp_graph(m), opts);
  std::printf("\n%-28s %14s %14s %8s\n", "MLP 784-256-128-10 run", "kiln us/call", "OpenBLAS us",
              "ratio");
  for (int batch : {1, 64}) {
    Tensor x = random({batch, 784}, rng, 1.0);
    std::vector<float> h1, h2, y;
    double kiln_us = time_per_call_us([&] { f({x}); });
    double blas_us = time_per_call_us(
        [&] { mlp_openblas(m, static_cast<const float*>(x.data()), batch, h1, h2, y); });
    // Same answer, or the timing means nothing.
    Tensor out = f({x})[0];
    double err = 0;
    for (int64_t i = 0; i < out.numel(); ++i)
      err = std::max(err, std::fabs(out.load(i) - y[static_cast<size_t>(i)]));
    std::printf("%-28s %14.1f %14.1f %7.2fx   (max diff %.1e)\n",
                ("batch " + std::to_string(batch)).c_str(), kiln_us, blas_us, kiln_us / blas_us,
                err);
    if (!(err < 1e-3)) {
      std::fprintf(stderr, "core_bench: kiln and OpenBLAS disagree (max diff %g)\n", err);
      return 1;
    }
  }
  std::printf("\nratio = kiln time / OpenBLAS-direct time (lower is better; 1.00 = parity)\n");
  wait_for_background_stores();  // nothing may still write into it
  std::filesystem::remove_all(work);
  return 0;
}
