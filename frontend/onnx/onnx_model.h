#pragma once
// The ONNX frontend: a ModelProto (opsets 1 to 17; legacy attributes are reported as unsupported)
// becomes a kiln graph. Initializers become parameters, Constant nodes and shape arithmetic on
// static shapes are evaluated at load time, and weights in external data files are read from the
// model's folder.
#include <filesystem>
#include <functional>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "frontend/model_value.h"
#include "graph/graph.h"

namespace kiln {

constexpr int kOnnxMinOpset = 1;
constexpr int kOnnxMaxOpset = 17;

// `origin` names the bytes in errors; external data resolves against base_dir. A model
// using ops or attributes kiln lacks throws one UnsupportedError listing all of them.
Graph parse_onnx_model(const std::string& bytes, const std::string& origin,
                       const std::filesystem::path& base_dir);
// `uses_external_data`, when given, says whether some weight lives in a file of its own.
Graph load_onnx_model(const std::filesystem::path& path, bool* uses_external_data = nullptr);

// A graph input whose value (not only its shape) decides the graph: Reshape's shape, a
// Reduce's axes, Slice's bounds, Dropout's training_mode given as a graph input. Thrown by
// the loader, naming the input, so a caller holding the value can load again with it bound
// (frontend/model_function.h does).
class InputValueNeeded : public UnsupportedError {
 public:
  InputValueNeeded(std::string input, const std::string& what)
      : UnsupportedError(what), input_(std::move(input)) {}
  const std::string& input() const { return input_; }

 private:
  std::string input_;
};

// A node whose outputs depend on the values of tensors computed at run time: NonZero's and
// NonMaxSuppression's sizes, and what a Loop, a Scan or an If with a run-time condition
// computes. Thrown by the loader naming those tensors (by position, "" where one is absent),
// the node's outputs with their types, and the node's kind and attributes (for control flow,
// each body as an ONNX model of its own, onnx_control.h), so a caller can compute them first
// (a compiled stage of its own, onnx_prefix_model), evaluate the node on the host, and load
// again with the node's outputs entering as graph inputs (OnnxBindings::staged).
class RunTimeValueNeeded : public UnsupportedError {
 public:
  RunTimeValueNeeded(std::vector<std::string> values, std::vector<std::string> outputs,
                     std::vector<TensorType> types, std::string kind, Attrs attrs,
                     const std::string& what)
      : UnsupportedError(what),
        values_(std::move(values)),
        outputs_(std::move(outputs)),
        types_(std::move(types)),
        kind_(std::move(kind)),
        attrs_(std::move(attrs)) {}
  const std::vector<std::string>& values() const { return values_; }
  // The node's outputs ("" where one is unused) and their types, in the same order.
  const std::vector<std::string>& outputs() const { return outputs_; }
  const std::vector<TensorType>& types() const { return types_; }
  const std::string& kind() const { return kind_; }
  const Attrs& attrs() const { return attrs_; }

 private:
  std::vector<std::string> values_;
  std::vector<std::string> outputs_;
  std::vector<TensorType> types_;
  std::string kind_;
  Attrs attrs_;
};

struct OnnxBindings {
  // Graph inputs fixed to these values: they become load-time values and leave the inputs.
  std::map<std::string, Tensor> input_values;
  // Outputs of RunTimeValueNeeded nodes, by ONNX name: each enters as a graph input (after
  // the model's own) unless its node's inputs are known at load time (control flow's always
  // enter).
  std::map<std::string, TensorType> staged;
  // When set, each node needing run-time values is appended here and its outputs enter as
  // inputs, and the import goes on; at its end the first one is thrown.
  std::vector<RunTimeValueNeeded>* deferred = nullptr;
  // Each sequence or optional graph input's structure (its length, or whether it is
  // present): its elements enter as graph inputs x[0], x[1], ... (an optional tensor as x).
  std::map<std::string, ValueStructure> structures;
  // When set, each graph output's structure, in order: a sequence output's elements leave as
  // outputs y[0], y[1], ..., an empty optional as none. Without it a model with a sequence or
  // optional output is refused (its flat outputs would not say which is which).
  std::vector<ValueStructure>* output_structures = nullptr;
  // When set, asked first for each node needing run-time values, with the node and its
  // present inputs' types: an op computing the node makes it a node of the graph (control
  // flow the executor runs as a step, frontend/control_node.h); null leaves it to `deferred`.
  std::function<std::shared_ptr<const Op>(const RunTimeValueNeeded&,
                                          const std::vector<TensorType>&)>
      host_node;
};

Graph parse_onnx_model(const std::string& bytes, const std::string& origin,
                       const std::filesystem::path& base_dir, const OnnxBindings& bindings);
// The same with only input values bound.
Graph parse_onnx_model(const std::string& bytes, const std::string& origin,
                       const std::filesystem::path& base_dir,
                       const std::map<std::string, Tensor>& input_values);

// The model cut after the last node producing one of `values`, with those its outputs (in
// order): what a stage computing those tensors loads. With `carried`, also what the nodes after
// the cut read from before it (appended to the outputs and to *carried, less the names in
// `available`), so later stages and the model take those as inputs instead of computing them
// again; shape arithmetic is not carried, but the tensors whose shapes it reads are. Only the
// nodes and initializers the outputs need are kept; values in `available` they read become
// inputs of their types.
std::string onnx_prefix_model(const std::string& bytes, const std::string& origin,
                              const std::vector<std::string>& values,
                              const std::map<std::string, TensorType>& available = {},
                              std::vector<std::string>* carried = nullptr);

struct ModelInput {
  std::string name;
  TensorType type;  // a sequence's or optional's: its element's
  ValueKind kind = ValueKind::kTensor;
};
// The graph inputs an ONNX model declares (initializers excluded), without building it.
// `output_kinds`, when given, gets what each declared graph output holds (one parse for both).
std::vector<ModelInput> onnx_model_inputs(const std::string& bytes, const std::string& origin,
                                          std::vector<ValueKind>* output_kinds = nullptr);
// What each graph output the model declares holds (a tensor when it declares no type).
std::vector<ValueKind> onnx_output_kinds(const std::string& bytes, const std::string& origin);

}  // namespace kiln
