// kiln export against kiln itself: exports each model (weights embedded), then measures the
// library's size, its load time (dlopen in a fresh child process, then NAME_create), and
// its run time against the same model compiled and run inside kiln — rounds interleaved,
// medians, the ratio printed. They run the same code, so the ratio should be 1 within noise.
//   export_bench [--repeat N] MODEL=INPUT.npy ...   (default: the examples)
#include <dlfcn.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "compiler/compile.h"
#include "compiler/entries/background_stores.h"
#include "compiler/export/export.h"
#include "compiler/subprocess.h"
#include "frontend/model_loader.h"
#include "runtime/module/bundle_abi.h"
#include "runtime/io/npy.h"

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

static double ms_since(Clock::time_point t) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t).count();
}

static double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

int main(int argc, char** argv) {
  int repeat = 30;
  std::vector<std::pair<std::string, std::string>> models;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--repeat" && i + 1 < argc) {
      repeat = std::atoi(argv[++i]);
    } else if (a == "--load-child" && i + 2 < argc) {
      // Child: time dlopen + create of one library, print the two numbers.
      std::string lib = argv[++i], name = argv[++i];
      auto t = Clock::now();
      void* h = ::dlopen(lib.c_str(), RTLD_NOW | RTLD_LOCAL);
      if (!h) return 1;
      double open_ms = ms_since(t);
      auto create =
          reinterpret_cast<void* (*)(const char*)>(::dlsym(h, (name + "_create").c_str()));
      t = Clock::now();
      void* m = create(nullptr);
      double create_ms = ms_since(t);
      if (!m) return 1;
      std::printf("%.3f %.3f\n", open_ms, create_ms);
      return 0;
    } else {
      auto eq = a.find('=');
      if (eq == std::string::npos) {
        std::fprintf(stderr, "usage: export_bench [--repeat N] MODEL=INPUT.npy ...\n");
        return 2;
      }
      models.emplace_back(a.substr(0, eq), a.substr(eq + 1));
    }
  }
  if (models.empty()) {
    const std::string ex = KILN_EXAMPLES_DIR;
    models = {{ex + "/mlp/mlp.json", ex + "/mlp/input.npy"},
              {ex + "/onnx/lenet/model.onnx", ex + "/onnx/lenet/x.npy"},
              {ex + "/onnx/resblock/model.onnx", ex + "/onnx/resblock/x.npy"},
              {ex + "/onnx/attention/model.onnx", ex + "/onnx/attention/x.npy"}};
  }
  const fs::path work =
      fs::temp_directory_path() / ("kiln-export-bench-" + std::to_string(::getpid()));
  std::printf(
      "| model | library | weights | load (dlopen + create) | kiln run | exported run | exported / "
      "kiln |\n");
  std::printf("|---|---|---|---|---|---|---|\n");
  int index = 0;
  for (const auto& [model, input] : models) {
    kiln::Graph g = kiln::load_model(model);
    kiln::ExportOptions options;
    options.out_dir = work / std::to_string(index);
    options.name = "m" + std::to_string(index++);
    kiln::ExportResult r = kiln::export_model(g, options);
    uintmax_t weight_bytes = 0;
    {
      kiln::ExportOptions file = options;
      file.out_dir = work / (options.name + "_file");
      file.embed_weights = false;
      weight_bytes = fs::file_size(kiln::export_model(g, file).weights);
    }
    // Load time in fresh processes (the page cache warm), median of five.
    std::vector<double> loads;
    for (int k = 0; k < 5; ++k) {
      kiln::ProcessResult p =
          kiln::run_process({argv[0], "--load-child", r.library.string(), r.name});
      double open_ms = 0, create_ms = 0;
      if (p.exit_code != 0 || std::sscanf(p.out.c_str(), "%lf %lf", &open_ms, &create_ms) != 2) {
        std::fprintf(stderr, "load child failed: %s\n", p.err.c_str());
        return 1;
      }
      loads.push_back(open_ms + create_ms);
    }
    kiln::Function f = kiln::compile(g);
    kiln::Tensor x = kiln::read_npy(input);
    void* h = ::dlopen(r.library.c_str(), RTLD_NOW | RTLD_LOCAL);
    auto create =
        reinterpret_cast<void* (*)(const char*)>(::dlsym(h, (r.name + "_create").c_str()));
    auto run =
        reinterpret_cast<int (*)(void*, const kiln_bundle_tensor*, size_t, kiln_bundle_tensor*,
                                 size_t)>(::dlsym(h, (r.name + "_run").c_str()));
    auto free_output = reinterpret_cast<void (*)(kiln_bundle_tensor*)>(
        ::dlsym(h, (r.name + "_free_output").c_str()));
    void* m = create(nullptr);
    kiln_bundle_tensor in{};
    in.data = x.data();
    in.ndim = x.ndim();
    in.dtype = static_cast<int32_t>(x.dtype());
    for (int d = 0; d < x.ndim(); ++d) in.shape[d] = x.shape()[d];
    std::vector<kiln_bundle_tensor> outs(f.output_names().size());
    std::vector<double> kiln_ms, export_ms;
    for (int k = 0; k < repeat + 3; ++k) {  // 3 warm-up rounds
      auto t = Clock::now();
      auto y = f({x});
      double a = ms_since(t);
      t = Clock::now();
      if (run(m, &in, 1, outs.data(), outs.size()) != 0) return 1;
      double b = ms_since(t);
      for (auto& o : outs) free_output(&o);
      if (k >= 3) {
        kiln_ms.push_back(a);
        export_ms.push_back(b);
      }
    }
    const double km = median(kiln_ms), em = median(export_ms);
    fs::path mp(model);
    const std::string label =
        mp.stem() == "model" ? mp.parent_path().filename().string() : mp.stem().string();
    std::printf("| %s | %.2f MB | %.2f MB | %.2f ms | %.3f ms | %.3f ms | %.2f |\n", label.c_str(),
                r.library_bytes / 1e6, weight_bytes / 1e6, median(loads), km, em, em / km);
  }
  std::error_code ec;
  kiln::wait_for_background_stores();  // nothing may still write into it
  fs::remove_all(work, ec);
  return 0;
}
