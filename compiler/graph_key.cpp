#include "compiler/graph_key.h"

#include <map>
#include <vector>

#include "compiler/c/linker.h"
#include "compiler/c/toolchain.h"
#include "ops/library/library_op.h"
#include "runtime/module/module_abi.h"
#include "util/sha256.h"
#include "util/strings.h"

namespace kiln {
namespace {

// Stable names for variables: by position, never by user-given name or address. Indexed by
// Variable::id (dense within a graph); each entry is "ref" and its type, rendered once.
struct Refs {
  std::vector<std::string> ref, typed;  // "n3.0" and "n3.0:float32 (?, 4)"
  const std::string& of(const Variable* v) const { return ref.at(static_cast<size_t>(v->id)); }
  const std::string& typed_of(const Variable* v) const {
    return typed.at(static_cast<size_t>(v->id));
  }
};

Refs variable_refs(const Graph& graph) {
  Refs r;
  auto set = [&](const Variable* v, std::string name) {
    auto i = static_cast<size_t>(v->id);
    if (i >= r.ref.size()) {
      r.ref.resize(i + 1);
      r.typed.resize(i + 1);
    }
    r.typed[i] = name + ":" + v->type.to_string();
    r.ref[i] = std::move(name);
  };
  for (size_t i = 0; i < graph.inputs().size(); ++i)
    set(graph.inputs()[i], "i" + std::to_string(i));
  for (size_t i = 0; i < graph.constants().size(); ++i)
    set(graph.constants()[i], "c" + std::to_string(i));
  for (const auto& node : graph.nodes()) {
    for (size_t k = 0; k < node->outputs.size(); ++k) {
      set(node->outputs[k], "n" + std::to_string(node->id) + "." + std::to_string(k));
    }
  }
  return r;
}

std::string signature_of(const Graph& graph, const Refs& refs) {
  std::string s;
  s.reserve(64 * (graph.nodes().size() + graph.inputs().size() + graph.constants().size() + 1));
  for (const Variable* v : graph.inputs())
    s.append("input ")
        .append(refs.of(v))
        .append(" ")
        .append(v->type.to_string())
        .append(v->on_device ? " on_device\n" : "\n");
  for (const Variable* v : graph.constants()) {
    s.append("constant ").append(refs.of(v)).append(" ").append(v->type.to_string());
    if (is_inlined_scalar(v)) {
      // Inlined into the source: the value is part of the code.
      s.append(" value=")
          .append(std::to_string(v->value->load_int(0)))
          .append("/")
          .append(format_double(v->value->load(0)));
    } else if (v->parameter) {
      s.append(" parameter");
    } else if (v->value) {
      // The rewrites may read a plain constant's values (folding, x * 1, merging equal
      // constants), so they are part of the code; a parameter's never are.
      const Tensor t = v->value->contiguous();
      s.append(" bytes=").append(
          sha256_hex(std::string_view(static_cast<const char*>(t.data()), t.nbytes())));
    }
    s.append("\n");
  }
  for (const auto& node : graph.nodes()) {
    auto version = node->op->cache_version();
    s.append("node ")
        .append(std::to_string(node->id))
        .append(" ")
        .append(node->op->name())
        .append(" ");
    s.append(attrs_to_string(node->op->props()))
        .append(" v=")
        .append(version ? std::to_string(*version) : "none");
    s.append(" in=");
    for (const auto* v : node->inputs) s.append(refs.typed_of(v)).append(",");
    s.append(" out=");
    for (const auto* v : node->outputs)
      s.append(refs.typed_of(v).substr(refs.of(v).size() + 1)).append(",");
    s.append("\n");
  }
  for (const auto* v : graph.outputs()) s.append("output ").append(refs.of(v)).append("\n");
  return s;
}

std::string family_of(const Graph& graph, const Refs& refs) {
  std::string s = "inputs=" + std::to_string(graph.inputs().size()) +
                  " constants=" + std::to_string(graph.constants().size()) + "\n";
  for (const auto& node : graph.nodes()) {
    s.append(node->op->name()).append("(");
    for (const auto* v : node->inputs) s.append(refs.of(v)).append(",");
    s.append(")\n");
  }
  for (const auto* v : graph.outputs()) s.append("output ").append(refs.of(v)).append("\n");
  return sha256_hex(s);
}

}  // namespace

std::string graph_signature(const Graph& graph) {
  return signature_of(graph, variable_refs(graph));
}
std::string graph_family(const Graph& graph) { return family_of(graph, variable_refs(graph)); }

ModuleKey module_key(const Graph& graph, const KeyComponents& toolchain_components,
                     const std::string& codegen) {
  ModuleKey k;
  k.components.emplace_back("abi", std::to_string(KILN_ABI_VERSION));
  k.components.emplace_back("codegen", codegen.empty() ? codegen_fingerprint() : codegen);
  k.components.insert(k.components.end(), toolchain_components.begin(), toolchain_components.end());
  Refs refs = variable_refs(graph);
  k.components.emplace_back("graph", signature_of(graph, refs));
  // A custom op's code lives in its library: the file's hash is part of the key, so a
  // rebuilt library recompiles exactly the modules that use its ops.
  std::map<std::string, std::string> libraries;
  for (const auto& node : graph.nodes()) {
    if (const auto* op = dynamic_cast<const LibraryOp*>(node->op.get())) {
      const OpLibrary& lib = *op->def().library;
      libraries[kOpLibraryComponent + lib.name] = "abi " + lib.abi() + " sha256 " + lib.sha256;
    }
  }
  for (const auto& [name, value] : libraries) k.components.emplace_back(name, value);
  k.key = artifact_key(k.components);
  k.family = family_of(graph, refs);
  return k;
}

ModuleKey module_key(const Graph& graph, const Toolchain& toolchain) {
  return module_key(graph, toolchain.key_components());
}

}  // namespace kiln
