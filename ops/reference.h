#pragma once
// Evaluates a graph with every op's `perform`: the oracle compiled modules are tested against.
#include <vector>

#include "graph/graph.h"

namespace kiln {

// Inputs in graph-input order; returns the graph outputs.
std::vector<Tensor> evaluate_reference(const Graph& graph, const std::vector<Tensor>& inputs);

}  // namespace kiln
