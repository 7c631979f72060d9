// What the per-step profiler costs: run time of each model with profiling off and on,
// interleaved rounds, medians, and the ratio. Off costs one relaxed load per step; on adds
// two clock reads per step and per thunk call or part, and a few relaxed atomic adds.
// Models: the MLP and ResNet-block examples, and ResNet-18 and MobileNetV2 from
// bench/data/zoo when bench/zoo/export.py has made them.
// Usage: profile_bench [--rounds N] [--smoke]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "compiler/compile.h"
#include "frontend/model_loader.h"
#include "runtime/io/npy.h"

namespace fs = std::filesystem;
using namespace kiln;
using Clock = std::chrono::steady_clock;

namespace {

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Per-run ms of `runs` back-to-back runs.
double time_runs(const Function& f, const std::vector<Tensor>& in, int runs) {
  const auto t = Clock::now();
  for (int r = 0; r < runs; ++r) f(in);
  return std::chrono::duration<double, std::milli>(Clock::now() - t).count() / runs;
}

void bench(const std::string& name, const std::string& model, const std::string& input,
           int rounds) {
  if (!fs::exists(model)) {
    std::printf("%-12s (not exported: run bench/zoo/export.py)\n", name.c_str());
    return;
  }
  Graph g = load_model(model);
  Function f = compile(g);
  std::vector<Tensor> in{read_npy(input)};
  f(in);
  // About 50 ms of runs per sample.
  const double one = time_runs(f, in, 3);
  const int runs = std::max(1, static_cast<int>(50.0 / std::max(one, 1e-3)));
  // A second "off" series in the same rounds shows what noise alone does to the ratio.
  std::vector<double> off, on, off2;
  for (int r = 0; r < rounds; ++r) {
    f.set_profiling(false);
    off.push_back(time_runs(f, in, runs));
    f.set_profiling(true);
    on.push_back(time_runs(f, in, runs));
    f.set_profiling(false);
    off2.push_back(time_runs(f, in, runs));
  }
  const double a = median(off), b = median(on), c = median(off2);
  std::printf("%-12s %12.4f %12.4f %10.3f %12.3f\n", name.c_str(), a, b, b / a, c / a);
}

}  // namespace

int main(int argc, char** argv) {
  int rounds = 11;
  bool smoke = false;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--rounds") == 0 && i + 1 < argc)
      rounds = std::max(1, std::atoi(argv[i + 1]));
    if (std::strcmp(argv[i], "--smoke") == 0) rounds = 1, smoke = true;  // ctest: the examples once
  }
  const std::string ex = KILN_EXAMPLES_DIR, zoo = KILN_BENCH_DATA "/zoo";
  std::printf("%-12s %12s %12s %10s %12s\n", "model", "off ms/run", "on ms/run", "on/off",
              "off2/off");
  bench("mlp", ex + "/mlp/mlp.json", ex + "/mlp/input.npy", rounds);
  bench("resblock", ex + "/onnx/resblock/model.onnx", ex + "/onnx/resblock/x.npy", rounds);
  if (smoke) return 0;
  bench("resnet18", zoo + "/resnet18.onnx", zoo + "/resnet18.input.npy", rounds);
  bench("mobilenet_v2", zoo + "/mobilenet_v2.onnx", zoo + "/mobilenet_v2.input.npy", rounds);
  return 0;
}
