// From a model file to a callable, in fresh processes, phase by phase, beside onnxruntime's
// session creation for the same file in the same run. Per model (the zoo, bench/zoo/export.py,
// and the MLP example):
//  - cold: an empty cache, waiting for the module (--no-generic-start); the child process
//    times loading the file, the key, the rewrites,
//    codegen, the kernel compiles, the binding and link, the module load, and preparing the
//    weights; then the first run (the median of --repeat fresh processes, each on an empty
//    cache);
//  - hit: the median of --repeat fresh processes on the populated cache (the same phases: the
//    model comes back from its cache entry, the module and the prepared weights are mapped);
//  - gen: cold again, the default path: the first run takes the generic tier
//    (CompileOptions::generic_start) while the module compiles in the background; the phases
//    shown are that compile's;
//  - onnxruntime: the median session creation of --repeat fresh Python processes, and the
//    first run after it (bench/ort_start.py; skipped without the PyTorch environment).
// Prints ratios against onnxruntime measured in the same run; never asserts a time.
// Usage: start_bench [--repeat N] [--zoo tuned|broad] [--models a,b,...] [--smoke]
//   --zoo broad: every model of bench/data/broad (bench/zoo/broad.py: timm and transformers
//   architectures nobody tuned kiln for) instead of the MLP and the tuned zoo.
//        start_bench --child MODEL INPUT.npy   (one fresh-process measurement; internal)
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "compiler/compile.h"
#include "compiler/entries/background_stores.h"
#include "compiler/entries/model_entries.h"
#include "compiler/subprocess.h"
#include "compiler/tiered_function.h"
#include "frontend/model_loader.h"
#include "runtime/io/npy.h"
#include "util/clock.h"
#include "util/strings.h"

using namespace kiln;
namespace fs = std::filesystem;

namespace {

// The child: one model, file to callable and its first run, as "name=ms" pairs on one line.
// With `generic_start`, the first run takes the generic tier while the module compiles in
// the background (its phases are the background compile's, waited for after the run).
int child(const fs::path& model, const fs::path& input, bool generic_start) {
  auto t0 = Clock::now();
  Graph g = load_model(model);
  const double load = ms_since(t0);
  CompileOptions options;
  options.generic_start = generic_start;
  TieredFunction f(g, options);
  const double total = ms_since(t0);
  double first = -1;
  if (!input.empty() && fs::exists(input)) {
    const Tensor x = read_npy(input);
    auto t1 = Clock::now();
    f({x});
    first = ms_since(t1);
  }
  const Tier tier = f.last_tier();
  const CompileInfo& info = f.compiled().info();
  const PhaseTimes& p = info.times;
  std::printf(
      "tier=%s cache=%s load=%.3f key=%.3f lookup=%.3f rewrite=%.3f codegen=%.3f kernels=%.3f "
      "binding=%.3f link=%.3f module=%.3f prepare=%.3f total=%.3f first=%.3f\n",
      to_string(tier), to_string(info.cache), load, p.key_ms, p.lookup_ms, p.rewrite_ms,
      p.codegen_ms, p.kernels_ms, p.binding_ms, p.link_ms, p.load_ms, p.prepare_ms, total, first);
  // The model entry is written behind the compile: the next process must find it.
  wait_for_background_stores();
  return 0;
}

using Phases = std::map<std::string, std::string>;

Phases parse_line(const std::string& out) {
  Phases p;
  std::istringstream in(out.substr(out.rfind("cache=") == std::string::npos
                                       ? 0
                                       : std::min(out.rfind("cache="), out.rfind("tier="))));
  for (std::string kv; in >> kv;) {
    const size_t eq = kv.find('=');
    if (eq != std::string::npos) p[kv.substr(0, eq)] = kv.substr(eq + 1);
  }
  return p;
}

double num(const Phases& p, const std::string& k) {
  auto it = p.find(k);
  return it == p.end() ? -1 : std::atof(it->second.c_str());
}

std::string self_path() { return fs::read_symlink("/proc/self/exe").string(); }

std::optional<Phases> run_child(const fs::path& model, const fs::path& input, const fs::path& cache,
                                bool generic_start = false) {
  ProcessResult r =
      run_process({"/usr/bin/env", "KILN_CACHE_DIR=" + cache.string(), self_path(),
                   generic_start ? "--child-generic" : "--child", model.string(), input.string()});
  if (r.exit_code != 0 || r.out.find("cache=") == std::string::npos) {
    std::fprintf(stderr, "%s: child failed (%d): %s\n", model.c_str(), r.exit_code, r.err.c_str());
    return std::nullopt;
  }
  return parse_line(r.out);
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? -1 : v[v.size() / 2];
}

// Median of the numbers a key takes over several runs.
Phases median_of(const std::vector<Phases>& runs) {
  Phases out = runs.at(0);
  for (auto& [k, v] : out) {
    if (k == "cache" || k == "tier") continue;
    std::vector<double> xs;
    for (const Phases& r : runs) xs.push_back(num(r, k));
    v = format_double(median(xs));
  }
  return out;
}

// onnxruntime's session creation and first run, each in a fresh Python process.
std::optional<std::pair<double, double>> ort_start(const fs::path& model, const fs::path& input,
                                                   int repeat) {
  std::vector<double> session, first;
  for (int i = 0; i < repeat; ++i) {
    ProcessResult r = run_process({KILN_BENCH_DIR "/with-torch", KILN_BENCH_DIR "/ort_start.py",
                                   model.string(), input.string()});
    if (r.exit_code == 77) return std::nullopt;  // no PyTorch environment
    if (r.exit_code != 0) {
      std::fprintf(stderr, "%s: onnxruntime failed: %s\n", model.c_str(), r.err.c_str());
      return std::nullopt;
    }
    Phases p = parse_line("cache=ort " + r.out.substr(r.out.rfind("session=")));
    session.push_back(num(p, "session"));
    first.push_back(num(p, "first"));
  }
  return std::make_pair(median(session), median(first));
}

}  // namespace

int main(int argc, char** argv) {
  if (argc >= 3 && (std::string(argv[1]) == "--child" || std::string(argv[1]) == "--child-generic"))
    return child(argv[2], argc >= 4 ? fs::path(argv[3]) : fs::path(),
                 std::string(argv[1]) == "--child-generic");
  int repeat = 5;
  bool smoke = false;
  std::string zoo_name = "tuned";
  std::vector<std::string> only;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--repeat" && i + 1 < argc) {
      repeat = std::max(1, std::atoi(argv[++i]));
    } else if (a == "--smoke") {
      smoke = true;
    } else if (a == "--zoo" && i + 1 < argc &&
               (std::string(argv[i + 1]) == "tuned" || std::string(argv[i + 1]) == "broad")) {
      zoo_name = argv[++i];
    } else if (a == "--models" && i + 1 < argc) {
      const std::string list = argv[++i];
      for (size_t at = 0; at <= list.size();) {
        const size_t comma = std::min(list.find(',', at), list.size());
        only.push_back(list.substr(at, comma - at));
        at = comma + 1;
      }
    } else {
      std::fprintf(stderr,
                   "usage: start_bench [--repeat N] [--zoo tuned|broad] [--models a,b,...] "
                   "[--smoke]\n");
      return 2;
    }
  }
  if (smoke) {
    repeat = 1;
    if (only.empty()) only = {"mlp"};
  }
  const fs::path ex = KILN_EXAMPLES_DIR;
  std::vector<std::pair<std::string, std::pair<fs::path, fs::path>>> models;
  std::vector<std::string> names;
  fs::path zoo = fs::path(KILN_BENCH_DATA) / "zoo";
  if (zoo_name == "broad") {
    zoo = fs::path(KILN_BENCH_DATA) / "broad";
    std::error_code ec;
    for (const auto& e : fs::directory_iterator(zoo, ec)) {
      if (e.path().extension() == ".onnx") names.push_back(e.path().stem().string());
    }
    std::sort(names.begin(), names.end());
    if (names.empty())
      std::printf("(no models in %s: run bench/zoo/run --zoo broad)\n", zoo.c_str());
  } else {
    models.push_back({"mlp", {ex / "onnx/mlp/model.onnx", ex / "onnx/mlp/x.npy"}});
    names = {"resnet18",   "resnet34", "mobilenet_v2", "efficientnet_b0", "shufflenet_v2",
             "squeezenet", "mnasnet",  "vit_small",    "gpt_decoder"};
  }
  for (const std::string& n : names)
    models.push_back({n, {zoo / (n + ".onnx"), zoo / (n + ".input.npy")}});
  if (!only.empty()) {
    std::erase_if(models, [&](const auto& m) {
      return std::find(only.begin(), only.end(), m.first) == only.end();
    });
  }
  std::printf(
      "start_bench: file to callable in fresh processes; cold, hit and onnxruntime: median of "
      "%d\n",
      repeat);
  std::printf("%-20s %-5s | %7s %7s %7s %7s %7s %7s %7s | %8s %8s | %8s %8s | %6s %6s\n", "model",
              "", "load", "rewrite", "codegen", "kernels", "link", "module", "prepare", "callable",
              "+1st run", "ort sess", "+1st run", "ratio", "1st");
  std::vector<double> hit_ratios, first_ratios, generic_ratios;
  for (const auto& [name, files] : models) {
    const auto& [model, input] = files;
    if (!fs::exists(model)) {
      std::printf("%-20s (missing %s: run bench/zoo/export.py)\n", name.c_str(), model.c_str());
      continue;
    }
    const fs::path cache = fs::temp_directory_path() / ("kiln-start-bench-" + name);
    // Cold compiles are as noisy as the machine: the median of --repeat, each on an empty
    // cache (the hits then use the last one's).
    std::vector<Phases> colds;
    for (int i = 0; i < repeat; ++i) {
      fs::remove_all(cache);
      if (std::optional<Phases> c = run_child(model, input, cache)) colds.push_back(*c);
    }
    if (colds.empty()) continue;
    const std::optional<Phases> cold = median_of(colds);
    std::vector<Phases> hits;
    for (int i = 0; i < repeat + 1; ++i) {
      // The first hit after a cold compile still hashes what the cold compile just wrote
      // (its change time is too recent to stamp); the hits a user sees afterwards are timed.
      std::optional<Phases> h = run_child(model, input, cache);
      if (h && i > 0) hits.push_back(*h);
    }
    if (hits.empty()) {
      if (std::optional<Phases> h = run_child(model, input, cache)) hits.push_back(*h);
    }
    if (hits.empty()) continue;
    const Phases hit = median_of(hits);
    // Cold again, the first run taking the generic tier while the module compiles.
    std::vector<Phases> gens;
    for (int i = 0; i < repeat; ++i) {
      fs::remove_all(cache);
      if (std::optional<Phases> c = run_child(model, input, cache, true)) gens.push_back(*c);
    }
    const auto ort = ort_start(model, input, repeat);
    const auto row = [&](const char* kind, const Phases& p, bool with_ort) {
      const double callable = num(p, "total"), first = callable + std::max(0.0, num(p, "first"));
      std::string ratio = "", first_ratio = "", ort_cols = "       -        -";
      if (with_ort && ort) {
        char buf[64];
        std::snprintf(buf, sizeof buf, "%8.1f %8.1f", ort->first, ort->first + ort->second);
        ort_cols = buf;
        ratio = format_double(std::round(100 * callable / ort->first) / 100);
        first_ratio = format_double(std::round(100 * first / (ort->first + ort->second)) / 100);
      }
      std::printf(
          "%-20s %-5s | %7.1f %7.1f %7.1f %7.1f %7.1f %7.1f %7.1f | %8.1f %8.1f | %s | %6s %6s\n",
          name.c_str(), kind, num(p, "load"), num(p, "rewrite"), num(p, "codegen"),
          num(p, "kernels"), num(p, "binding") + num(p, "link"), num(p, "module"),
          num(p, "prepare"), callable, first, ort_cols.c_str(), ratio.c_str(), first_ratio.c_str());
    };
    row("cold", *cold, true);
    row("hit", hit, true);
    if (!gens.empty()) row("gen", median_of(gens), true);
    if (ort) {
      hit_ratios.push_back(num(hit, "total") / ort->first);
      first_ratios.push_back((num(*cold, "total") + std::max(0.0, num(*cold, "first"))) /
                             (ort->first + ort->second));
      if (!gens.empty()) {
        const Phases g = median_of(gens);
        generic_ratios.push_back((num(g, "total") + std::max(0.0, num(g, "first"))) /
                                 (ort->first + ort->second));
      }
    }
    std::fflush(stdout);
    fs::remove_all(cache);
  }
  if (!hit_ratios.empty()) {
    std::printf(
        "\nmedian over models: a hit is %.2fx onnxruntime's session creation; a cold "
        "first result waiting for the module (cold rows) %.2fx onnxruntime's session creation "
        "plus first run\n",
        median(hit_ratios), median(first_ratios));
    if (!generic_ratios.empty()) {
      std::printf(
          "by default (gen rows: the generic tier answers while the module compiles), a cold "
          "first result is %.2fx onnxruntime's session creation plus first run\n",
          median(generic_ratios));
    }
  }
  return 0;
}
