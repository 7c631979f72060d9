#pragma once
// Reverse-mode autodiff as a graph transformation (Theano's grad): the gradient of `cost`
// with respect to each of `wrt`, built into `graph` from each op's grad hook (graph/op.h).
// Gradients of a value used several times are summed; broadcasting is summed back to each
// input's shape by the hooks; a wrt the cost does not depend on gets zeros. The result is
// ordinary nodes: the forward values the backward reads are shared, not recomputed, and the
// rewrite pipeline fuses and caches the whole graph like any other.
#include <vector>

#include "graph/graph.h"

namespace kiln {

// `cost` must be a floating-point scalar (rank 0) of `graph`, unless `seed` (the gradient of
// some scalar with respect to cost, cost's type) is given. Throws UserError naming the node,
// op and input where a wrt's only paths to the cost cross a non-differentiable edge (an
// integer or boolean value, an op without a gradient).
std::vector<Variable*> grad(Graph& graph, Variable* cost, const std::vector<Variable*>& wrt,
                            Variable* seed = nullptr);

}  // namespace kiln
