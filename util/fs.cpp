#include "util/fs.h"

#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>

#include "util/error.h"

namespace kiln {

std::string read_file(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw UserError("cannot open '" + path.string() + "': " + std::strerror(errno));
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

void write_file_atomic(const std::filesystem::path& path, std::string_view contents) {
  auto tmp = path;
  tmp += ".tmp." + std::to_string(::getpid());
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out) throw UserError("cannot write '" + tmp.string() + "': " + std::strerror(errno));
    out.write(contents.data(), static_cast<std::streamsize>(contents.size()));
    if (!out) throw UserError("short write to '" + tmp.string() + "'");
  }
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  if (ec) {
    std::filesystem::remove(tmp, ec);
    throw UserError("cannot rename into '" + path.string() + "': " + ec.message());
  }
}

std::filesystem::path cache_root() {
  if (const char* dir = std::getenv("KILN_CACHE_DIR"); dir && *dir) return dir;
  if (const char* xdg = std::getenv("XDG_CACHE_HOME"); xdg && *xdg) {
    return std::filesystem::path(xdg) / "kiln";
  }
  if (const char* home = std::getenv("HOME"); home && *home) {
    return std::filesystem::path(home) / ".cache" / "kiln";
  }
  return std::filesystem::temp_directory_path() / "kiln-cache";
}

}  // namespace kiln
