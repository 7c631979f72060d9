#pragma once
// The module key: SHA-256 over named components — the module ABI version, the code
// generators (ops, rewrites, linker, preludes), the toolchain, the rewrite passes with their
// versions, the device, and the signature of the graph as given (op names, props, cache
// versions, types, edges). It is computed from the graph alone, before any rewrite and
// without generating source. Variable names do not enter it, and neither do parameters'
// values (weights); a plain constant's values do, since the rewrites may read them.
#include <string>

#include "cache/entry_meta.h"
#include "graph/graph.h"

namespace kiln {

class Toolchain;

struct ModuleKey {
  std::string key;
  // Hash of the graph's structure alone (op names and edges): entries of "the same graph"
  // under other versions, dtypes, props or toolchains share it, which --explain uses.
  std::string family;
  KeyComponents components;
};

// Key components of custom-op libraries are named this plus the library's name.
inline constexpr const char* kOpLibraryComponent = "op_library ";

std::string graph_signature(const Graph& graph);  // one line per input, constant, node, output
std::string graph_family(const Graph& graph);
ModuleKey module_key(const Graph& graph, const Toolchain& toolchain);
// With explicit toolchain components and, optionally, codegen fingerprint (tests).
ModuleKey module_key(const Graph& graph, const KeyComponents& toolchain_components,
                     const std::string& codegen = {});

}  // namespace kiln
