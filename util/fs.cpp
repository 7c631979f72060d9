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
  return read_regular_file(path, UINT64_MAX, true);
}

FdCloser::~FdCloser() {
  if (fd >= 0) ::close(fd);
}

std::string read_regular_file(const std::filesystem::path& path, uint64_t max_bytes,
                              bool allow_special) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | (allow_special ? 0 : O_NONBLOCK));
  if (fd < 0) throw UserError("cannot open '" + path.string() + "': " + std::strerror(errno));
  const FdCloser closer{fd};
  struct stat st {};
  if (::fstat(fd, &st) != 0)
    throw UserError("cannot stat '" + path.string() + "': " + std::strerror(errno));
  if (S_ISDIR(st.st_mode)) throw UserError("cannot read '" + path.string() + "': it is a folder");
  if (!allow_special && !S_ISREG(st.st_mode)) {
    throw UserError("cannot read '" + path.string() +
                    "': it is not a regular file (a device, FIFO or socket)");
  }
  if (S_ISREG(st.st_mode) && static_cast<uint64_t>(st.st_size) > max_bytes) {
    throw UserError("cannot read '" + path.string() + "': " + std::to_string(st.st_size) +
                    " bytes, more than the " + std::to_string(max_bytes) + " it may hold");
  }
  std::string out;
  if (S_ISREG(st.st_mode)) {
    // Straight into the result: a model file of 100 MB is copied once, not twice.
    const auto size = static_cast<size_t>(st.st_size);
    out.resize(size);
    size_t got = 0;
    while (got < size) {
      const ssize_t n = ::read(fd, out.data() + got, size - got);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) throw UserError("cannot read '" + path.string() + "': " + std::strerror(errno));
      if (n == 0) break;  // it shrank while being read: what is there
      got += static_cast<size_t>(n);
    }
    out.resize(got);
    if (got < size) return out;
  }
  char buf[1 << 16];  // what a special file gives, or what a regular one grew by
  for (;;) {
    const ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0) {
      if (errno == EINTR) continue;
      throw UserError("cannot read '" + path.string() + "': " + std::strerror(errno));
    }
    if (n == 0) break;
    if (out.size() + static_cast<size_t>(n) > max_bytes) {  // it grew while being read
      throw UserError("cannot read '" + path.string() + "': more than the " +
                      std::to_string(max_bytes) + " bytes it may hold");
    }
    out.append(buf, static_cast<size_t>(n));
  }
  return out;
}

std::string path_distrust(const std::filesystem::path& path) {
  std::error_code ec;
  // The real folders above the file, not those a link's name passes through.
  std::filesystem::path p = std::filesystem::canonical(path, ec);
  if (ec) return "cannot resolve it: " + ec.message();
  const uid_t me = ::geteuid();
  bool first = true;
  for (;;) {
    struct stat st {};
    if (::stat(p.c_str(), &st) != 0)
      return "cannot stat " + p.string() + ": " + std::strerror(errno);
    const std::string what = first ? "it" : "its folder " + p.string();
    if (st.st_uid != me && st.st_uid != 0) {
      return what + " is owned by uid " + std::to_string(st.st_uid) + ", neither this user (uid " +
             std::to_string(me) + ") nor root";
    }
    // A sticky folder (/tmp) lets nobody else rename or remove what is ours inside it.
    const bool sticky_dir = S_ISDIR(st.st_mode) && (st.st_mode & S_ISVTX);
    if ((st.st_mode & (S_IWGRP | S_IWOTH)) && !sticky_dir) {
      char mode[8];
      std::snprintf(mode, sizeof mode, "%04o", static_cast<unsigned>(st.st_mode & 07777));
      return what + " has mode " + mode + ", so other users can write it";
    }
    first = false;
    if (!p.has_parent_path() || p.parent_path() == p) return "";
    p = p.parent_path();
  }
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
                       bool exact_mode, bool durable) {
  write_file_atomic(path, std::vector<std::string_view>{contents}, mode, exact_mode, durable);
}

void write_file_atomic(const std::filesystem::path& path,
                       const std::vector<std::string_view>& pieces, mode_t mode, bool exact_mode,
                       bool durable) {
  static std::atomic<unsigned> counter{0};
  auto tmp = path;
  tmp += ".tmp." + std::to_string(::getpid()) + "." + std::to_string(counter++);
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, mode);
  if (fd < 0) write_failed(tmp, -1, "open", errno);
  if (exact_mode && ::fchmod(fd, mode) != 0) write_failed(tmp, fd, "chmod", errno);
  for (const std::string_view contents : pieces) {
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
  }
  // Delayed allocation (and network filesystems) report a full disk only here.
  if (durable && ::fsync(fd) != 0) write_failed(tmp, fd, "fsync", errno);
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
