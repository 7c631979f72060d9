#include "rewrite/layout_region.h"

#include "ops/registry.h"

namespace kiln {

bool channel_concat(const Node& node, bool (*fits)(const Variable*)) {
  if (node.op->name() != "concat" || node.outputs.size() != 1 || !fits(node.outputs[0]))
    return false;
  const int64_t axis = attr_int(node.op->props(), "axis", 0);
  if (axis != 1 && axis != -3) return false;
  for (const Variable* v : node.inputs) {
    if (!fits(v)) return false;
  }
  return true;
}

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
