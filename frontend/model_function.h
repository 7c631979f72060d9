#pragma once
// A model file as a callable: the graph the loader builds, compiled through the kernel cache.
// Most models build one graph. A model where a graph input's value (not just its shape)
// decides the graph — Reshape's target, Slice's bounds or a Reduce's axes given as inputs —
// is built and compiled per distinct set of those values, read when a call arrives; each such
// variant is a cached module like any other, keyed by the values. A model with a NonZero of
// a tensor computed at run time runs in stages: a prefix model computes that tensor, the host
// finds its non-zero indices, and the model takes them as an input of dynamic size (one
// module for every count).
#include <chrono>
#include <deque>
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "compiler/compile.h"
#include "compiler/tiered_function.h"
#include "frontend/control_node.h"
#include "frontend/model_value.h"
#include "frontend/onnx/onnx_model.h"

namespace kiln {

class ModelFunction {
 public:
  // Loads .onnx or .json. A model needing input values loads again on the first call.
  explicit ModelFunction(const std::filesystem::path& path, CompileOptions options = {});

  const std::vector<ModelInput>& inputs() const { return inputs_; }
  // The inputs whose values the graph depends on (found as calls arrive).
  const std::vector<std::string>& value_inputs() const { return value_inputs_; }
  // Inputs in the model's order, or by name; the outputs of the variant the values select.
  // A sequence input x is given as x[0], x[1], ... (its length is the number of these), an
  // optional one by its tensor or elements or not at all; a sequence output's elements come
  // back as outputs of their own.
  std::vector<Tensor> operator()(const std::vector<Tensor>& inputs);
  std::vector<Tensor> run(const std::map<std::string, Tensor>& inputs);
  // The same with each input and output a tensor, a sequence or an optional, as the model
  // declares it: the model is built per sequence length and optional's presence.
  std::vector<ModelValue> run_values(const std::map<std::string, ModelValue>& inputs);
  // True when some input or output the model declares is a sequence or an optional (a call
  // then wants run_values to keep them apart).
  bool takes_values() const { return composite_inputs_ || composite_outputs_; }
  // The variant of the last call (the only one for most models; before any call, the one
  // loaded without values, when the model has one). function() waits for a module compiling
  // in the background (CompileOptions::generic_start); tiered() does not.
  Function& function();
  TieredFunction& tiered();
  const Graph& graph();
  std::vector<std::string> output_names();
  size_t variants() const { return variants_.size(); }
  // The tensors computed before the model runs (NonZero's and NonMaxSuppression's inputs, a
  // stage's joined by ", "), each with the prefix model computing them (null when all are
  // model inputs).
  std::vector<std::pair<std::string, ModelFunction*>> stages();
  // Milliseconds the last variant built took to load (parse and import, before compiling;
  // stages' prefixes excluded).
  double load_ms() const { return load_ms_; }

  static constexpr size_t kMaxVariants = 64;  // the oldest is dropped past this

 private:
  friend class ControlNode;  // builds its bodies from their bytes
  struct Variant {
    std::unique_ptr<Graph> graph;  // on the heap: the function's background compile reads it
    std::unique_ptr<TieredFunction> function;
    std::vector<ValueStructure> outputs;  // how the graph's outputs group into the model's
  };
  using Structures = std::map<std::string, ValueStructure>;
  // The sequence and optional inputs' structures as run() reads them from flat names.
  Structures structures_of(const std::map<std::string, Tensor>& inputs) const;
  std::vector<Tensor> run_flat(const std::map<std::string, Tensor>& inputs,
                               const Structures& structures);
  // A NonZero's, Unique's or NonMaxSuppression's outputs, computed between stages from the
  // node's inputs (`values`, by position, "" where absent): declared inputs, or the outputs of
  // the model cut after them (a ModelFunction of its own, so it may have stages too). Control
  // flow (Loop, Scan, If) is a node of the graph instead (frontend/control_node.h), whatever
  // its output shapes.
  struct Stage {
    std::vector<std::string> values;
    std::vector<std::string> outputs;  // "" where the node's output is unused
    std::string kind;
    std::vector<TensorType> types;
    Attrs attrs;
    std::unique_ptr<ModelFunction> prefix;  // null when every value is already at hand
    std::shared_ptr<ControlNode> control;   // Loop, Scan, If: their bodies and driver
    // What the prefix computes for the stages and the model after it (onnx_prefix_model's
    // carried values): they take these as inputs rather than computing them again.
    std::vector<std::string> carried;
    std::vector<TensorType> carried_types;
    std::vector<size_t> carried_index;  // each one's place among the prefix's outputs
  };
  // The stage's outputs from its input values (the host's NonZero or NonMaxSuppression, or
  // the control-flow drivers of frontend/control_flow.h).
  std::vector<Tensor> evaluate_stage(Stage& s, const std::vector<const Tensor*>& values);
  // Records which of the prefix's carried values later stages and the model take as inputs
  // (`named`: how many of its outputs the stage itself reads).
  static void carry_from_prefix(Stage& s, size_t named, const std::vector<std::string>& carried);
  // A model in memory; `outer_staged`: the values an enclosing ModelFunction computes before
  // this one runs (earlier stages' results), which enter as inputs.
  ModelFunction(std::string bytes, std::string origin, std::filesystem::path dir,
                CompileOptions options, std::map<std::string, TensorType> outer_staged = {});
  void init_onnx();
  // Parses with `bound` input values, adding a stage per NonZero met until the model loads.
  Graph load(const std::map<std::string, Tensor>& bound, const Structures& structures = {},
             std::vector<ValueStructure>* outputs = nullptr);
  // The stage for node `e`, with a prefix computing its inputs unless they are in `staged`
  // (the values at hand before it), which then gains the stage's outputs and carried values.
  void add_stage(const RunTimeValueNeeded& e, std::map<std::string, TensorType>& staged);
  Variant& variant_for(const std::map<std::string, Tensor>& inputs, const Structures& structures);

  std::string bytes_, origin_;
  std::filesystem::path dir_;
  CompileOptions options_;
  std::vector<ModelInput> inputs_;
  std::vector<std::string> value_inputs_;
  bool composite_inputs_ = false;            // some input is a sequence or an optional
  bool composite_outputs_ = false;           // some output is
  std::map<std::string, Variant> variants_;  // by the bytes of the value inputs
  std::deque<std::string> order_;
  std::vector<Stage> stages_;
  ControlNodes control_nodes_;  // the control flow nodes and stages made so far
  std::map<std::string, TensorType> outer_staged_;
  bool lenient_inputs_ = false;  // a prefix: run() ignores names it does not take
  Variant* last_ = nullptr;
  double load_ms_ = 0;
  double stage_ms_ = 0;  // building prefixes, within the last load
};

}  // namespace kiln
