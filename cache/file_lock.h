#pragma once
// An flock(2) on a lock file. The kernel drops it when the holder dies (even by SIGKILL),
// so a killed process never leaves a lock that blocks anyone. A holder of an exclusive lock
// may unlink the file; lockers re-check the inode after locking, so nobody ever holds a lock
// on a file that is no longer reachable by its path.
#include <sys/types.h>

#include <filesystem>
#include <optional>

namespace kiln {

class FileLock {
 public:
  enum class Mode { kShared, kExclusive };

  // Blocks until the lock is held. Creates the file (`file_mode`) and its folder (`file_mode`
  // plus search bits) if needed. The file is opened read-only, so a lock file another member
  // of a shared cache's group created serves this user too (flock needs no write access).
  static FileLock acquire(const std::filesystem::path& path, Mode mode, mode_t file_mode = 0600);
  // Returns nullopt instead of waiting when another holder conflicts.
  static std::optional<FileLock> try_acquire(const std::filesystem::path& path, Mode mode,
                                             mode_t file_mode = 0600);

  FileLock(FileLock&& other) noexcept;
  FileLock& operator=(FileLock&& other) noexcept;
  FileLock(const FileLock&) = delete;
  FileLock& operator=(const FileLock&) = delete;
  ~FileLock();

  const std::filesystem::path& path() const { return path_; }
  void release();
  // Exclusive holders only: removes the lock file, then releases.
  void unlink_and_release();

 private:
  FileLock(std::filesystem::path path, int fd) : path_(std::move(path)), fd_(fd) {}
  static std::optional<FileLock> lock(const std::filesystem::path& path, Mode mode, bool wait,
                                      mode_t file_mode);
  std::filesystem::path path_;
  int fd_ = -1;
};

}  // namespace kiln
