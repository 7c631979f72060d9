// How loading, keying, rewriting and generating source scale with a graph's size: a chain of
// N nodes (alternating relu and softmax over a (?, 16) input, so neither fusion nor folding
// shrinks it) written as a kiln JSON model, then loaded, keyed (module_key), rewritten
// (optimized_graph) and linked (generate_source), each phase timed alone. Prints per-node
// microseconds per phase and size, and each phase's growth from the smallest size to the
// largest against the growth in nodes: 1.0 is linear; a quadratic phase reads about as much
// as the nodes grew.
// Usage: graph_scaling [--sizes 10000,20000,40000,100000] [--smoke]
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "compiler/compile.h"
#include "compiler/graph_key.h"
#include "compiler/c/toolchain.h"
#include "frontend/json/json_model.h"
#include "util/clock.h"

using namespace kiln;

namespace {

std::string chain_model(int n) {
  std::string s = R"({"format": "kiln-graph", "version": 1, "name": "chain", "inputs": [)"
                  R"({"name": "x", "dtype": "float32", "shape": [null, 16]}], "nodes": [)";
  std::string prev = "x";
  for (int i = 0; i < n; ++i) {
    const std::string out = "v" + std::to_string(i);
    s += std::string(i ? "," : "") + "\n{\"op\": \"" + (i % 2 ? "softmax" : "relu") +
         "\", \"inputs\": [\"" + prev + "\"], \"outputs\": [\"" + out + "\"]}";
    prev = out;
  }
  return s + "], \"outputs\": [\"" + prev + "\"]}";
}

struct Phases {
  double load = 0, key = 0, rewrite = 0, source = 0;
};

Phases measure(int n) {
  const std::string text = chain_model(n);
  Phases p;
  auto t = Clock::now();
  Graph g = parse_json_model(text, "chain.json", ".");
  p.load = ms_since(t);
  t = Clock::now();
  const ModuleKey key = module_key(g, Toolchain::get(ToolchainConfig{}));
  p.key = ms_since(t);
  t = Clock::now();
  Graph optimized = optimized_graph(g);
  p.rewrite = ms_since(t);
  t = Clock::now();
  const std::string source = generate_source(g);  // rewrites again, then links
  p.source = ms_since(t) - p.rewrite;
  if (key.key.empty() || source.empty() || optimized.nodes().empty()) std::abort();
  return p;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<int> sizes{10000, 20000, 40000, 100000};
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--smoke") {
      sizes = {500, 2000};
    } else if (a == "--sizes" && i + 1 < argc) {
      sizes.clear();
      const std::string list = argv[++i];
      for (size_t at = 0; at < list.size();) {
        size_t comma = list.find(',', at);
        if (comma == std::string::npos) comma = list.size();
        const int n = std::atoi(list.substr(at, comma - at).c_str());
        if (n < 2) {
          std::fprintf(stderr, "graph_scaling: bad size in --sizes %s\n", list.c_str());
          return 2;
        }
        sizes.push_back(n);
        at = comma + 1;
      }
    } else {
      std::fprintf(stderr, "usage: graph_scaling [--sizes N,N,...] [--smoke]\n");
      return 2;
    }
  }
  Toolchain::get(ToolchainConfig{});  // the compiler probe, once, outside every timing
  std::printf("%8s %12s %12s %12s %12s   (microseconds per node)\n", "nodes", "load", "key",
              "rewrite", "source");
  std::vector<Phases> per_node;
  for (int n : sizes) {
    const Phases p = measure(n);
    const double k = 1000.0 / n;
    per_node.push_back({p.load * k, p.key * k, p.rewrite * k, p.source * k});
    std::printf("%8d %12.2f %12.2f %12.2f %12.2f\n", n, p.load * k, p.key * k, p.rewrite * k,
                p.source * k);
  }
  if (sizes.size() >= 2) {
    // Total time grew by (per-node growth) x (node growth); per-node growth 1.0 is linear.
    const Phases& a = per_node.front();
    const Phases& b = per_node.back();
    const double grew = static_cast<double>(sizes.back()) / sizes.front();
    std::printf(
        "from %d to %d nodes (x%.1f), time per node grew: load x%.2f, key x%.2f, "
        "rewrite x%.2f, source x%.2f (a quadratic phase: about x%.1f)\n",
        sizes.front(), sizes.back(), grew, b.load / a.load, b.key / a.key, b.rewrite / a.rewrite,
        b.source / a.source, grew);
  }
  return 0;
}
