#include "frontend/model_loader.h"

#include "frontend/json_model.h"
#include "frontend/onnx_model.h"
#include "util/error.h"

namespace kiln {

Graph load_model(const std::filesystem::path& path) {
  if (!std::filesystem::exists(path)) throw UserError("model file '" + path.string() + "' does not exist");
  auto ext = path.extension().string();
  if (ext == ".json") return load_json_model(path);
  if (ext == ".onnx") return load_onnx_model(path);
  throw UserError("'" + path.string() + "': unknown model format '" + ext + "' (kiln reads .json and .onnx)");
}

}  // namespace kiln
