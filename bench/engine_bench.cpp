// Dependency-engine overhead on this machine: push + dispatch + completion per function, for
// a chain of 100 000 empty functions (each writes the variable the previous one wrote) and
// a wide fan-out (100 000 functions reading one variable, each writing its own), on the
// threaded engine with 1 and 2 workers and on the naive engine.
// Usage: engine_bench [--n N] [--smoke]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <vector>

#include "runtime/engine/engine.h"

using namespace kiln;
using Clock = std::chrono::steady_clock;

namespace {

double us_per_fn(Clock::time_point t, int n) {
  return std::chrono::duration<double, std::micro>(Clock::now() - t).count() / n;
}

double chain(Engine& e, int n) {
  VarHandle v = e.new_var("chain");
  auto t = Clock::now();
  for (int i = 0; i < n; ++i) e.push([] {}, {}, {v});
  e.wait_for_all();
  return us_per_fn(t, n);
}

double fan_out(Engine& e, int n) {
  VarHandle src = e.new_var("source");
  std::vector<VarHandle> outs(static_cast<size_t>(n));
  for (auto& o : outs) o = e.new_var();
  auto t = Clock::now();
  for (int i = 0; i < n; ++i) e.push([] {}, {src}, {outs[static_cast<size_t>(i)]});
  e.wait_for_all();
  return us_per_fn(t, n);
}

}  // namespace

int main(int argc, char** argv) {
  int n = 100000, rounds = 3;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--n") == 0 && i + 1 < argc)
      n = std::max(1000, std::atoi(argv[i + 1]));
    if (std::strcmp(argv[i], "--smoke") == 0) n = 1000, rounds = 1;  // ctest
  }
  std::printf("kiln engine overhead, %d empty functions (us per function, best of 3)\n\n", n);
  std::printf("%-22s %10s %10s\n", "engine", "chain", "fan-out");
  struct Config {
    const char* name;
    EngineKind kind;
    int workers;
  };
  for (Config c : {Config{"threaded, 1 worker", EngineKind::kThreaded, 1},
                   Config{"threaded, 2 workers", EngineKind::kThreaded, 2},
                   Config{"naive", EngineKind::kNaive, 1}}) {
    double best_chain = 1e9, best_fan = 1e9;
    for (int r = 0; r < rounds; ++r) {
      auto e = make_engine(c.kind, c.workers);
      best_chain = std::min(best_chain, chain(*e, n));
      best_fan = std::min(best_fan, fan_out(*e, n));
    }
    std::printf("%-22s %10.3f %10.3f\n", c.name, best_chain, best_fan);
  }
  return 0;
}
