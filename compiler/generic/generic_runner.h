#pragma once
// The generic tier: runs a graph as given, node by node, through precompiled kernels
// (generic_kernels.h) and, for every other node, its op's `perform`. Nothing is compiled,
// so it answers while a module is being built; it is slower per run than the module.
#include <atomic>
#include <functional>
#include <memory>
#include <optional>
#include <unordered_map>
#include <vector>

#include "graph/graph.h"

namespace kiln {

class GenericRunner {
 public:
  // Host graphs without state updates (the caller checks); keeps `graph` alive.
  explicit GenericRunner(std::shared_ptr<const Graph> graph);

  // Inputs in graph-input order, checked against their declared types like a module's;
  // returns the graph outputs (fresh tensors). Safe to call from several threads.
  std::vector<Tensor> run(const std::vector<Tensor>& inputs) const;
  // The same, asking `give_up` before each node: nullopt once it says yes (the caller has a
  // faster way to the result by then, e.g. the module finished compiling).
  std::optional<std::vector<Tensor>> run_until(const std::vector<Tensor>& inputs,
                                               const std::function<bool()>& give_up) const;

  // How many nodes a generic kernel ran in the last run (the rest ran `perform`).
  int kernel_nodes() const { return kernel_nodes_; }
  int nodes() const { return static_cast<int>(graph_->nodes().size()); }

 private:
  void validate(const std::vector<Tensor>& inputs) const;
  std::shared_ptr<const Graph> graph_;
  std::unordered_map<const Variable*, size_t> slot_;  // each variable's place in a run's values
  std::vector<size_t> last_use_;  // per slot: the last node reading it (SIZE_MAX: kept)
  mutable std::atomic<int> kernel_nodes_ = 0;
};

}  // namespace kiln
