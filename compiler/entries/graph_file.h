#pragma once
// A graph as two files, so a model its importer read once can be stored and mapped back in a
// fresh process without the importer: the structure as JSON (inputs, constants, nodes by op
// name and props, outputs, updates, in the order they were made, so every id, every name and
// the module key come back the same) and the constants' values as safetensors (mapped on
// load, never copied).
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "graph/graph.h"
#include "runtime/io/safetensors.h"

namespace kiln {

struct GraphFiles {
  std::string structure;                                // JSON text
  std::vector<std::pair<std::string, Tensor>> tensors;  // constant values, named "t<id>"
  // Written as the tensors file's metadata: "digest.t<id>" -> the value's content digest
  // (compiler/value_digest.h), which the graph read back knows without hashing.
  std::map<std::string, std::string> digests;
};
// Fills `files.digests`: graph_files takes the constants' known digests, and this hashes the
// rest on the calling thread.
void add_value_digests(GraphFiles& files);

// nullopt for a graph these files cannot hold exactly (a rewritten graph with recipes or
// device placement, a node without outputs); the caller then simply does not store it.
std::optional<GraphFiles> graph_files(const Graph& graph);
// The graph again; throws UserError naming `origin` for structure it cannot rebuild (an op
// this process does not know, a dangling reference, a missing tensor).
Graph graph_from_files(const std::string& structure, const Safetensors& tensors,
                       const std::string& origin);
// True when two graphs are the same to every consumer: names, kinds, types, ops with their
// props, node names, outputs, updates, and constants sharing their values' bytes.
bool same_graph(const Graph& a, const Graph& b);

}  // namespace kiln
