#pragma once
// The graph-level side of autodiff: the error every grad hook raises for an input it cannot
// differentiate, naming the node, the op and the input.
#include <string>

#include "graph/graph.h"

namespace kiln {

[[noreturn]] void not_differentiable(const GradArgs& args, int input, const std::string& why);

}  // namespace kiln
