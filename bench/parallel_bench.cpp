// Parallel execution on this machine, in one run:
//  - memory bandwidth of a STREAM-style triad (a = b + s*c over 16M floats) on 1 and 2
//    threads: the ceiling for any streaming kernel;
//  - a large elementwise kernel (16M floats, z = x + y: the triad's traffic, 12 bytes per
//    element) compiled by kiln, run with 1 and 2 engine workers, as a fraction of the triad;
//  - a graph with two independent heavy branches on 1 and 2 workers: with thunk splitting
//    off (branch parallelism alone) and on, beside the same two branches in plain C++ on one
//    thread vs two (what the machine's cores give).
// Built with -march=native, as kiln's modules are, so the triad uses the same vector width.
// Usage: parallel_bench [--repeat N] [--smoke]
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <limits>
#include <memory>
#include <optional>
#include <random>
#include <thread>
#include <vector>

#include "compiler/compile.h"
#include "ops/builders.h"
#include "runtime/engine/engine.h"
#include "runtime/storage.h"

using namespace kiln;
using Clock = std::chrono::steady_clock;

namespace {

int64_t g_stream_n = int64_t(1) << 24;  // 16M floats, 64 MiB per array (--smoke: 1M)
int64_t g_branch_n = int64_t(1) << 20;  // (--smoke: 64K)

double ms_of(const std::function<void()>& f) {
  auto t = Clock::now();
  f();
  return std::chrono::duration<double, std::milli>(Clock::now() - t).count();
}

// The machine is shared: every configuration runs once per round, rounds interleaved, and
// each keeps its best time, so a noisy stretch hits all of them alike.
std::vector<double> best_interleaved(const std::vector<std::function<void()>>& configs,
                                     int rounds) {
  std::vector<double> best(configs.size(), std::numeric_limits<double>::infinity());
  for (int r = 0; r < rounds; ++r) {
    for (size_t c = 0; c < configs.size(); ++c) best[c] = std::min(best[c], ms_of(configs[c]));
  }
  return best;
}

double gbps(double ms) { return 3.0 * 4.0 * static_cast<double>(g_stream_n) / (ms * 1e6); }

__attribute__((noinline)) void triad_part(float* __restrict a, const float* __restrict b,
                                          const float* __restrict c, float s, int64_t lo,
                                          int64_t hi) {
  for (int64_t i = lo; i < hi; ++i) a[i] = b[i] + s * c[i];
}

// The calling thread takes the last block, as an engine's caller would.
void on_threads(int threads, int64_t n, const std::function<void(int64_t, int64_t)>& body) {
  std::vector<std::thread> ts;
  for (int t = 0; t + 1 < threads; ++t)
    ts.emplace_back(body, n * t / threads, n * (t + 1) / threads);
  body(n * (threads - 1) / threads, n);
  for (auto& t : ts) t.join();
}

// STREAM's triad: each thread initialises and then streams its own contiguous block (first
// touch places the pages near it).
struct Triad {
  // Allocated as kiln allocates tensors, so both stream through the same kind of buffers.
  std::shared_ptr<Storage> sa = allocate_storage(g_stream_n * sizeof(float)),
                           sb = allocate_storage(g_stream_n * sizeof(float)),
                           sc = allocate_storage(g_stream_n * sizeof(float));
  float* a = static_cast<float*>(sa->data());
  float* b = static_cast<float*>(sb->data());
  float* c = static_cast<float*>(sc->data());
  Triad() {
    on_threads(2, g_stream_n, [this](int64_t lo, int64_t hi) {
      // Varied values: pages of one repeated value may be merged by a hypervisor's
      // same-page merging, and every write to them then faults.
      for (int64_t i = lo; i < hi; ++i) {
        a[i] = 0.5f * static_cast<float>(i & 1023);
        b[i] = 1.0f + static_cast<float>(i % 977);
        c[i] = 2.0f - static_cast<float>(i % 613);
      }
    });
  }
  void run(int threads) {
    on_threads(threads, g_stream_n,
               [this](int64_t lo, int64_t hi) { triad_part(a, b, c, 3.0f, lo, hi); });
  }
};

// A compiled graph with its own engine of `workers` CPU workers, and its inputs.
struct Bench {
  std::unique_ptr<Engine> engine;
  std::optional<Function> f;
  std::vector<Tensor> inputs, out;
  Bench(const Graph& g, int workers, int64_t split_grain, std::vector<Tensor> in)
      : engine(make_engine(EngineKind::kThreaded, workers)), inputs(std::move(in)) {
    CompileOptions options;
    options.engine = engine.get();
    options.split_grain = split_grain;
    f.emplace(compile(g, options));
    out = (*f)(inputs);  // warm: plan made, pooled output pages touched
  }
  void run() { out = (*f)(inputs); }
};

Tensor random_floats(int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> u(-2, 2);
  std::vector<double> v(static_cast<size_t>(n));
  for (auto& e : v) e = u(rng);
  return Tensor::from_doubles(DType::kFloat32, {n}, v);
}

}  // namespace

int main(int argc, char** argv) {
  int repeat = 10;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--repeat") == 0 && i + 1 < argc)
      repeat = std::max(1, std::atoi(argv[i + 1]));
    if (std::strcmp(argv[i], "--smoke") == 0)
      repeat = 1, g_stream_n >>= 4, g_branch_n >>= 4;  // ctest
  }
  std::printf("kiln parallel execution (best of %d interleaved rounds; %u hardware threads)\n\n",
              repeat, std::thread::hardware_concurrency());

  Graph add("bench_add16m");
  {
    Var x = input(add, "x", DType::kFloat32, {kDynamic});
    Var y = input(add, "y", DType::kFloat32, {kDynamic});
    add.set_outputs({x + y});
  }
  Triad triad;
  std::vector<Tensor> add_in{random_floats(g_stream_n, 1), random_floats(g_stream_n, 2)};
  Bench add1(add, 1, 0, add_in), add2(add, 2, 0, add_in);
  for (int64_t i : {int64_t{0}, g_stream_n / 3, g_stream_n - 1}) {
    for (Bench* b : {&add1, &add2}) {
      if (b->out[0].numel() != g_stream_n ||
          b->out[0].load(i) != static_cast<float>(add_in[0].load(i) + add_in[1].load(i))) {
        std::fprintf(stderr, "kiln x + y gave a wrong result at %lld\n", static_cast<long long>(i));
        return 1;
      }
    }
  }
  auto t = best_interleaved(
      {[&] { triad.run(1); }, [&] { add1.run(); }, [&] { triad.run(2); }, [&] { add2.run(); }},
      repeat);
  // The machine's ceiling is the faster triad; kiln is compared with it at both worker counts.
  const double ceiling = std::min(t[0], t[2]);
  std::printf("%lldM floats, 12 bytes per element            ms      GB/s   of the triad ceiling\n",
              static_cast<long long>(g_stream_n >> 20));
  for (int w = 0; w < 2; ++w) {
    double tr = t[static_cast<size_t>(2 * w)];
    std::printf("  STREAM triad, %d thread%s              %8.2f  %8.2f\n", w + 1, w ? "s" : " ", tr,
                gbps(tr));
  }
  for (int w = 0; w < 2; ++w) {
    double k = t[static_cast<size_t>(2 * w + 1)];
    std::printf("  kiln x + y,   %d worker%s              %8.2f  %8.2f   %6.1f%%\n", w + 1,
                w ? "s" : " ", k, gbps(k), 100.0 * ceiling / k);
  }

  // Two identical branches of five transcendental and arithmetic ops, each on its own 1M
  // floats, joined by an add.
  Graph branches("bench_branches");
  {
    auto branch = [](Var v) { return erf(tanh(exp(sin(v)) * 0.5)); };
    Var x = input(branches, "x", DType::kFloat32, {kDynamic});
    Var y = input(branches, "y", DType::kFloat32, {kDynamic});
    branches.set_outputs({branch(x) + branch(y)});
  }
  std::vector<Tensor> br_in{random_floats(g_branch_n, 3), random_floats(g_branch_n, 4)};
  const int64_t no_split = std::numeric_limits<int64_t>::max() / 4;
  Bench b1(branches, 1, no_split, br_in), b2(branches, 2, no_split, br_in);
  Bench s1(branches, 1, 0, br_in), s2(branches, 2, 0, br_in);
  // Baseline: the same branch computed by plain C++ (libm, one pass per op), both branches
  // on one thread vs one branch per thread: the speedup this machine's two cores give.
  std::vector<float> ra(g_branch_n), rb(g_branch_n), rtmp_a(g_branch_n), rtmp_b(g_branch_n);
  auto raw_branch = [&](const Tensor& in, std::vector<float>& out, std::vector<float>& tmp) {
    const float* x = static_cast<const float*>(in.data());
    for (int64_t i = 0; i < g_branch_n; ++i) tmp[i] = std::sin(x[i]);
    for (int64_t i = 0; i < g_branch_n; ++i) tmp[i] = std::exp(tmp[i]);
    for (int64_t i = 0; i < g_branch_n; ++i) tmp[i] = tmp[i] * 0.5f;
    for (int64_t i = 0; i < g_branch_n; ++i) tmp[i] = std::tanh(tmp[i]);
    for (int64_t i = 0; i < g_branch_n; ++i) out[i] = std::erf(tmp[i]);
  };
  auto raw_join = [&] {
    for (int64_t i = 0; i < g_branch_n; ++i) ra[i] += rb[i];
  };
  t = best_interleaved({[&] {
                          raw_branch(br_in[0], ra, rtmp_a);
                          raw_branch(br_in[1], rb, rtmp_b);
                          raw_join();
                        },
                        [&] {
                          std::thread other([&] { raw_branch(br_in[1], rb, rtmp_b); });
                          raw_branch(br_in[0], ra, rtmp_a);
                          other.join();
                          raw_join();
                        },
                        [&] { b1.run(); }, [&] { b2.run(); }, [&] { s1.run(); }, [&] { s2.run(); }},
                       repeat);
  std::printf("\ntwo independent branches (5 ops each, 1M floats)   ms     speedup\n");
  const char* names[] = {"plain C++ baseline", "kiln, branches only", "kiln, branches + split"};
  for (int c = 0; c < 3; ++c) {
    double one = t[static_cast<size_t>(2 * c)], two = t[static_cast<size_t>(2 * c + 1)];
    std::printf("  %-26s 1 %-7s %8.2f\n", names[c], c ? "worker" : "thread", one);
    std::printf("  %-26s 2 %-7s %8.2f   %6.2fx\n", "", c ? "workers" : "threads", two, one / two);
  }
  return 0;
}
