#include "compiler/train/trainer.h"

#include "util/error.h"

namespace kiln {
namespace {

Graph with_step(Graph graph, Variable* loss,
                const std::vector<std::pair<Variable*, Tensor>>& params,
                const OptimizerOptions& optimizer) {
  std::vector<Variable*> ps;
  for (const auto& [p, value] : params) ps.push_back(p);
  graph.set_outputs({loss});
  add_optimizer_step(graph, loss, ps, optimizer);
  return graph;
}

}  // namespace

Trainer::Trainer(Graph graph, Variable* loss,
                 const std::vector<std::pair<Variable*, Tensor>>& params,
                 const OptimizerOptions& optimizer, const CompileOptions& options)
    : graph_(with_step(std::move(graph), loss, params, optimizer)),
      function_(compile(graph_, options)) {
  std::map<const Variable*, Tensor> start;
  for (const auto& [p, value] : params) {
    if (value.dtype() != p->type.dtype || !p->type.accepts(value.shape())) {
      throw UserError("parameter '" + p->name + "' is " + p->type.to_string() + ", its value " +
                      value.describe());
    }
    start[p] = value.clone();
  }
  std::map<const Variable*, bool> updated;
  for (const auto& [state, value] : graph_.updates()) updated[state] = true;
  const auto& inputs = graph_.inputs();
  args_.resize(inputs.size());
  for (size_t i = 0; i < inputs.size(); ++i) {
    const Variable* v = inputs[i];
    if (!updated.count(v)) {
      data_[v->name] = i;
      continue;
    }
    state_[v->name] = i;
    // Parameters start where the caller said; the optimizer's state starts at zero.
    args_[i] = start.count(v) ? start[v] : Tensor::zeros(v->type.dtype, v->type.dims);
  }
}

double Trainer::step(const std::map<std::string, Tensor>& batch) {
  for (const auto& [name, pos] : data_) {
    const auto it = batch.find(name);
    if (it == batch.end()) throw UserError("training step: the batch has no input '" + name + "'");
    args_[pos] = it->second;
  }
  for (const auto& [name, t] : batch) {
    if (!data_.count(name))
      throw UserError("training step: the graph has no data input '" + name + "'");
  }
  const std::vector<Tensor> out = function_(args_);
  return out.at(0).load(0);
}

const Tensor& Trainer::parameter(const std::string& name) const {
  const auto it = state_.find(name);
  if (it == state_.end()) throw UserError("training step: no parameter '" + name + "'");
  return args_[it->second];
}

}  // namespace kiln
