#pragma once
// A whole file mapped read-only as a Storage: tensors that view it keep the mapping alive,
// and nothing is copied until someone reads a page.
#include <filesystem>
#include <memory>

#include "runtime/storage.h"

namespace kiln {

// Maps the open file `fd` of `size` bytes (private, read-only; the file is never written). An
// empty file gives an empty Storage. Throws UserError naming `path` when the map fails; the
// caller keeps ownership of fd.
std::shared_ptr<Storage> map_file(int fd, size_t size, const std::filesystem::path& path);

}  // namespace kiln
