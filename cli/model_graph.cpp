#include "cli/model_graph.h"

#include "frontend/model_loader.h"
#include "frontend/onnx/onnx_model.h"

namespace kiln::cli {

ModelGraph::ModelGraph(const std::filesystem::path& model, const CompileOptions& options) {
  try {
    graph_ = load_model(model);
  } catch (const RunTimeValueNeeded&) {
    if (model.extension() != ".onnx") throw;
    // The bodies compile in the background while the command works on the graph.
    CompileOptions o = options;
    o.generic_start = true;
    function_ = std::make_unique<ModelFunction>(model, o);
    if (!function_->stages().empty() || !function_->value_inputs().empty()) throw;
  }
}

}  // namespace kiln::cli
