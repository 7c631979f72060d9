#include "frontend/model_loader.h"

#include "compiler/c/linker.h"
#include "compiler/entries/model_entries.h"
#include "compiler/value_digest.h"
#include "frontend/json/json_model.h"
#include "frontend/onnx/onnx_model.h"
#include "util/error.h"
#include "util/fs.h"

namespace kiln {

namespace embedded {
extern const char importers_hash[];
}  // namespace embedded

namespace {

// Through the cache of imported models. Only a model whose weights are all inside its own
// file is stored: external data is mapped already, and its files are not part of the key.
Graph load_onnx_cached(const std::filesystem::path& path) {
  std::unique_ptr<ModelEntries> entries = ModelEntries::open_default();
  if (!entries) return load_onnx_model(path);
  std::string digest;
  try {
    digest = entries->content_digest(path);
  } catch (const UserError&) {
    return load_onnx_model(path);  // the importer says what is wrong with the file
  }
  // The file's name enters too: an unnamed ONNX graph is named after it.
  const KeyComponents source{{"kind", "imported model 1"},
                             {"format", "onnx"},
                             {"content", digest},
                             {"stem", path.stem().string()},
                             {"importer", embedded::importers_hash},
                             {"ops", codegen_fingerprint()}};
  if (std::optional<Graph> g = entries->find(source)) return std::move(*g);
  bool external = false;
  Graph g = load_onnx_model(path, &external);
  if (!external) {
    remember_constant_digests(g);  // hashed once, for the entry and the prepared weights
    entries->put(source, g);
  }
  return g;
}

}  // namespace

Graph load_model(const std::filesystem::path& path) {
  if (!std::filesystem::exists(path))
    throw UserError("model file '" + path.string() + "' does not exist");
  auto ext = path.extension().string();
  if (ext == ".json") return load_json_model(path);
  if (ext == ".onnx") return load_onnx_cached(path);
  throw UserError("'" + path.string() + "': unknown model format '" + ext +
                  "' (kiln reads .json and .onnx)");
}

}  // namespace kiln
