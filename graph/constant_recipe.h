#pragma once
// How a constant of a rewritten graph is computed from the constants of the graph the user
// gave: that graph's constant number `source` as it is, or a transform (an op's reference
// `perform`, or a rewrite's own such as weight packing) of other recipes' values. A module
// records its parameters' recipes, so a cache hit prepares any weights of the same shapes
// without running the rewrite passes (compiler/module_plan.h).
#include <memory>
#include <string>
#include <vector>

#include "graph/attrs.h"

namespace kiln {

struct ConstantRecipe {
  int source = -1;  // >= 0: the given graph's constant at this position
  std::string op;   // otherwise: the transform
  Attrs props;
  int output = 0;   // which output of the transform
  std::vector<std::shared_ptr<const ConstantRecipe>> inputs;
};

using RecipePtr = std::shared_ptr<const ConstantRecipe>;

}  // namespace kiln
