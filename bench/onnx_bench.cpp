// Times kiln inference of an ONNX model on one input, for bench/onnx_peers.py, which runs
// onnxruntime and PyTorch on the same file and data in the same run.
// Usage: onnx_bench MODEL.onnx INPUT.npy [--repeat N] [--out OUT.npy]
// Prints "compile_ms <ms>" and "run_ms <median> <min>" (one warm-up run first).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "compiler/compile.h"
#include "frontend/model_loader.h"
#include "runtime/npy.h"
#include "util/error.h"

using namespace kiln;
using Clock = std::chrono::steady_clock;

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: onnx_bench MODEL.onnx INPUT.npy [--repeat N] [--out OUT.npy]\n");
    return 2;
  }
  int repeat = 50;
  std::string out;
  for (int i = 3; i + 1 < argc; i += 2) {
    std::string a = argv[i];
    if (a == "--repeat") repeat = std::max(1, std::atoi(argv[i + 1]));
    if (a == "--out") out = argv[i + 1];
  }
  try {
    auto t0 = Clock::now();
    Function f = compile(load_model(argv[1]));
    const double compile_ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
    std::vector<Tensor> inputs{read_npy(argv[2])};
    auto result = f(inputs);  // warm-up: first-touch of buffers
    std::vector<double> ms;
    for (int r = 0; r < repeat; ++r) {
      auto t = Clock::now();
      result = f(inputs);
      ms.push_back(std::chrono::duration<double, std::milli>(Clock::now() - t).count());
    }
    std::sort(ms.begin(), ms.end());
    if (!out.empty()) write_npy(out, result[0]);
    std::printf("compile_ms %.3f\nrun_ms %.4f %.4f\n", compile_ms, ms[ms.size() / 2], ms[0]);
  } catch (const Error& e) {
    std::fprintf(stderr, "onnx_bench: %s\n", e.what());
    return 1;
  }
  return 0;
}
