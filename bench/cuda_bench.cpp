// CUDA backend numbers, in one run.
// Without a GPU (always):
//  - NVRTC cold compile of a module's kernels.cu (the toolchain's own options, cubin and
//    PTX written), for the MLP example and a ResNet-18-sized graph (batch 1, 224x224; all
//    20 convolutions, pools, residual adds and the classifier on the device);
//  - the emulator's image build (clang++) of the same files;
//  - a warm hit in a fresh process (--device cuda on the GPU when there is one, else the
//    emulator): graph -> callable with the module and its kernel image in the cache.
// With a GPU (a CUDA driver and KILN_CUDA_DEVICE unset or "gpu"), also kernel times (runs
// with device inputs and outputs, less the same graph on a tiny input): bandwidth of a
// large fused elementwise op, a row softmax and a row sum against the copy kernel, the
// GEMM's GFLOP/s, and MLP / ResNet-18 batch-1 latency.
// Usage: cuda_bench [--repeat N] [--smoke]   (--smoke: the MLP once; for ctest)
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "compiler/c/linker.h"
#include "compiler/compile.h"
#include "compiler/entries/background_stores.h"
#include "compiler/cuda/toolchain.h"
#include "compiler/subprocess.h"
#include "frontend/model_loader.h"
#include "ops/builders.h"
#include "runtime/cuda/cuda_device.h"
#include "runtime/device/device_tensor.h"
#include "util/fs.h"

using namespace kiln;
using Clock = std::chrono::steady_clock;
namespace fs = std::filesystem;

namespace {

using Ints = std::vector<int64_t>;

double since_ms(Clock::time_point t) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t).count();
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

Tensor random(const Shape& shape, std::mt19937& rng, double scale) {
  std::normal_distribution<double> d(0.0, scale);
  Tensor t = Tensor::empty(DType::kFloat32, shape);
  for (int64_t i = 0; i < t.numel(); ++i) t.store(i, d(rng));
  return t;
}

// conv (batch norm folded into weights and bias) + optional relu, as exporters leave it.
Var conv_bn(Graph& g, Var x, int64_t cin, int64_t cout, int64_t k, int64_t stride, bool act,
            std::mt19937& rng) {
  const int64_t p = k / 2;
  Var w = parameter(g, random({cout, cin, k, k}, rng, 1.0 / std::sqrt(double(cin * k * k))), "");
  Var b = parameter(g, random({cout}, rng, 0.1), "");
  Var y = kiln::apply("conv", {x, w, b},
                      {{"strides", Ints{stride, stride}}, {"pads", Ints{p, p, p, p}}});
  return act ? relu(y) : y;
}

// ResNet-18 at 224x224: stem, 4 stages of 2 basic blocks, global pool, classifier.
Graph resnet18(int64_t batch) {
  std::mt19937 rng(18);
  Graph g("resnet18_like");
  Var x = input(g, "x", DType::kFloat32, {batch, 3, 224, 224});
  Var t = conv_bn(g, x, 3, 64, 7, 2, true, rng);
  t = kiln::apply(
      "max_pool", {t},
      {{"kernel_shape", Ints{3, 3}}, {"strides", Ints{2, 2}}, {"pads", Ints{1, 1, 1, 1}}});
  int64_t c = 64;
  for (int64_t stage = 0; stage < 4; ++stage) {
    const int64_t out = 64 << stage;
    for (int block = 0; block < 2; ++block) {
      const int64_t stride = (stage > 0 && block == 0) ? 2 : 1;
      Var y = conv_bn(g, t, c, out, 3, stride, true, rng);
      y = conv_bn(g, y, out, out, 3, 1, false, rng);
      Var skip = (stride != 1 || c != out) ? conv_bn(g, t, c, out, 1, stride, false, rng) : t;
      t = relu(y + skip);
      c = out;
    }
  }
  t = flatten(mean(t, {2, 3}, true), 1);
  Var w = parameter(g, random({512, 1000}, rng, 0.05), "fc.w");
  Var b = parameter(g, random({1000}, rng, 0.1), "fc.b");
  g.set_outputs({(matmul(t, w) + b).var()});
  return g;
}

Graph mlp() { return load_model(KILN_MLP_JSON); }

Graph make(const std::string& which) { return which == "mlp" ? mlp() : resnet18(1); }

CompileOptions on_cuda(const std::string& cache = "") {
  CompileOptions o;
  o.device = "cuda";
  if (!cache.empty()) o.cache_dir = cache;
  return o;
}

// Child mode: one compile in a fresh process (device from KILN_CUDA_DEVICE), timed graph ->
// callable.
int child(const std::string& which, const std::string& cache) {
  Graph g = make(which);
  auto t = Clock::now();
  Function f = compile(g, on_cuda(cache));
  std::printf("%.4f %s\n", since_ms(t), to_string(f.info().cache));
  return 0;
}

// kernels.cu of `g` placed on CUDA, compiled by `toolchain` into a fresh folder per repeat.
double build_ms(const Graph& placed, const CudaToolchain& toolchain, const fs::path& base,
                int repeat, size_t* lines, size_t* kernels) {
  LinkedModule m = link_c_module(placed, "bench");
  const std::string source = m.device_unit.str();
  *lines = static_cast<size_t>(std::count(source.begin(), source.end(), '\n'));
  *kernels = std::set<std::string>(m.kernel_symbols.begin(), m.kernel_symbols.end()).size();
  std::vector<double> ms;
  for (int r = 0; r < repeat; ++r) {
    const fs::path dir = base / std::to_string(r);
    fs::create_directories(dir);
    write_file_atomic(dir / "kernels.cu", source);
    auto t = Clock::now();
    CompileOutcome out = toolchain.build(dir);
    ms.push_back(since_ms(t));
    if (!out.ok) {
      std::fprintf(stderr, "kernels.cu of %s failed to compile:\n%s\n", placed.name().c_str(),
                   out.log.c_str());
      std::exit(1);
    }
  }
  return median(ms);
}

// `hit_device`: where the fresh-process warm hits run (the GPU when there is one, so a
// machine without clang++ still measures them; else the emulator).
std::vector<std::string> g_models{"mlp", "resnet18"};  // --smoke: the MLP only

void compile_rows(const fs::path& base, int repeat, const std::string& self,
                  const std::string& hit_device) {
  std::printf("%-16s %8s %8s %14s %16s %18s\n", "graph", "kernels", "lines", "NVRTC sm_90 ms",
              "emulator cxx ms", ("hit ms (" + hit_device + ")").c_str());
  for (const std::string& which : g_models) {
    const Graph placed = optimized_graph(make(which), on_cuda());
    size_t lines = 0, kernels = 0;
    // The toolchain is chosen once per process: NVRTC here (no KILN_CUDA_DEVICE), the
    // emulator's clang++ in a child.
    const double nvrtc =
        build_ms(placed, CudaToolchain::get(), base / ("nvrtc-" + which), repeat, &lines, &kernels);
    ProcessResult emu =
        run_process({"/usr/bin/env", "KILN_CUDA_DEVICE=emulator", self, "--emulator-build", which,
                     (base / ("emu-" + which)).string(), std::to_string(repeat)});
    const std::string cache = (base / ("cache-" + which)).string();
    const std::string device_env = "KILN_CUDA_DEVICE=" + hit_device;
    ProcessResult cold = run_process({"/usr/bin/env", device_env, self, "--child", which, cache});
    std::vector<double> hits;
    for (int r = 0; r < repeat; ++r) {
      ProcessResult p = run_process({"/usr/bin/env", device_env, self, "--child", which, cache});
      if (p.exit_code != 0 || p.out.find("hit") == std::string::npos) {
        std::fprintf(stderr, "warm child failed: %s %s %s\n", cold.err.c_str(), p.out.c_str(),
                     p.err.c_str());
        std::exit(1);
      }
      hits.push_back(std::stod(p.out));
    }
    std::printf("%-16s %8zu %8zu %14.1f %16s %18.2f\n", which.c_str(), kernels, lines, nvrtc,
                emu.out.empty() ? "?" : emu.out.substr(0, emu.out.find('\n')).c_str(),
                median(hits));
  }
}

int emulator_build(const std::string& which, const std::string& dir, int repeat) {
  const Graph placed = optimized_graph(make(which), on_cuda());
  size_t lines = 0, kernels = 0;
  std::printf("%.1f\n", build_ms(placed, CudaToolchain::get(), dir, repeat, &lines, &kernels));
  return 0;
}

// Median wall time of f(inputs) in ms, after a warm-up call.
double run_ms(Function& f, const std::vector<Tensor>& inputs, int repeat) {
  f(inputs);
  std::vector<double> ms;
  for (int r = 0; r < repeat; ++r) {
    auto t = Clock::now();
    f(inputs);
    ms.push_back(since_ms(t));
  }
  return median(ms);
}

// Device time of the kernels `op` makes on an input of `shape`: a run with the input and
// output on the device (device_io: no transfers), less a run of the same graph on a (1, 32)
// input. Launch, executor and wait cost the same in both, so the difference is the kernels.
template <class Op>
double kernel_ms(const Shape& shape, Op op, const std::string& passes, int repeat) {
  std::mt19937 rng(1);
  double t[2];
  for (int i = 0; i < 2; ++i) {
    const Shape s = i ? shape : Shape{1, 32};
    Graph g("kernel");
    Var v = input(g, "x", DType::kFloat32, s);
    g.set_outputs({op(g, v, s).var()});
    CompileOptions o = on_cuda();
    o.passes = passes;
    o.device_io = true;
    Function f = compile(g, o);
    t[i] = run_ms(f, {to_device(random(s, rng, 1.0))}, repeat);
  }
  return t[1] - t[0];
}

void gpu_rows(int repeat) {
  std::printf("\nGPU: %s\n", cuda_device().describe().c_str());
  const Shape big{8192, 8192};  // 256 MiB of float32
  const double mib = 8192.0 * 8192 * 4;
  const int r = std::max(repeat, 20);
  // The copy: an identity transpose, kept as a node by running no passes.
  const double copy = kernel_ms(
      big,
      [](Graph&, Var v, const Shape&) {
        return transpose(v, {0, 1});
      },
      "none", r);
  // One fused kernel: the default passes fuse the three ops.
  const double ew = kernel_ms(
      big, [](Graph&, Var v, const Shape&) { return relu(v * 0.5 + 0.25); }, "", r);
  const double sm = kernel_ms(
      big, [](Graph&, Var v, const Shape&) { return softmax(v); }, "none", r);
  const double rs = kernel_ms(
      big, [](Graph&, Var v, const Shape&) { return sum(v, {1}); }, "none", r);
  std::printf("%-34s %10s %10s %12s\n", "kernel (8192x8192 f32)", "ms", "GB/s", "vs copy");
  auto row = [&](const char* name, double ms, double bytes) {
    std::printf("%-34s %10.3f %10.1f %12.2f\n", name, ms, bytes / ms / 1e6,
                (bytes / ms) / (2 * mib / copy));
  };
  row("copy (read + write)", copy, 2 * mib);
  row("fused relu(x*0.5+0.25)", ew, 2 * mib);
  row("row softmax", sm, 2 * mib);
  row("row sum (reads only)", rs, mib);
  const int64_t n = 4096;
  std::mt19937 rng(2);
  const double gemm = kernel_ms(
      {n, n},
      [&](Graph& g, Var v, const Shape& s) {
        return matmul(v, parameter(g, random({s[1], s[1]}, rng, 1.0 / 64), "w"));
      },
      "none", r);
  std::printf("%-34s %10.3f %10.1f GFLOP/s (kiln's own kernel; cuBLAS not wired)\n",
              "GEMM 4096^3 f32", gemm, 2.0 * n * n * n / gemm / 1e6);
  for (const std::string& which : g_models) {
    Graph g = make(which);
    Function f = compile(g, on_cuda());
    std::vector<Tensor> inputs;
    for (const Variable* v : g.inputs()) {
      Shape s;
      for (int64_t d : v->type.dims) s.push_back(d < 0 ? 1 : d);
      inputs.push_back(random(s, rng, 1.0));
    }
    std::printf("%-30s %10.3f ms batch-1 latency (with transfers)\n", which.c_str(),
                run_ms(f, inputs, repeat));
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (argc == 4 && std::strcmp(argv[1], "--child") == 0) return child(argv[2], argv[3]);
  if (argc == 5 && std::strcmp(argv[1], "--emulator-build") == 0)
    return emulator_build(argv[2], argv[3], std::atoi(argv[4]));
  int repeat = 5;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--repeat") == 0 && i + 1 < argc)
      repeat = std::max(1, std::atoi(argv[i + 1]));
    if (std::strcmp(argv[i], "--smoke") == 0) repeat = 1, g_models = {"mlp"};  // ctest
  }
  const std::string self = fs::canonical("/proc/self/exe").string();
  const fs::path base =
      fs::temp_directory_path() / ("kiln-cuda-bench-" + std::to_string(::getpid()));
  fs::create_directories(base);
  ::setenv("KILN_CACHE_DIR", (base / "cache").c_str(), 1);
  std::string why;
  const std::string kind = cuda_device_kind(&why);
  compile_rows(base, repeat, self, kind == "gpu" ? "gpu" : "emulator");
  if (kind == "gpu") {
    gpu_rows(repeat);
  } else {
    std::printf("\nGPU rows not run: %s\n",
                kind.empty() ? why.c_str() : ("KILN_CUDA_DEVICE=" + kind).c_str());
  }
  wait_for_background_stores();  // nothing may still write into it
  fs::remove_all(base);
  return 0;
}
