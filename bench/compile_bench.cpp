// Cold compile numbers on this machine, in one run, for the MLP example and the model zoo
// (bench/zoo/export.py writes bench/data/zoo/*.onnx; models whose file is missing are
// skipped with a note). Per model, each on an empty cache unless said:
//  - one unit: the whole graph as one translation unit (KILN_KERNELS=0, the layout before
//    kernels), cold;
//  - kernels: the module linked from its distinct kernels, compiled KILN_JOBS at a time, cold;
//  - kernels cached: the module again after its entry is removed but its kernels are kept
//    (what a second model with the same kernels pays: the binding and the link);
//  - warm hit: compile() with the module on disk (memo cleared): lookup, verify, dlopen;
//  - after: a second model compiled on a cache that holds a first model's kernels (pairs
//    below), with how many of its kernels it reused.
// Also prints nodes and distinct kernels per model: cold time follows the kernels.
// Usage: compile_bench [--reps N] [--models a,b,...]
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "compiler/compile.h"
#include "compiler/entries/background_stores.h"
#include "compiler/c/kernel_build.h"
#include "frontend/model_loader.h"
#include "runtime/io/npy.h"
#include "util/clock.h"
#include "util/strings.h"

using namespace kiln;
namespace fs = std::filesystem;

namespace {

struct Timed {
  double ms = 0;
  CompileInfo info;
};

fs::path fresh_cache(const std::string& name) {
  fs::path dir = fs::temp_directory_path() / ("kiln-compile-bench-" + name);
  wait_for_background_stores();  // nothing may still write into it
  fs::remove_all(dir);
  return dir;
}

Timed timed_compile(const Graph& g, const fs::path& cache, bool kernels) {
  clear_compile_memo();
  CompileOptions o;
  o.cache_dir = cache;
  o.kernel_units = kernels;
  auto t = Clock::now();
  Function f = compile(g, o);
  Timed r;
  r.ms = ms_since(t);
  r.info = f.info();
  return r;
}

// The best of `reps` cold compiles, each on an empty cache.
Timed cold(const Graph& g, const std::string& tag, bool kernels, int reps) {
  Timed best;
  for (int i = 0; i < reps; ++i) {
    Timed t = timed_compile(g, fresh_cache(tag), kernels);
    if (i == 0 || t.ms < best.ms) best = t;
  }
  return best;
}

struct Model {
  std::string name;
  fs::path file;
  fs::path input;  // a seeded input (.npy) beside it, and the expected output when there is one
  fs::path expected;
};

// Median run time of f on x over 7 runs (after one warm-up), and the largest difference
// from `expected` relative to its largest magnitude (-1 when there is none to compare with).
std::pair<double, double> run_time(const Function& f, const Tensor& x, const fs::path& expected) {
  std::vector<Tensor> y = f({x});
  std::vector<double> ms;
  for (int i = 0; i < 7; ++i) {
    auto t = Clock::now();
    y = f({x});
    ms.push_back(ms_since(t));
  }
  std::sort(ms.begin(), ms.end());
  double err = -1;
  if (!expected.empty() && fs::exists(expected)) {
    Tensor e = read_npy(expected);
    double diff = 0, mag = 0;
    for (int64_t i = 0; i < e.numel(); ++i) {
      diff = std::max(diff, std::abs(y[0].load(i) - e.load(i)));
      mag = std::max(mag, std::abs(e.load(i)));
    }
    err = diff / std::max(mag, 1e-30);
  }
  return {ms[ms.size() / 2], err};
}

Function compiled(const Graph& g, bool kernels) {
  CompileOptions o;
  o.cache_dir = fresh_cache("run");
  o.kernel_units = kernels;
  return compile(g, o);
}

}  // namespace

int main(int argc, char** argv) {
  int reps = 1;
  std::vector<std::string> only;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--reps" && i + 1 < argc) {
      reps = std::max(1, std::atoi(argv[++i]));
    } else if (a == "--models" && i + 1 < argc) {
      std::string list = argv[++i];
      for (size_t at = 0; at <= list.size();) {
        size_t comma = std::min(list.find(',', at), list.size());
        only.push_back(list.substr(at, comma - at));
        at = comma + 1;
      }
    } else {
      std::fprintf(stderr, "usage: compile_bench [--reps N] [--models a,b,...]\n");
      return 2;
    }
  }
  const fs::path zoo = fs::path(KILN_BENCH_DATA) / "zoo";
  const fs::path mlp = KILN_MLP_JSON;
  std::vector<Model> models{{"mlp", mlp, mlp.parent_path() / "input.npy", mlp.parent_path() / "expected.npy"}};
  for (const char* n : {"resnet18", "resnet34", "mobilenet_v2", "efficientnet_b0", "shufflenet_v2",
                        "squeezenet", "mnasnet", "vit_small", "gpt_decoder"}) {
    models.push_back({n, zoo / (std::string(n) + ".onnx"), zoo / (std::string(n) + ".input.npy"),
                      zoo / (std::string(n) + ".expected.npy")});
  }
  if (!only.empty()) {
    std::erase_if(models, [&](const Model& m) {
      return std::find(only.begin(), only.end(), m.name) == only.end();
    });
  }
  std::printf("compile_bench: %d compile jobs (KILN_JOBS), best of %d cold compile(s) each\n\n",
              compile_jobs(), reps);
  std::printf("%-16s %5s %7s | %9s | %9s %6s | %9s %6s | %9s | %s\n", "model", "nodes", "kernels",
              "one unit", "kernels", "ratio", "k. cached", "/cold", "warm hit", "kernel compiles");
  std::vector<std::pair<std::string, Graph>> loaded;
  std::vector<std::string> runs;
  for (const auto& m : models) {
    if (!fs::exists(m.file)) {
      std::printf("%-16s (missing %s: run bench/zoo/export.py)\n", m.name.c_str(), m.file.c_str());
      continue;
    }
    Graph g("");
    try {
      g = load_model(m.file);
      (void)optimized_graph(g);
    } catch (const std::exception& e) {
      std::printf("%-16s not compiled: %s\n", m.name.c_str(), e.what());
      continue;
    }
    const Timed one = cold(g, m.name + "-one", false, reps);
    const Timed k = cold(g, m.name + "-k", true, reps);
    // Kernels cached, module not: remove the module's entry, keep the kernels.
    const fs::path cache = fresh_cache(m.name + "-k");
    timed_compile(g, cache, true);
    Timed hit;
    Timed again;
    {
      Timed first = timed_compile(g, cache, true);  // a hit: finds the module's entry
      wait_for_background_stores();  // nothing may still write into it
      fs::remove_all(first.info.module_path.parent_path());
      again = timed_compile(g, cache, true);
      hit = timed_compile(g, cache, true);
    }
    std::string per;
    std::vector<std::pair<std::string, double>> kernel_ms = k.info.kernels.compile_ms;
    std::sort(kernel_ms.begin(), kernel_ms.end(),
              [](const auto& a, const auto& b) { return a.second > b.second; });
    for (size_t i = 0; i < kernel_ms.size() && i < 3; ++i) {
      per += (i ? ", " : "") + format_double(std::round(kernel_ms[i].second)) + " ms " +
             kernel_ms[i].first.substr(kernel_ms[i].first.find(' ') + 1);
    }
    const int nodes = static_cast<int>(optimized_graph(g).nodes().size());
    std::printf("%-16s %5d %7d | %7.0f ms | %7.0f ms %5.2fx | %7.0f ms %5.0f%% | %7.2f ms | %s\n",
                m.name.c_str(), nodes, k.info.kernels.kernels, one.ms, k.ms, one.ms / k.ms,
                again.ms, 100.0 * again.ms / k.ms, hit.ms, per.c_str());
    std::fflush(stdout);
    if (fs::exists(m.input)) {
      // Run time of both builds (the kernels read their sizes at run time), and the outputs
      // against the exporter's.
      const Tensor x = read_npy(m.input);
      auto [one_ms, one_err] = run_time(compiled(g, false), x, m.expected);
      auto [k_ms, k_err] = run_time(compiled(g, true), x, m.expected);
      runs.push_back(m.name + ": run " + format_double(std::round(one_ms * 100) / 100) + " ms one unit, " +
                     format_double(std::round(k_ms * 100) / 100) + " ms kernels (" +
                     format_double(std::round(1000 * k_ms / one_ms) / 1000) + "x)" +
                     (k_err >= 0 ? "; max |kiln - reference| / max |reference| = " +
                                       format_double(k_err) + " (kernels), " + format_double(one_err) +
                                       " (one unit)"
                                 : ""));
    }
    loaded.emplace_back(m.name, std::move(g));
  }

  // Second models: the first fills the cache with its kernels; the second compiles on it.
  const std::pair<const char*, const char*> pairs[] = {{"resnet18", "resnet34"},
                                                       {"resnet34", "resnet18"},
                                                       {"mobilenet_v2", "mnasnet"},
                                                       {"mobilenet_v2", "efficientnet_b0"}};
  std::printf("\n%-34s | %9s | %9s %6s | %s\n", "second model (after first)", "own cold",
              "after", "/cold", "kernels reused");
  for (const auto& [first, second] : pairs) {
    const Graph* a = nullptr;
    const Graph* b = nullptr;
    for (const auto& [n, g] : loaded) {
      if (n == first) a = &g;
      if (n == second) b = &g;
    }
    if (!a || !b) continue;
    const Timed own = cold(*b, std::string(second) + "-k", true, reps);
    const fs::path cache = fresh_cache(std::string(first) + "-then-" + second);
    timed_compile(*a, cache, true);
    const Timed after = timed_compile(*b, cache, true);
    std::printf("%-34s | %7.0f ms | %7.0f ms %5.0f%% | %d of %d\n",
                (std::string(second) + " (after " + first + ")").c_str(), own.ms, after.ms,
                100.0 * after.ms / own.ms, after.info.kernels.reused, after.info.kernels.kernels);
    std::fflush(stdout);
  }
  std::printf("\nrun time (median of 7, %s engine workers):\n", std::getenv("KILN_ENGINE_WORKERS") ? std::getenv("KILN_ENGINE_WORKERS") : "default");
  for (const auto& r : runs) std::printf("  %s\n", r.c_str());
  wait_for_background_stores();  // nothing may still write into them
  for (const auto& e : fs::directory_iterator(fs::temp_directory_path())) {
    if (e.path().filename().string().rfind("kiln-compile-bench-", 0) == 0) fs::remove_all(e.path());
  }
  return 0;
}
