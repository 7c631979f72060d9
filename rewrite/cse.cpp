// Common-subexpression merge: two nodes with equal ops (name and props) reading the same
// variables compute the same values, so the second reads the first's outputs. Small plain
// constants with equal contents merge too; parameters never do (their values may change
// without a recompile, so the graph's structure must not depend on them).
#include <cstring>
#include <map>

#include "rewrite/graph_copy.h"
#include "rewrite/passes.h"

namespace kiln {
namespace {

constexpr int64_t kMaxMergeElements = 4096;

std::string constant_key(const Variable* v) {
  const Tensor& t = *v->value;
  std::string key = v->type.to_string() + "|";
  key.append(static_cast<const char*>(t.data()), t.nbytes());
  return key;
}

}  // namespace

Graph merge_common(const Graph& graph) {
  GraphCopy copy(graph);
  std::map<std::string, Variable*> constants;
  for (const Variable* c : graph.constants()) {
    if (c->parameter || !c->value || c->value->numel() > kMaxMergeElements) continue;
    auto [it, fresh] = constants.emplace(constant_key(c), nullptr);
    if (fresh) {
      it->second = copy.map(c);
    } else {
      copy.replace(c, it->second);
    }
  }
  std::map<std::string, const Node*> seen;
  for (const auto& node : graph.nodes()) {
    std::vector<Variable*> inputs = copy.map(node->inputs);
    std::string key = node->op->describe() + "(";
    for (const Variable* v : inputs) key += std::to_string(v->id) + ",";
    auto [it, fresh] = seen.emplace(key, node.get());
    if (fresh) {
      copy.copy(*node);
      continue;
    }
    for (size_t i = 0; i < node->outputs.size(); ++i) {
      copy.replace(node->outputs[i], copy.map(it->second->outputs[i]));
    }
  }
  return copy.finish();
}

}  // namespace kiln
