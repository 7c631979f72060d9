#pragma once
// The C linker: stitches every node's fragment into one C11 module with the kiln ABI —
// deduplicated includes and support code, one state struct, one thunk per node (each with
// a banner and one cleanup path), and the exported kiln_module() table.
#include <string>
#include <string_view>
#include <vector>

#include "ctemplate/code_writer.h"
#include "graph/graph.h"

namespace kiln {

struct LinkedModule {
  CodeWriter code;                       // source text plus its source map
  std::vector<std::string> libraries;    // -l names, deduplicated
  std::vector<std::string> compile_args; // from ops' c_compile_args, deduplicated
  std::vector<int> thunk_nodes;          // thunk i runs node thunk_nodes[i]
  // Nodes placed on CUDA: their kernels as one CUDA translation unit (kernels.cu, with its
  // own source map), and the kernel table the host thunks launch by index.
  CodeWriter cuda;
  std::vector<std::string> kernel_names;    // per launch site: the enum names thunks use
  std::vector<std::string> kernel_symbols;  // the symbol each runs (identical kernels share one)
};

// `key` is embedded in the module so a loaded module can say what it was built from.
LinkedModule link_c_module(const Graph& graph, const std::string& key);

// Identifies the code generators: the linker's layout version, the module ABI header, every
// prelude, and a build-time hash of every source that emits or rewrites code (ops/, rewrite/,
// ctemplate/, graph/, the linker; cmake/GeneratorHash.cmake). Part of every cache key, so two
// kiln builds share modules only when their generators are byte-identical; an op's
// cache_version remains for op libraries built apart from kiln, and as a manual override.
const std::string& codegen_fingerprint();
// The same for another generators hash (tests: two builds must not share keys).
std::string codegen_fingerprint_for(std::string_view generators);

// Banner text for a node: "node 7: add(t3, b1) -> t4  [float32, (?, 256)]".
std::string node_banner(const Node& node);

}  // namespace kiln
