// Constant folding: a node whose inputs are all constants is evaluated now, through its
// op's reference `perform`, and becomes a constant. A result computed from a parameter is
// itself a parameter (a module input, never pasted into the source), so one module still
// serves any weights. Each folded constant records its transform (the op's name and props),
// so a module loaded from the cache computes it again from new weights.
#include "rewrite/constant_recipe.h"
#include "rewrite/graph_copy.h"
#include "rewrite/passes.h"
#include "util/error.h"

namespace kiln {
namespace {

// Larger results stay nodes: folding them would only trade run time for load time and memory.
constexpr int64_t kMaxFoldElements = int64_t{1} << 22;

// `inputs`: the node's inputs in the new graph, so a chain folds whole in one pass (a node
// reading what an earlier node folded into a constant folds too).
bool foldable(const Node& node, const std::vector<Variable*>& inputs) {
  if (inputs.empty()) return false;
  for (const Variable* v : inputs) {
    if (v->kind != VarKind::kConstant || !v->value) return false;
  }
  return replayable(*node.op);
}

}  // namespace

Graph fold_constants(const Graph& graph) {
  GraphCopy copy(graph);
  for (const auto& node : graph.nodes()) {
    if (!foldable(*node, copy.map(node->inputs))) {
      copy.copy(*node);
      continue;
    }
    std::vector<Tensor> inputs;
    std::vector<Shape> shapes;
    std::vector<DType> dtypes;
    std::vector<RecipePtr> recipes;
    bool from_parameter = false;
    for (const Variable* v : copy.map(node->inputs)) {
      inputs.push_back(*v->value);
      shapes.push_back(v->value->shape());
      dtypes.push_back(v->value->dtype());
      recipes.push_back(v->recipe);
      from_parameter = from_parameter || v->parameter;
    }
    std::vector<Tensor> outputs;
    try {
      std::vector<Shape> out_shapes = node->op->infer_run_shape(shapes, dtypes);
      int64_t total = 0;
      for (const Shape& s : out_shapes) total += shape_numel(s);
      if (total > kMaxFoldElements) {
        copy.copy(*node);
        continue;
      }
      for (size_t i = 0; i < node->outputs.size(); ++i) {
        outputs.push_back(Tensor::empty(node->outputs[i]->type.dtype, out_shapes.at(i)));
      }
      node->op->perform(inputs, outputs);
    } catch (const Error&) {
      // E.g. an index out of range: leave the node, so the run reports it where it happens.
      copy.copy(*node);
      continue;
    }
    for (size_t i = 0; i < node->outputs.size(); ++i) {
      copy.add_constant(node->outputs[i], outputs[i], from_parameter,
                        transform_recipe(node->op->name(), node->op->props(),
                                         static_cast<int>(i), recipes));
    }
  }
  return copy.finish();
}

}  // namespace kiln
