#pragma once
// Loads a model file by its extension (.json now; .onnx with the ONNX frontend).
#include <filesystem>

#include "graph/graph.h"

namespace kiln {

Graph load_model(const std::filesystem::path& path);

}  // namespace kiln
