// Times kiln inference of an ONNX model on one input, for bench/onnx_peers.py, which runs
// onnxruntime and PyTorch on the same file and data in the same run.
// Usage: onnx_bench MODEL.onnx INPUT.npy... [--repeat N] [--warmup-ms MS] [--out OUT.npy]
//                   [--passes SPEC] [--profile TOP]
// Prints "compile_ms <ms>" (model file -> callable, through the kernel cache) and
// "run_ms <median> <min>" (one warm-up run first, more for --warmup-ms), "run_quartiles_ms <p25>
// <p75> <p90>"; --profile: then the TOP slowest steps over a second set of runs with per-step
// timing on (so the timed runs above carry none).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "compiler/compile.h"
#include "compiler/entries/background_stores.h"
#include "frontend/model_function.h"
#include "frontend/model_loader.h"
#include "runtime/io/npy.h"
#include "util/error.h"

using namespace kiln;
using Clock = std::chrono::steady_clock;

namespace {
// The slowest steps, each with its share of the summed step time.
void print_profile(const Function& f, const std::vector<Tensor>& inputs, int repeat, int top) {
  f.set_profiling(true);
  for (int r = 0; r < repeat; ++r) f(inputs);
  auto steps = f.profile();
  f.set_profiling(false);
  double total = 0;
  for (const auto& s : steps) total += static_cast<double>(s.total_ns);
  std::sort(steps.begin(), steps.end(),
            [](const StepTime& a, const StepTime& b) { return a.total_ns > b.total_ns; });
  std::printf("profile: %zu steps, %.3f ms per run in steps\n", steps.size(), total / repeat / 1e6);
  for (size_t i = 0; i < steps.size() && i < static_cast<size_t>(top); ++i) {
    const auto& s = steps[i];
    std::printf("%9.4f ms %5.1f%%  parts %3lld  %s\n", s.total_ns / 1e6 / repeat,
                100.0 * s.total_ns / (total > 0 ? total : 1),
                static_cast<long long>(s.calls ? s.parts / s.calls : 0), s.label.c_str());
  }
}
}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr,
                 "usage: onnx_bench MODEL.onnx INPUT.npy... [--repeat N] [--out OUT.npy] "
                 "[--passes SPEC]\n");
    return 2;
  }
  int repeat = 50;
  double warmup_ms = 0;
  int profile_top = 0;
  std::string out;
  CompileOptions options;
  std::vector<std::string> input_files;
  for (int i = 2; i < argc; ++i) {
    std::string a = argv[i];
    if (i + 1 < argc && a == "--repeat") {
      repeat = std::max(1, std::atoi(argv[++i]));
    } else if (i + 1 < argc && a == "--warmup-ms") {
      warmup_ms = std::max(0.0, std::atof(argv[++i]));
    } else if (i + 1 < argc && a == "--out") {
      out = argv[++i];
    } else if (i + 1 < argc && a == "--profile") {
      profile_top = std::max(1, std::atoi(argv[++i]));
    } else if (i + 1 < argc && a == "--passes") {
      options.passes = argv[++i];
    } else {
      input_files.push_back(a);
    }
  }
  try {
    std::vector<Tensor> inputs;
    for (const auto& file : input_files) inputs.push_back(read_npy(file));
    auto t0 = Clock::now();
    // A model that loads as one graph compiles to one Function; one that runs in stages
    // (control flow, NonZero of computed values) is a ModelFunction, compiled on its first call.
    std::optional<Function> single;
    std::unique_ptr<ModelFunction> staged;
    try {
      single.emplace(compile(load_model(argv[1]), options));
    } catch (const UnsupportedError&) {
      options.generic_start = false;
      staged = std::make_unique<ModelFunction>(argv[1], options);
    }
    auto f = [&](const std::vector<Tensor>& in) { return single ? (*single)(in) : (*staged)(in); };
    std::vector<Tensor> result;
    if (staged) result = f(inputs);
    const double compile_ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
    // A cold compile writes its cache entries behind it: they must not share the cores with
    // the timed runs.
    wait_for_background_stores();
    result = f(inputs);  // warm-up: first-touch of buffers
    // --warmup-ms: more untimed runs, until that long has passed: a fresh process's first
    // ~100 ms of runs were 10-25% slower (the cores' clocks, a worker still beside the
    // caller), which a short --repeat measured instead of the steady state.
    for (auto w0 = Clock::now();
         std::chrono::duration<double, std::milli>(Clock::now() - w0).count() < warmup_ms;) {
      result = f(inputs);
    }
    std::vector<double> ms;
    for (int r = 0; r < repeat; ++r) {
      auto t = Clock::now();
      result = f(inputs);
      ms.push_back(std::chrono::duration<double, std::milli>(Clock::now() - t).count());
    }
    std::sort(ms.begin(), ms.end());
    if (!out.empty()) write_npy(out, result[0]);
    std::printf("compile_ms %.3f\nrun_ms %.4f %.4f\n", compile_ms, ms[ms.size() / 2], ms[0]);
    // The spread: a long tail (a worker slow to wake on a busy host) shows here first.
    std::printf("run_quartiles_ms %.4f %.4f %.4f\n", ms[ms.size() / 4], ms[ms.size() * 3 / 4],
                ms[ms.size() * 9 / 10]);
    if (profile_top > 0 && single) print_profile(*single, inputs, repeat, profile_top);
  } catch (const Error& e) {
    std::fprintf(stderr, "onnx_bench: %s\n", e.what());
    return 1;
  }
  return 0;
}
