#pragma once
// The ONNX frontend: a ModelProto (opsets 1 to 17; legacy attributes are reported as unsupported)
// becomes a kiln graph. Initializers become parameters, Constant nodes and shape arithmetic on
// static shapes are evaluated at load time, and weights in external data files are read from the
// model's folder.
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "graph/graph.h"

namespace kiln {

constexpr int kOnnxMinOpset = 1;
constexpr int kOnnxMaxOpset = 17;

// `origin` names the bytes in errors; external data resolves against base_dir. A model
// using ops or attributes kiln lacks throws one UnsupportedError listing all of them.
Graph parse_onnx_model(const std::string& bytes, const std::string& origin,
                       const std::filesystem::path& base_dir);
Graph load_onnx_model(const std::filesystem::path& path);

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

// The same with the values of some graph inputs fixed: they become load-time values and
// leave the graph's inputs.
Graph parse_onnx_model(const std::string& bytes, const std::string& origin,
                       const std::filesystem::path& base_dir,
                       const std::map<std::string, Tensor>& input_values);

struct ModelInput {
  std::string name;
  TensorType type;
};
// The graph inputs an ONNX model declares (initializers excluded), without building it.
std::vector<ModelInput> onnx_model_inputs(const std::string& bytes, const std::string& origin);

}  // namespace kiln
