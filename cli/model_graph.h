#pragma once
// The whole graph of a model for the commands that show or compile it as one module (kiln
// source, kiln compile): load_model's, or, for an ONNX model whose control flow runs as steps
// of its module (host_call nodes), the graph a ModelFunction builds, which also keeps the
// nodes' bodies alive while the graph is in use. A model that runs in stages (control flow
// whose output sizes depend on run-time values, a NonZero) or is built per input value has
// no one graph: it is refused with the loader's error.
#include <filesystem>
#include <memory>
#include <optional>

#include "compiler/compile.h"
#include "frontend/model_function.h"

namespace kiln::cli {

class ModelGraph {
 public:
  ModelGraph(const std::filesystem::path& model, const CompileOptions& options);
  const Graph& graph() { return graph_ ? *graph_ : function_->graph(); }

 private:
  std::optional<Graph> graph_;
  std::unique_ptr<ModelFunction> function_;
};

}  // namespace kiln::cli
