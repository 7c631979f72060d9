#include "rewrite/fused_steps.h"

namespace kiln {

bool is_elementwise_node(const Node& node) {
  return dynamic_cast<const Elementwise*>(node.op.get()) ||
         dynamic_cast<const FusedElementwise*>(node.op.get());
}

int append_steps(const Node& node, const std::function<int(int)>& arg_of,
                 std::vector<FusedStep>& steps) {
  if (auto ew = std::dynamic_pointer_cast<const Elementwise>(node.op)) {
    FusedStep st{ew, {}};
    for (size_t k = 0; k < node.inputs.size(); ++k) st.args.push_back(arg_of(static_cast<int>(k)));
    steps.push_back(std::move(st));
    return -static_cast<int>(steps.size());
  }
  const auto& fused = dynamic_cast<const FusedElementwise&>(*node.op);
  const int base = static_cast<int>(steps.size());
  for (const FusedStep& inner : fused.steps()) {
    FusedStep st{inner.op, {}};
    for (int a : inner.args) st.args.push_back(a >= 0 ? arg_of(a) : a - base);
    steps.push_back(std::move(st));
  }
  return -static_cast<int>(steps.size());
}

bool is_cheap_node(const Node& node) {
  if (auto f = dynamic_cast<const FusedElementwise*>(node.op.get())) return f->is_cheap();
  return is_cheap_scalar_op(node.op->name());
}

}  // namespace kiln
