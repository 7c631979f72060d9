#include "compiler/graph_key.h"

#include <map>

#include "compiler/c_linker.h"
#include "compiler/toolchain.h"
#include "runtime/module_abi.h"
#include "util/sha256.h"
#include "util/strings.h"

namespace kiln {
namespace {

// Stable names for variables: by position, never by user-given name or address.
std::map<const Variable*, std::string> variable_refs(const Graph& graph) {
  std::map<const Variable*, std::string> ref;
  for (size_t i = 0; i < graph.inputs().size(); ++i) ref[graph.inputs()[i]] = "i" + std::to_string(i);
  for (size_t i = 0; i < graph.constants().size(); ++i) ref[graph.constants()[i]] = "c" + std::to_string(i);
  for (const auto& node : graph.nodes()) {
    for (size_t k = 0; k < node->outputs.size(); ++k) {
      ref[node->outputs[k]] = "n" + std::to_string(node->id) + "." + std::to_string(k);
    }
  }
  return ref;
}

}  // namespace

std::string graph_signature(const Graph& graph) {
  auto ref = variable_refs(graph);
  std::string s;
  for (const Variable* v : graph.inputs()) s += "input " + ref.at(v) + " " + v->type.to_string() + "\n";
  for (const Variable* v : graph.constants()) {
    s += "constant " + ref.at(v) + " " + v->type.to_string();
    if (v->type.rank() == 0 && v->value) {
      // Inlined into the source: the value is part of the code.
      s += " value=" + std::to_string(v->value->load_int(0)) + "/" + format_double(v->value->load(0));
    }
    s += "\n";
  }
  for (const auto& node : graph.nodes()) {
    auto version = node->op->cache_version();
    s += "node " + std::to_string(node->id) + " " + node->op->name() + " " + attrs_to_string(node->op->props()) +
         " v=" + (version ? std::to_string(*version) : "none") + " in=";
    for (const auto* v : node->inputs) s += ref.at(v) + ":" + v->type.to_string() + ",";
    s += " out=";
    for (const auto* v : node->outputs) s += v->type.to_string() + ",";
    s += "\n";
  }
  for (const auto* v : graph.outputs()) s += "output " + ref.at(v) + "\n";
  return s;
}

std::string graph_family(const Graph& graph) {
  auto ref = variable_refs(graph);
  std::string s = "inputs=" + std::to_string(graph.inputs().size()) +
                  " constants=" + std::to_string(graph.constants().size()) + "\n";
  for (const auto& node : graph.nodes()) {
    s += node->op->name() + "(";
    for (const auto* v : node->inputs) s += ref.at(v) + ",";
    s += ")\n";
  }
  for (const auto* v : graph.outputs()) s += "output " + ref.at(v) + "\n";
  return sha256_hex(s);
}

ModuleKey module_key(const Graph& graph, const KeyComponents& toolchain_components) {
  ModuleKey k;
  k.components.emplace_back("abi", std::to_string(KILN_ABI_VERSION));
  k.components.emplace_back("codegen", codegen_fingerprint());
  k.components.insert(k.components.end(), toolchain_components.begin(), toolchain_components.end());
  k.components.emplace_back("graph", graph_signature(graph));
  k.key = artifact_key(k.components);
  k.family = graph_family(graph);
  return k;
}

ModuleKey module_key(const Graph& graph, const Toolchain& toolchain) {
  return module_key(graph, toolchain.key_components());
}

}  // namespace kiln
