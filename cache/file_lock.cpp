#include "cache/file_lock.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "util/error.h"
#include "util/fs.h"

namespace kiln {

std::optional<FileLock> FileLock::lock(const std::filesystem::path& path, Mode mode, bool wait,
                                       mode_t file_mode) {
  struct stat parent {};
  if (::stat(path.parent_path().c_str(), &parent) != 0) {
    make_dirs(path.parent_path(), file_mode | ((file_mode & 0444) >> 2));
  }
  int op = (mode == Mode::kShared ? LOCK_SH : LOCK_EX) | (wait ? 0 : LOCK_NB);
  for (;;) {
    int fd = ::open(path.c_str(), O_RDONLY | O_CREAT | O_CLOEXEC, file_mode);
    if (fd < 0)
      throw UserError("cannot open lock file '" + path.string() + "': " + std::strerror(errno));
    int rc;
    do {
      rc = ::flock(fd, op);
    } while (rc != 0 && errno == EINTR);
    if (rc != 0) {
      int err = errno;
      ::close(fd);
      if (err == EWOULDBLOCK) return std::nullopt;
      throw UserError("cannot lock '" + path.string() + "': " + std::strerror(err));
    }
    // The previous holder may have unlinked the file while we waited: then our lock guards
    // nothing, so start over on whatever the path names now.
    struct stat held {
    }, named{};
    if (::fstat(fd, &held) == 0 && ::stat(path.c_str(), &named) == 0 &&
        held.st_ino == named.st_ino && held.st_dev == named.st_dev) {
      return FileLock(path, fd);
    }
    ::close(fd);
  }
}

FileLock FileLock::acquire(const std::filesystem::path& path, Mode mode, mode_t file_mode) {
  return *lock(path, mode, true, file_mode);
}

std::optional<FileLock> FileLock::try_acquire(const std::filesystem::path& path, Mode mode,
                                              mode_t file_mode) {
  return lock(path, mode, false, file_mode);
}

FileLock::FileLock(FileLock&& other) noexcept : path_(std::move(other.path_)), fd_(other.fd_) {
  other.fd_ = -1;
}

FileLock& FileLock::operator=(FileLock&& other) noexcept {
  if (this != &other) {
    release();
    path_ = std::move(other.path_);
    fd_ = other.fd_;
    other.fd_ = -1;
  }
  return *this;
}

FileLock::~FileLock() { release(); }

void FileLock::release() {
  if (fd_ >= 0) ::close(fd_);  // closing the only descriptor drops the flock
  fd_ = -1;
}

void FileLock::unlink_and_release() {
  if (fd_ >= 0) ::unlink(path_.c_str());
  release();
}

}  // namespace kiln
