#pragma once
// State updates (Graph::add_update) through compile(): the update values become extra
// outputs of the graph the module is built from, and the function's program learns which
// input each one overwrites. An update is made in place when its value comes from an
// elementwise step (plain or fused) whose output has the state's shape, so element i is
// read before it is written; the steps are reordered so that every other reader of the old
// value runs first. Anything else is copied into the state after the run.
#include <memory>
#include <utility>
#include <vector>

#include "compiler/module_plan.h"
#include "graph/graph.h"
#include "runtime/exec/program.h"

namespace kiln {

// (input position, output position) per update of `graph`, outputs counted after its own.
std::vector<std::pair<int, int>> update_positions(const Graph& graph);
// `graph` with its update values appended to its outputs (and no updates).
Graph with_update_outputs(const Graph& graph);
// The program with the updates planned: in-place ones marked and ordered.
std::shared_ptr<const Program> program_with_updates(
    std::shared_ptr<const Program> program, const ModulePlan& plan,
    const std::vector<std::pair<int, int>>& updates);

}  // namespace kiln
