#pragma once
// The ONNX frontend: a ModelProto (opsets 1 to 17; legacy attributes are reported as unsupported)
// becomes a kiln graph. Initializers become parameters, Constant nodes and shape arithmetic on
// static shapes are evaluated at load time, and weights in external data files are read from the
// model's folder.
#include <filesystem>
#include <string>

#include "graph/graph.h"

namespace kiln {

constexpr int kOnnxMinOpset = 1;
constexpr int kOnnxMaxOpset = 17;

// `origin` names the bytes in errors; external data resolves against base_dir. A model
// using ops or attributes kiln lacks throws one UnsupportedError listing all of them.
Graph parse_onnx_model(const std::string& bytes, const std::string& origin,
                       const std::filesystem::path& base_dir);
Graph load_onnx_model(const std::filesystem::path& path);

}  // namespace kiln
