// GEMM/conv epilogue fusion: a gemm, matmul or conv whose only reader is an elementwise
// node (typically bias + activation, already fused into one) of the same output type takes
// that node as its epilogue: the elementwise work runs in place on the output inside the
// same thunk, while the result is still in cache, with no second buffer.
#include <map>
#include <set>

#include "ops/epilogue.h"
#include "rewrite/fused_steps.h"
#include "rewrite/graph_copy.h"
#include "rewrite/passes.h"

namespace kiln {
namespace {

// Not a matmul storing through out_perm: a split part's matrices are then no run of the
// output's elements, which the per-part epilogue loop walks.
// An integer convolution only where its parts are runs of whole output positions
// (channels-last, not depthwise): a quantized residual add then runs on each part's bytes
// right after they are computed.
bool takes_epilogue(const Node& node) {
  const std::string& n = node.op->name();
  const auto* op = dynamic_cast<const COp*>(node.op.get());
  if (n == "qconv") return op && node.outputs.size() == 1 && op->c_split_unit(node) > 0;
  return (n == "gemm" || n == "matmul" || n == "conv" || n == "conv_nchwc") &&
         node.outputs.size() == 1 && op && !node.op->props().count("out_perm");
}

}  // namespace

Graph fuse_epilogue(const Graph& graph) {
  auto uses = count_uses(graph);
  std::map<const Node*, const Node*> epilogue_of;  // elementwise consumer -> base node
  std::set<const Node*> absorbed;
  for (const auto& node : graph.nodes()) {
    if (!is_elementwise_node(*node)) continue;
    for (const Variable* v : node->inputs) {
      const Node* base = v->kind == VarKind::kNodeOutput ? v->owner : nullptr;
      if (!base || !takes_epilogue(*base) || absorbed.count(base)) continue;
      int reads = 0;
      for (const Variable* w : node->inputs) reads += w == v;
      if (reads != uses[v] || v->type != node->outputs[0]->type) continue;
      epilogue_of[node.get()] = base;
      absorbed.insert(base);
      break;
    }
  }

  GraphCopy copy(graph);
  for (const auto& node : graph.nodes()) {
    if (absorbed.count(node.get())) continue;
    auto e = epilogue_of.find(node.get());
    if (e == epilogue_of.end()) {
      copy.copy(*node);
      continue;
    }
    const Node& base = *e->second;
    const Variable* result = base.outputs[0];
    // $0 is the base op's result; the consumer's other operands follow as $1, $2, ...
    std::vector<Variable*> inputs = copy.map(base.inputs);
    std::map<const Variable*, int> arg{{result, 0}};
    std::vector<FusedStep> steps;
    append_steps(
        *node,
        [&](int k) {
          const Variable* v = node->inputs[static_cast<size_t>(k)];
          auto found = arg.find(v);
          if (found != arg.end()) return found->second;
          inputs.push_back(copy.map(v));
          return arg[v] = static_cast<int>(arg.size());
        },
        steps);
    auto program = FusedElementwise::from_steps(std::move(steps));
    auto op = WithEpilogue::make(dynamic_cast<const COp&>(*base.op),
                                 static_cast<int>(base.inputs.size()), *program);
    copy.add(op, inputs, {node->outputs[0]}, base.name.empty() ? node->name : base.name);
  }
  return copy.finish();
}

}  // namespace kiln
