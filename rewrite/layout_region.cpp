#include "rewrite/layout_region.h"

#include "ops/registry.h"

namespace kiln {

Node* add_fresh(GraphCopy& copy, const std::string& op, const Attrs& props,
                const std::vector<Variable*>& inputs, const std::string& name,
                const std::string& out_name) {
  return copy.dst().add_node(OpRegistry::instance().create(op, props), inputs, name,
                             {copy.dst().fresh_name(out_name)});
}

std::optional<Variable*> elementwise_in_layout(
    GraphCopy& copy, const Node& node,
    const std::function<std::optional<Variable*>(const Variable*)>& operand,
    const std::string& suffix) {
  std::vector<Variable*> inputs;
  for (const Variable* v : node.inputs) {
    auto o = operand(v);
    if (!o) return {};
    inputs.push_back(*o);
  }
  return copy.dst()
      .add_node(node.op, inputs, node.name, {copy.dst().fresh_name(node.outputs[0]->name + suffix)})
      ->outputs[0];
}

}  // namespace kiln
