#pragma once
// The C linker: stitches every node's fragment into one C11 module with the kiln ABI —
// deduplicated includes and support code, one state struct, one thunk per node (each with
// a banner and one cleanup path), and the exported kiln_module() table.
#include <string>
#include <vector>

#include "ctemplate/code_writer.h"
#include "graph/graph.h"

namespace kiln {

struct LinkedModule {
  CodeWriter code;                       // source text plus its source map
  std::vector<std::string> libraries;    // -l names, deduplicated
  std::vector<std::string> compile_args; // from ops' c_compile_args, deduplicated
  std::vector<int> thunk_nodes;          // thunk i runs node thunk_nodes[i]
};

// `key` is embedded in the module so a loaded module can say what it was built from.
LinkedModule link_c_module(const Graph& graph, const std::string& key);

// Identifies the code the linker itself adds (its own layout, the module ABI header and every
// prelude): part of every cache key, so changing any of them invalidates old modules.
const std::string& codegen_fingerprint();

// Banner text for a node: "node 7: add(t3, b1) -> t4  [float32, (?, 256)]".
std::string node_banner(const Node& node);

}  // namespace kiln
