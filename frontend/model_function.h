#pragma once
// A model file as a callable: the graph the loader builds, compiled through the kernel cache.
// Most models build one graph. A model where a graph input's value (not just its shape)
// decides the graph — Reshape's target, Slice's bounds or a Reduce's axes given as inputs —
// is built and compiled per distinct set of those values, read when a call arrives; each such
// variant is a cached module like any other, keyed by the values.
#include <chrono>
#include <deque>
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "compiler/compile.h"
#include "frontend/onnx_model.h"

namespace kiln {

class ModelFunction {
 public:
  // Loads .onnx or .json. A model needing input values loads again on the first call.
  explicit ModelFunction(const std::filesystem::path& path, CompileOptions options = {});

  const std::vector<ModelInput>& inputs() const { return inputs_; }
  // The inputs whose values the graph depends on (found as calls arrive).
  const std::vector<std::string>& value_inputs() const { return value_inputs_; }
  // Inputs in the model's order, or by name; the outputs of the variant the values select.
  std::vector<Tensor> operator()(const std::vector<Tensor>& inputs);
  std::vector<Tensor> run(const std::map<std::string, Tensor>& inputs);
  // The variant of the last call (the only one for most models; before any call, the one
  // loaded without values, when the model has one).
  Function& function();
  const Graph& graph();
  std::vector<std::string> output_names();
  size_t variants() const { return variants_.size(); }
  // Milliseconds the last variant built took to load (parse and import, before compiling).
  double load_ms() const { return load_ms_; }

  static constexpr size_t kMaxVariants = 64;  // the oldest is dropped past this

 private:
  struct Variant {
    Graph graph;
    std::unique_ptr<Function> function;
  };
  Variant& variant_for(const std::map<std::string, Tensor>& inputs);

  std::string bytes_, origin_;
  std::filesystem::path dir_;
  CompileOptions options_;
  std::vector<ModelInput> inputs_;
  std::vector<std::string> value_inputs_;
  std::map<std::string, Variant> variants_;  // by the bytes of the value inputs
  std::deque<std::string> order_;
  Variant* last_ = nullptr;
  double load_ms_ = 0;
};

}  // namespace kiln
