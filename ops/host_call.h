#pragma once
// A node computed by a function of the process that built the graph rather than by code in
// its module: an ONNX Loop, Scan or If (frontend/control_node.h runs its bodies, each a cached
// module of its own). The module binds the function by its key when it loads
// (compiler/c/host_call_binding.h) and calls it on each run through the support table, so the
// executor runs the node as one of its steps. Where the outputs' shapes are static, they are
// the run's planned buffers; where some dimension is known only once the node has run (a
// Loop's trip count, branches of different shapes), the step is sized by its run: it hands
// its results to the executor, which plans the steps after it from their shapes.
//   host_call(inputs...) -> outputs...: the types registered with the function.
//   Props: key (what the function computes; two functions registered under one key must
//   compute the same thing, since the key is all the module's cache key sees of them) and
//   kind (for labels and errors: "Loop", "Scan", "If").
#include <memory>
#include <string>
#include <vector>

#include "ops/cop.h"

namespace kiln {

class HostFunction {
 public:
  virtual ~HostFunction() = default;
  // The outputs from the inputs; throws Error naming what was wrong. May be called from
  // several threads at once.
  virtual std::vector<Tensor> operator()(const std::vector<Tensor>& inputs) = 0;
};

// What a key was registered with; throws UserError when no live function has the key.
struct HostCallEntry {
  std::shared_ptr<HostFunction> fn;  // held only for the call at hand
  std::vector<TensorType> inputs, outputs;
  std::string kind;
  std::string where;  // "Loop (host call 1a2b...)"
};
HostCallEntry find_host_call(const std::string& key);

// How the module's binding description starts (the key follows).
std::string host_call_spec_prefix();

// The function's results, checked against the node's types (dtype, rank, static dimensions).
std::vector<Tensor> checked_host_results(std::vector<Tensor> results,
                                         const std::vector<TensorType>& types,
                                         const std::string& where);

// Checks the function's results against the node's types and copies them into `outputs`.
void store_host_results(const std::vector<Tensor>& results, const std::vector<TensorType>& types,
                        std::vector<Tensor>& outputs, const std::string& where);

// The op and the modules calling it hold the function weakly: loaded modules and plans
// outlive the models that made them (the process keeps them for later compiles), and a
// function holding compiled bodies must go with its model, not at exit. Whoever registers a
// function keeps it alive while it may be called (ModelFunction keeps its control nodes);
// once it is gone, the function registered under the same key since (the model loaded
// again) answers, or the call fails saying why.
class HostCallOp : public COp {
 public:
  // Registers `fn` under props' key (replacing an earlier one), for modules to bind.
  HostCallOp(Attrs props, std::vector<TensorType> inputs, std::vector<TensorType> outputs,
             std::shared_ptr<HostFunction> fn);
  // The op of a registered key (the registry's factory: passes that copy a node).
  explicit HostCallOp(const Attrs& props);

  std::vector<TensorType> infer_type(const std::vector<TensorType>& inputs) const override;
  std::vector<Shape> infer_shape(const std::vector<Shape>& inputs) const override;
  void perform(const std::vector<Tensor>& inputs, std::vector<Tensor>& outputs) const override;
  std::optional<int> cache_version() const override { return 1; }

  std::string c_code(const Node& node, const CodeNames& names, const Sub& sub) const override;
  std::string c_state_fields(const Node& node, const std::string& prefix) const override;
  std::string c_init_code_struct(const Node& node, const Sub& sub) const override;
  std::string c_cleanup_code_struct(const Node& node, const Sub& sub) const override;
  // The function runs compiled modules of its own, whose steps use every worker.
  bool c_threads_itself() const override { return true; }
  // Some output's type has a dynamic dimension (perform then replaces that output).
  bool c_sized_by_run() const override { return sized_; }

 private:
  std::string where() const;  // "Loop (host call <key prefix>)"
  std::vector<TensorType> inputs_, outputs_;
  std::weak_ptr<HostFunction> fn_;
  bool sized_ = false;
};

}  // namespace kiln
