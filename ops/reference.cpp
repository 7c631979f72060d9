#include "ops/reference.h"

#include <map>

#include "util/error.h"

namespace kiln {

std::vector<Tensor> evaluate_reference(const Graph& graph, const std::vector<Tensor>& inputs) {
  if (inputs.size() != graph.inputs().size()) {
    throw UserError("reference: expected " + std::to_string(graph.inputs().size()) + " inputs");
  }
  std::map<const Variable*, Tensor> values;
  for (size_t i = 0; i < inputs.size(); ++i) values[graph.inputs()[i]] = inputs[i];
  for (const Variable* c : graph.constants()) values[c] = *c->value;
  for (const auto& node : graph.nodes()) {
    std::vector<Tensor> ins;
    std::vector<Shape> shapes;
    std::vector<DType> dtypes;
    for (const Variable* v : node->inputs) {
      ins.push_back(values.at(v));
      shapes.push_back(ins.back().shape());
      dtypes.push_back(ins.back().dtype());
    }
    std::vector<Shape> out_shapes;
    try {
      out_shapes = node->op->infer_run_shape(shapes, dtypes);
    } catch (const UserError& e) {
      throw UserError(node->label() + ": " + e.what());
    }
    std::vector<Tensor> outs;
    for (size_t k = 0; k < out_shapes.size(); ++k) {
      outs.push_back(Tensor::zeros(node->outputs[k]->type.dtype, out_shapes[k]));
    }
    node->op->perform(ins, outs);
    for (size_t k = 0; k < outs.size(); ++k) values[node->outputs[k]] = outs[k];
  }
  std::vector<Tensor> result;
  for (const Variable* v : graph.outputs()) result.push_back(values.at(v));
  return result;
}

}  // namespace kiln
