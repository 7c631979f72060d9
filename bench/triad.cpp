// STREAM-style triad a[i] = b[i] + s * c[i] over float arrays far larger than the caches:
// the machine's memory-bandwidth ceiling, printed beside kiln's elementwise results by
// bench/peers. Usage: triad [N] — prints "triad_gbs <threads> <GB/s>" for 1 and all cores.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <thread>
#include <vector>

namespace {

double run(std::vector<float>& a, const std::vector<float>& b, const std::vector<float>& c,
           unsigned threads) {
  const size_t n = a.size();
  double best = 1e30;
  for (int rep = 0; rep < 10; ++rep) {
    auto t = std::chrono::steady_clock::now();
    std::vector<std::thread> pool;
    for (unsigned k = 0; k < threads; ++k) {
      pool.emplace_back([&, k] {
        const size_t lo = n * k / threads, hi = n * (k + 1) / threads;
        float* __restrict pa = a.data();
        const float* __restrict pb = b.data();
        const float* __restrict pc = c.data();
        for (size_t i = lo; i < hi; ++i) pa[i] = pb[i] + 3.0f * pc[i];
      });
    }
    for (auto& th : pool) th.join();
    best =
        std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count());
  }
  return 3.0 * static_cast<double>(n) * sizeof(float) / best / 1e9;
}

}  // namespace

int main(int argc, char** argv) {
  const size_t n = argc > 1 ? std::strtoull(argv[1], nullptr, 10) : size_t{32} << 20;
  std::vector<float> a(n, 0.0f), b(n, 1.0f), c(n, 2.0f);  // touched: no page faults timed
  const unsigned all = std::max(1u, std::thread::hardware_concurrency());
  std::printf("triad_gbs 1 %.2f\n", run(a, b, c, 1));
  std::printf("triad_gbs %u %.2f\n", all, run(a, b, c, all));
  return a[n / 2] == 7.0f ? 0 : 1;
}
