#pragma once
// An ONNX Loop, Scan or If run on the host: each body a model of its own (a ModelFunction, so
// a cached module like any other), driven by frontend/control_flow.h. The node is a host_call
// node of the graph (ops/host_call.h) and the executor runs it as a step between the module's
// others: on the run's buffers where its output shapes are known as the model loads; where
// they depend on run-time values (a Loop's per-iteration outputs, branches of different
// shapes), as a step sized by its run, the steps after it planned once it has run.
#include <filesystem>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "compiler/compile.h"
#include "frontend/onnx/onnx_model.h"
#include "ops/host_call.h"

namespace kiln {

class ModelFunction;

class ControlNode : public HostFunction {
 public:
  // `need`: the node as the loader describes it (onnx_control.cpp); `origin` names the model.
  ControlNode(const RunTimeValueNeeded& need, const std::string& origin,
              const std::filesystem::path& dir, const CompileOptions& options);
  ~ControlNode() override;

  // By the node's input positions, null where absent.
  std::vector<Tensor> run(const std::vector<const Tensor*>& values);
  // The present inputs only, in order (a graph node has no absent inputs).
  std::vector<Tensor> operator()(const std::vector<Tensor>& inputs) override;

  // What it computes, for the module key: its kind, attributes (the bodies' bytes), types,
  // which inputs are present and the options its bodies compile with.
  static std::string key_of(const RunTimeValueNeeded& need, const CompileOptions& options);
  const std::string& key() const { return key_; }
  const std::string& where() const { return where_; }

 private:
  std::string kind_, where_, key_;
  Attrs attrs_;
  std::vector<TensorType> types_;
  std::vector<bool> present_;
  std::vector<std::unique_ptr<ModelFunction>> bodies_;  // Loop, Scan: body; If: then, else
  std::mutex mutex_;  // a body's ModelFunction serves one call at a time
};

// The nodes a model made, by key: loading it again (per variant, per stage found) reuses
// them and their compiled bodies.
using ControlNodes = std::map<std::string, std::shared_ptr<ControlNode>>;

// The node `need` describes, from `made` or new (and then kept there).
std::shared_ptr<ControlNode> control_node(const RunTimeValueNeeded& need, const std::string& origin,
                                          const std::filesystem::path& dir,
                                          const CompileOptions& options, ControlNodes& made);

// True when the executor can run `need` as a host_call node: control flow (Loop, Scan, If),
// whatever its output shapes.
bool runs_as_step(const RunTimeValueNeeded& need);

}  // namespace kiln
