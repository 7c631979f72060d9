#pragma once
// The rewrite pipeline: a plain list of passes run in order. A spec such as "-fusion,-cse"
// (KILN_PASSES) disables passes; "none" runs none. With KILN_DEBUG >= 2 the graph is
// printed after each pass.
#include <functional>
#include <string>
#include <vector>

#include "graph/graph.h"

namespace kiln {

struct PassInfo {
  const char* name;
  Graph (*run)(const Graph&);
  int version;
  // The one device whose graphs the pass rewrites (it makes forms only that device's code
  // has: "cpu" for blocked layouts, packed weights, fused norms and attention); nullptr for
  // every device.
  const char* device = nullptr;
  // Off unless the spec names it ("bf16"): a pass that changes a model's numbers (bfloat16
  // products) runs only when asked for.
  bool opt_in = false;
};

const std::vector<PassInfo>& all_passes();

// The passes a spec enables for `device` ("": every pass), in pipeline order: all but the
// opt-in ones, less those named "-name", plus the opt-in ones named "name". Throws
// UserError naming an unknown pass and `origin` (e.g. "KILN_PASSES").
std::vector<PassInfo> select_passes(const std::string& spec, const std::string& origin,
                                    const std::string& device = "");

// Runs the passes `spec` enables for `device` ("": every pass); nullopt spec: $KILN_PASSES,
// else all.
Graph optimize(const Graph& graph, const std::optional<std::string>& spec = std::nullopt,
               const std::string& device = "");
// The same, calling `observe` after each pass with the graph before and after it and the
// pass's time (kiln report shows what every pass changed).
using PassObserver =
    std::function<void(const PassInfo& pass, const Graph& before, const Graph& after, double ms)>;
Graph optimize(const Graph& graph, const std::optional<std::string>& spec,
               const PassObserver& observe, const std::string& device = "");

// The passes a spec enables with their versions, "fold@2,simplify@1,...", or "none": the
// cache key's `passes` component.
std::string passes_component(const std::string& spec, const std::string& origin,
                             const std::string& device = "");

// The spec in effect: `spec` if given, else $KILN_PASSES, else "" (all).
std::string passes_spec(const std::optional<std::string>& spec);

}  // namespace kiln
