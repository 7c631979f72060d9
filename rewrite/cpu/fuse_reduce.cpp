// Reduction fusion: an elementwise node (plain or fused) whose only reader is a reduction
// moves into it, so the reduced values are computed in the reduction loop and never stored.
// Runs after elementwise fusion, so a whole chain feeding a reduction lands in it.
#include <map>

#include "ops/fused_reduce.h"
#include "rewrite/fused_steps.h"
#include "rewrite/graph_copy.h"
#include "rewrite/passes.h"

namespace kiln {

Graph fuse_reduce(const Graph& graph) {
  auto uses = count_uses(graph);
  std::map<const Node*, const Node*> producer;  // reduction -> the node fused into it
  for (const auto& node : graph.nodes()) {
    if (!dynamic_cast<const Reduce*>(node->op.get())) continue;
    const Variable* v = node->inputs[0];
    if (v->kind != VarKind::kNodeOutput || uses[v] != 1 || !is_elementwise_node(*v->owner))
      continue;
    producer[node.get()] = v->owner;
  }
  std::map<const Node*, bool> absorbed;
  for (const auto& [reduce, p] : producer) absorbed[p] = true;

  GraphCopy copy(graph);
  for (const auto& node : graph.nodes()) {
    if (absorbed.count(node.get())) continue;
    auto found = producer.find(node.get());
    if (found == producer.end()) {
      copy.copy(*node);
      continue;
    }
    const Node& p = *found->second;
    std::vector<FusedStep> steps;
    std::vector<Variable*> inputs;
    std::map<const Variable*, int> arg;  // each distinct operand once
    append_steps(
        p,
        [&](int k) {
          const Variable* v = p.inputs[static_cast<size_t>(k)];
          auto it = arg.find(v);
          if (it != arg.end()) return it->second;
          inputs.push_back(copy.map(v));
          return arg[v] = static_cast<int>(inputs.size()) - 1;
        },
        steps);
    auto program = FusedElementwise::from_steps(std::move(steps));
    copy.add(FusedReduce::make(dynamic_cast<const Reduce&>(*node->op), *program), inputs,
             {node->outputs[0]}, node->name);
  }
  return copy.finish();
}

}  // namespace kiln
