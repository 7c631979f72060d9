#pragma once
// safetensors files: an 8-byte little-endian header length, a JSON header naming each
// tensor's dtype, shape and byte range, then the data. Reading maps the file and hands out
// views of it (copies only where a tensor's bytes are not 64-byte aligned).
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "runtime/tensor.h"

namespace kiln {

struct Safetensors {
  std::vector<std::pair<std::string, Tensor>> tensors;  // in the order of their bytes
  std::map<std::string, std::string> metadata;          // the header's "__metadata__"

  // The named tensor; a UserError naming `origin`, the name and the tensors present otherwise.
  const Tensor& at(const std::string& name, const std::string& origin) const;
};

// `bytes` holds the whole file; tensors are views sharing it. Every error names `origin`
// and the byte offset of what is wrong.
Safetensors parse_safetensors(const std::shared_ptr<Storage>& bytes, const std::string& origin);
Safetensors read_safetensors(const std::filesystem::path& path);  // mmap'd, read-only
// Data starts on a 64-byte boundary; tensors whose size is a multiple of 64 bytes go first,
// so they all stay aligned when the file is mapped.
std::string to_safetensors(const std::vector<std::pair<std::string, Tensor>>& tensors,
                           const std::map<std::string, std::string>& metadata = {});
void write_safetensors(const std::filesystem::path& path,
                       const std::vector<std::pair<std::string, Tensor>>& tensors,
                       const std::map<std::string, std::string>& metadata = {});

bool is_safetensors_path(const std::filesystem::path& path);  // by extension
// A weights or input file by its extension: .npy, or from a .safetensors file the tensor
// called `name`, else its only tensor (a UserError listing the tensors otherwise).
Tensor read_tensor_file(const std::filesystem::path& path, const std::string& name = "");

}  // namespace kiln
