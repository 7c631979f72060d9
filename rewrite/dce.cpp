// Dead-code removal: only nodes some graph output depends on are kept. Inputs always stay
// (they are the function's signature); unused constants drop because copies make them on
// first use.
#include <unordered_set>

#include "rewrite/graph_copy.h"
#include "rewrite/passes.h"

namespace kiln {

Graph remove_dead(const Graph& graph) {
  std::unordered_set<const Node*> live;
  std::unordered_set<const Variable*> needed(graph.outputs().begin(), graph.outputs().end());
  const auto& nodes = graph.nodes();
  for (auto it = nodes.rbegin(); it != nodes.rend(); ++it) {
    const Node& node = **it;
    bool wanted = false;
    for (const Variable* v : node.outputs) wanted = wanted || needed.count(v);
    if (!wanted) continue;
    live.insert(&node);
    needed.insert(node.inputs.begin(), node.inputs.end());
  }
  GraphCopy copy(graph);
  for (const auto& node : nodes) {
    if (live.count(node.get())) copy.copy(*node);
  }
  return copy.finish();
}

}  // namespace kiln
