#pragma once
// Optimizer steps as graph updates (Graph::add_update): the gradient of the loss with
// respect to each parameter (rewrite/autodiff/grad.h), then the update rule as elementwise ops, so
// forward, backward and step compile into one module and the parameters are rewritten in
// place. Parameters are graph inputs the caller owns; the optimizer's own state (momentum
// buffers, Adam's moments and step count) becomes further inputs, named after the
// parameter ("w1.momentum", "w1.adam_m", "w1.adam_v", "adam.step"), which start at zero.
#include <string>
#include <vector>

#include "graph/graph.h"

namespace kiln {

struct OptimizerOptions {
  enum class Kind { kSgd, kAdam } kind = Kind::kSgd;
  double lr = 0.01;
  double momentum = 0;      // SGD: v = momentum * v + g; p -= lr * v (PyTorch's form)
  double weight_decay = 0;  // L2: g += weight_decay * p
  double beta1 = 0.9, beta2 = 0.999, eps = 1e-8;  // Adam, with bias correction

  // "sgd", "sgd:lr=0.1,momentum=0.9", "adam:lr=1e-3"; UserError naming what is wrong.
  static OptimizerOptions parse(const std::string& text);
};

// Adds the gradients and updates to `graph`; returns the state inputs it created.
std::vector<Variable*> add_optimizer_step(Graph& graph, Variable* loss,
                                          const std::vector<Variable*>& params,
                                          const OptimizerOptions& options);

}  // namespace kiln
