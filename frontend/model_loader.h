#pragma once
// Loads a model file by its extension (.json, .onnx). An ONNX model this user's cache has seen
// (same bytes, same importer code) comes back from its cache entry with its weights mapped,
// not parsed and copied (compiler/entries/model_entries.h); KILN_CACHE=0 turns that off.
#include <filesystem>

#include "graph/graph.h"

namespace kiln {

Graph load_model(const std::filesystem::path& path);

}  // namespace kiln
