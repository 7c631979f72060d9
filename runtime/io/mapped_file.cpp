#include "runtime/io/mapped_file.h"

#include <sys/mman.h>

#include <cerrno>
#include <cstring>

#include "util/error.h"

namespace kiln {

std::shared_ptr<Storage> map_file(int fd, size_t size, const std::filesystem::path& path) {
  if (size == 0)
    return std::make_shared<Storage>(
        nullptr, 0, [](void*) {}, false);
  void* p = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
  if (p == MAP_FAILED)
    throw UserError("cannot map '" + path.string() + "': " + std::strerror(errno));
  return std::make_shared<Storage>(
      p, size, [size](void* q) { ::munmap(q, size); }, false);
}

}  // namespace kiln
