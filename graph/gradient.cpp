#include "graph/gradient.h"

#include "util/error.h"

namespace kiln {

void not_differentiable(const GradArgs& args, int input, const std::string& why) {
  const Variable* v = args.node.inputs.at(static_cast<size_t>(input));
  throw UserError("grad: " + args.node.label() + ": input " + std::to_string(input) + " '" +
                  v->name + "' is not differentiable: " + why);
}

std::vector<Variable*> Op::grad(const GradArgs& args) const {
  for (size_t i = 0; i < args.wanted.size(); ++i) {
    if (args.wanted[i]) not_differentiable(args, static_cast<int>(i), name() + " has no gradient");
  }
  return std::vector<Variable*>(args.node.inputs.size(), nullptr);
}

}  // namespace kiln
