#pragma once
// kiln's JSON graph format (docs/json-format.md): inputs, parameters (.npy files or inline
// values), nodes with op names and attributes, outputs. Every error names its JSON path.
#include <filesystem>
#include <string>

#include "graph/graph.h"

namespace kiln {

// `origin` names the text in errors; relative parameter files resolve against `base_dir`.
Graph parse_json_model(const std::string& text, const std::string& origin,
                       const std::filesystem::path& base_dir);
Graph load_json_model(const std::filesystem::path& path);

}  // namespace kiln
