#include "util/fs.h"

#include <fcntl.h>
#include <pwd.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
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
  if (in.bad()) throw UserError("cannot read '" + path.string() + "': " + std::strerror(errno));
  return ss.str();
}

namespace {

[[noreturn]] void write_failed(const std::filesystem::path& tmp, int fd, const std::string& what,
                               int err) {
  if (fd >= 0) ::close(fd);
  ::unlink(tmp.c_str());
  throw UserError("cannot write '" + tmp.string() + "': " + what + ": " + std::strerror(err));
}

}  // namespace

void write_file_atomic(const std::filesystem::path& path, std::string_view contents, mode_t mode,
                       bool exact_mode) {
  static std::atomic<unsigned> counter{0};
  auto tmp = path;
  tmp += ".tmp." + std::to_string(::getpid()) + "." + std::to_string(counter++);
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, mode);
  if (fd < 0) write_failed(tmp, -1, "open", errno);
  if (exact_mode && ::fchmod(fd, mode) != 0) write_failed(tmp, fd, "chmod", errno);
  const char* p = contents.data();
  size_t left = contents.size();
  while (left > 0) {
    ssize_t n = ::write(fd, p, left);
    if (n < 0) {
      if (errno == EINTR) continue;
      write_failed(tmp, fd, "write", errno);
    }
    p += n;
    left -= static_cast<size_t>(n);
  }
  // Delayed allocation (and network filesystems) report a full disk only here.
  if (::fsync(fd) != 0) write_failed(tmp, fd, "fsync", errno);
  if (::close(fd) != 0) write_failed(tmp, -1, "close", errno);
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    int err = errno;
    ::unlink(tmp.c_str());
    throw UserError("cannot rename into '" + path.string() + "': " + std::strerror(err));
  }
}

void make_dirs(const std::filesystem::path& path, mode_t mode) {
  if (path.empty()) return;
  struct stat st {};
  if (::stat(path.c_str(), &st) == 0) {
    if (!S_ISDIR(st.st_mode)) throw UserError("'" + path.string() + "' is not a folder");
    return;
  }
  if (path.has_parent_path() && path.parent_path() != path) make_dirs(path.parent_path(), mode);
  if (::mkdir(path.c_str(), mode) != 0) {
    if (errno == EEXIST && ::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) return;
    throw UserError("cannot create folder '" + path.string() + "': " + std::strerror(errno));
  }
  if (::chmod(path.c_str(), mode) != 0) {
    throw UserError("cannot set the mode of folder '" + path.string() +
                    "': " + std::strerror(errno));
  }
}

std::filesystem::path cache_root() {
  if (const char* dir = std::getenv("KILN_CACHE_DIR"); dir && *dir) return dir;
  return default_cache_root();
}

std::filesystem::path default_cache_root() {
  if (const char* xdg = std::getenv("XDG_CACHE_HOME"); xdg && *xdg) {
    return std::filesystem::path(xdg) / "kiln";
  }
  if (const char* home = std::getenv("HOME"); home && *home) {
    return std::filesystem::path(home) / ".cache" / "kiln";
  }
  if (const passwd* pw = ::getpwuid(::geteuid()); pw && pw->pw_dir && pw->pw_dir[0] == '/') {
    return std::filesystem::path(pw->pw_dir) / ".cache" / "kiln";
  }
  // The owner check at open refuses this folder if another user made it first.
  return std::filesystem::temp_directory_path() / ("kiln-cache-" + std::to_string(::geteuid()));
}

}  // namespace kiln
