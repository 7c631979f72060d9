#include "rewrite/pipeline.h"

#include <chrono>

#include <algorithm>
#include <cstdlib>
#include <sstream>

#include "rewrite/graph_copy.h"
#include "rewrite/passes.h"
#include "util/error.h"
#include "util/log.h"
#include "util/strings.h"

namespace kiln {
namespace {

std::vector<std::string> split_items(const std::string& spec) {
  std::vector<std::string> items;
  std::stringstream in(spec);
  std::string item;
  while (std::getline(in, item, ',')) {
    item.erase(0, item.find_first_not_of(" \t"));
    item.erase(item.find_last_not_of(" \t") + 1);
    items.push_back(item);
  }
  return items;
}

// The pipeline's first copy: it numbers the given graph's constants (their recipes).
Graph plain_copy(const Graph& graph) {
  GraphCopy copy(graph, true);
  for (const auto& node : graph.nodes()) copy.copy(*node);
  return copy.finish();
}

}  // namespace

const std::vector<PassInfo>& all_passes() {
  // Lowering first (the weight reorders it adds are then folded), folding and simplification
  // next, so fusion sees the smallest graph; weight packing once weights are final and before
  // epilogue fusion takes the gemm as its base; matmul operand views before fusion, so a scale
  // they take is not fused elsewhere first; attention after the views, which it reads its
  // operands through; reduction and epilogue fusion after elementwise fusion, so a whole chain
  // lands in the reduction or the epilogue; dead-code removal last, to drop what the others
  // orphaned (optimize also drops what the given graph left dead before the first pass: dce's
  // version covers both).
  // A pass's version goes up whenever what it makes of a graph changes.
  // clang-format off
  static const std::vector<PassInfo> passes = {
      {"bf16conv", bf16_convs, 1, "cpu", true},
      {"lower", lower_conv_transpose, 1},
      {"fold", fold_constants, 3},
      {"simplify", simplify, 7},
      {"cse", merge_common, 1},
      {"norm", fuse_layer_norm, 1, "cpu"},
      {"layout", layout_nchwc, 7, "cpu"},
      {"nhwc", layout_nhwc_int8, 4, "cpu"},
      {"winograd", winograd_convs, 2},
      {"pack", pack_weights, 7, "cpu"},
      {"bf16", bf16_products, 1, "cpu", true},
      {"views", view_matmul_operands, 2, "cpu"},
      {"attention", fuse_attention, 1, "cpu"},
      {"extrema", split_full_reductions, 1, "cpu"},
      {"fusion", fuse_elementwise, 3},
      {"reduction", fuse_reduce, 1, "cpu"},
      {"epilogue", fuse_epilogue, 5},
      {"dce", remove_dead, 2},
  };
  // clang-format on
  return passes;
}

std::string passes_spec(const std::optional<std::string>& spec) {
  if (spec) return *spec;
  const char* env = std::getenv("KILN_PASSES");
  return env ? env : "";
}

std::vector<PassInfo> select_passes(const std::string& spec, const std::string& origin,
                                    const std::string& device) {
  std::vector<std::string> names;
  for (const auto& p : all_passes()) names.emplace_back(p.name);
  std::vector<std::string> off, asked;
  bool none = false;
  for (const std::string& item : split_items(spec)) {
    if (item.empty() || item == "all") continue;
    if (item == "none" || item == "0") {
      none = true;
      continue;
    }
    std::string name = item[0] == '-' ? item.substr(1) : item;
    if (std::find(names.begin(), names.end(), name) == names.end()) {
      throw UserError(origin + ": unknown pass '" + name + "' (passes: " + join(names, ", ") +
                      "; write -name to disable one, none to disable all)");
    }
    const bool opt_in =
        std::find_if(all_passes().begin(), all_passes().end(), [&](const PassInfo& p) {
          return p.name == name;
        })->opt_in;
    if (item[0] != '-' && !opt_in) {
      throw UserError(origin + ": '" + item + "': write -" + item +
                      " to disable a pass (all run by default)");
    }
    (item[0] == '-' ? off : asked).push_back(name);
  }
  std::vector<PassInfo> on;
  if (none) return on;
  for (const auto& p : all_passes()) {
    const bool for_device = device.empty() || !p.device || device == p.device;
    const bool wanted = p.opt_in ? std::find(asked.begin(), asked.end(), p.name) != asked.end()
                                 : std::find(off.begin(), off.end(), p.name) == off.end();
    if (for_device && wanted) on.push_back(p);
  }
  return on;
}

std::string passes_component(const std::string& spec, const std::string& origin,
                             const std::string& device) {
  std::string out;
  for (const auto& p : select_passes(spec, origin, device)) {
    out.append(out.empty() ? "" : ",").append(p.name).append("@").append(std::to_string(p.version));
  }
  return out.empty() ? "none" : out;
}

Graph optimize(const Graph& graph, const std::optional<std::string>& spec,
               const std::string& device) {
  return optimize(graph, spec, nullptr, device);
}

Graph optimize(const Graph& graph, const std::optional<std::string>& spec,
               const PassObserver& observe, const std::string& device) {
  auto passes = select_passes(passes_spec(spec), spec ? "passes" : "KILN_PASSES", device);
  // Nodes nothing reads go first: a dead reader still counts as a use, and would keep a
  // product from taking the add after it as its epilogue (a graph built in code, such as
  // PyTorch's lowering, can leave a reshape nothing reads).
  Graph g = remove_dead(plain_copy(graph));
  for (const auto& pass : passes) {
    const auto t = std::chrono::steady_clock::now();
    Graph next = pass.run(g);
    const double ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t).count();
    if (observe) observe(pass, g, next, ms);
    if (debug_level() >= 1) {
      log_line("pass " + std::string(pass.name) + ": " + std::to_string(g.nodes().size()) + " -> " +
               std::to_string(next.nodes().size()) + " nodes, " + format_double(ms) + " ms");
    }
    g = std::move(next);
    if (debug_level() >= 2)
      log_line("after pass " + std::string(pass.name) + ":\n" + g.to_string());
  }
  return g;
}

}  // namespace kiln
