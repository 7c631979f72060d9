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

class Backend;

// kModule: the whole graph as one translation unit, every node's code inline with its sizes
// as literals (the way before kernels; KILN_KERNELS=0). kKernels: each distinct node code is
// a kernel of its own unit, generic over the sizes the op lets it read at run time
// (Sub::value), compiled and cached on its own; a thin binding unit calls them per node.
enum class LinkMode { kModule, kKernels };

// One kernel: a node's code as `int SYMBOL(state, ctx, in, out, const int64_t *kp)`, in a
// translation unit that names no node, so any graph whose node has this code shares it.
struct CKernel {
  std::string symbol;      // kiln_k_<16 hex digits of the code's hash>
  std::string op;          // the op of its first node
  CodeWriter code;         // its translation unit, mapped to its first node's fragments
  std::vector<int> nodes;  // the nodes of this graph that run it
  std::vector<std::string> libraries, compile_args;
};

struct LinkedModule {
  LinkMode mode = LinkMode::kModule;
  // The whole module as one unit: what `kiln source` shows (kernels first, then the
  // binding) and what kModule compiles.
  CodeWriter code;  // source text plus its source map
  // kKernels: the binding unit, compiled and linked with the kernels' objects.
  CodeWriter binding;
  // The same binding as assembler (compiler/c/binding_asm.h) when every node runs a kernel and
  // kiln can emit it for this architecture; "" otherwise.
  std::string binding_asm;
  std::vector<CKernel> c_kernels;
  std::vector<std::string> libraries;     // -l names, deduplicated
  std::vector<std::string> compile_args;  // from ops' c_compile_args, deduplicated
  std::vector<int> thunk_nodes;           // thunk i runs node thunk_nodes[i]
  // Nodes placed on a device: its backend, their kernels as one device unit (the backend's
  // unit_name, with its own source map), and the kernel table the host thunks launch by
  // index.
  const Backend* device = nullptr;
  CodeWriter device_unit;
  std::vector<std::string> kernel_names;    // per launch site: the enum names thunks use
  std::vector<std::string> kernel_symbols;  // the symbol each runs (identical kernels share one)
};

// `key` is embedded in the module so a loaded module can say what it was built from.
LinkedModule link_c_module(const Graph& graph, const std::string& key,
                           LinkMode mode = LinkMode::kKernels);

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
