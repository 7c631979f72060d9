#include "compiler/graph_key.h"

#include <cstring>
#include <map>

#include "runtime/module_abi.h"
#include "util/sha256.h"
#include "util/strings.h"

namespace kiln {

std::string graph_signature(const Graph& graph) {
  std::map<const Variable*, std::string> ref;
  std::string s = "kiln-graph-v1\n";
  for (size_t i = 0; i < graph.inputs().size(); ++i) {
    const Variable* v = graph.inputs()[i];
    ref[v] = "i" + std::to_string(i);
    s += "input " + ref[v] + " " + v->type.to_string() + "\n";
  }
  for (size_t i = 0; i < graph.constants().size(); ++i) {
    const Variable* v = graph.constants()[i];
    ref[v] = "c" + std::to_string(i);
    s += "constant " + ref[v] + " " + v->type.to_string();
    if (v->type.rank() == 0 && v->value) {
      // Inlined into the source: the value is part of the code.
      s += " value=" + std::to_string(v->value->load_int(0)) + "/" + format_double(v->value->load(0));
    }
    s += "\n";
  }
  for (const auto& node : graph.nodes()) {
    for (size_t k = 0; k < node->outputs.size(); ++k) {
      ref[node->outputs[k]] = "n" + std::to_string(node->id) + "." + std::to_string(k);
    }
    auto version = node->op->cache_version();
    s += "node " + std::to_string(node->id) + " " + node->op->name() + " " +
         attrs_to_string(node->op->props()) + " v=" + (version ? std::to_string(*version) : "none") +
         " in=";
    for (const auto* v : node->inputs) s += ref.at(v) + ":" + v->type.to_string() + ",";
    s += " out=";
    for (const auto* v : node->outputs) s += v->type.to_string() + ",";
    s += "\n";
  }
  for (const auto* v : graph.outputs()) s += "output " + ref.at(v) + "\n";
  return s;
}

std::string module_key(const Graph& graph, const std::string& toolchain_fingerprint) {
  Sha256 h;
  h.update("abi=" + std::to_string(KILN_ABI_VERSION) + "\n");
  h.update(graph_signature(graph));
  h.update("toolchain\n" + toolchain_fingerprint + "\n");
  return h.hex_digest();
}

}  // namespace kiln
