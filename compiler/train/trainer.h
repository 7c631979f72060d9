#pragma once
// A compiled training step: forward, backward (rewrite/autodiff/grad.h) and the optimizer's updates
// (rewrite/autodiff/optimizer.h) in one cached module, with the parameters and optimizer state held
// here and rewritten in place by each step.
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "compiler/compile.h"
#include "rewrite/autodiff/optimizer.h"

namespace kiln {

class Trainer {
 public:
  // `graph` computes the floating-point scalar `loss` from its data inputs and `params`
  // (graph inputs too), whose starting values are given (copied). The step compiles here.
  Trainer(Graph graph, Variable* loss, const std::vector<std::pair<Variable*, Tensor>>& params,
          const OptimizerOptions& optimizer, const CompileOptions& options = {});

  // One step on a batch (every data input, by name); returns the loss before the update.
  double step(const std::map<std::string, Tensor>& batch);
  // A parameter's current value (the tensor the steps update; not a copy).
  const Tensor& parameter(const std::string& name) const;
  const Function& function() const { return function_; }
  const Graph& graph() const { return graph_; }

 private:
  Graph graph_;
  Function function_;
  std::vector<Tensor> args_;             // per graph input: state tensors stay bound
  std::map<std::string, size_t> data_;   // data input name -> position
  std::map<std::string, size_t> state_;  // parameter / state name -> position
};

}  // namespace kiln
