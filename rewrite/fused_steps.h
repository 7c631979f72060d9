#pragma once
// Shared by the fusion passes: the scalar steps of an elementwise node (plain or already
// fused), with its inputs renumbered into a larger program.
#include <functional>

#include "graph/graph.h"
#include "ops/fused_elementwise.h"

namespace kiln {

// True for plain and fused elementwise nodes.
bool is_elementwise_node(const Node& node);

// Appends `node`'s steps to `steps`. `arg_of(k)` gives the program argument for the node's
// input k ($i as i >= 0, %j as -j - 1). Returns the argument naming the node's result.
int append_steps(const Node& node, const std::function<int(int)>& arg_of,
                 std::vector<FusedStep>& steps);

// True when every scalar op of the node is cheap to recompute per output element.
bool is_cheap_node(const Node& node);

}  // namespace kiln
