#pragma once
// The generic tier's kernels: precompiled float32 code for the ops that dominate a first run
// (convolutions and products through OpenBLAS, broadcasting elementwise loops), so a graph
// runs before its module is built. Every other node runs through its op's `perform`.
#include <vector>

#include "graph/graph.h"

namespace kiln {

// Runs `node` on `inputs` into `outputs` (shaped by the caller, contents undefined) when a
// generic kernel covers it; returns false, touching nothing, when none does.
bool run_generic_kernel(const Node& node, const std::vector<Tensor>& inputs,
                        std::vector<Tensor>& outputs);

}  // namespace kiln
