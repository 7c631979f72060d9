#pragma once
// Files a model names (ONNX external data, JSON parameters' .npy and .safetensors files): a
// model may be someone else's, so what it names must be a regular file inside the model's own
// folder once links are resolved — never /dev/zero, a FIFO, /etc/shadow or ../../secret.npy.
#include <filesystem>
#include <string>

namespace kiln {

// The resolved path of `location` under `base_dir`. Throws UserError naming `where` (when not
// empty) and the
// location when it is absolute, climbs with "..", resolves (through links) outside the
// folder, does not exist, or is not a regular file.
std::filesystem::path file_beside_model(const std::filesystem::path& base_dir,
                                        const std::string& location, const std::string& where);

}  // namespace kiln
