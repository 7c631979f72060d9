#pragma once
// The module key: SHA-256 over a canonical encoding of the ABI version, the graph signature
// (op names, props, cache versions, types, edges) and the toolchain fingerprint. It is
// computed from the graph alone, without generating source; names of variables do not
// enter it, and neither do weight values (only inlined scalar constants do).
#include <string>

#include "graph/graph.h"

namespace kiln {

std::string graph_signature(const Graph& graph);  // the canonical text that is hashed
std::string module_key(const Graph& graph, const std::string& toolchain_fingerprint);

}  // namespace kiln
