#pragma once
// NumPy .npy files (format 1.0-3.0, little-endian, C or Fortran order).
#include <filesystem>
#include <string>
#include <string_view>

#include "runtime/tensor.h"

namespace kiln {

// `origin` names the source in errors (a path); errors give the byte offset.
Tensor parse_npy(std::string_view bytes, const std::string& origin);
Tensor read_npy(const std::filesystem::path& path);
std::string to_npy(const Tensor& tensor);
void write_npy(const std::filesystem::path& path, const Tensor& tensor);

}  // namespace kiln
