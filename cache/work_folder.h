#pragma once
// A folder one process is working in (a staging entry, a scratch build, a failed build being
// written). It is live while its owner holds an exclusive flock on the sibling `<name>.lock`:
// the kernel drops the lock when the owner dies, whatever its PID namespace or host, so a
// sweeper removes exactly the folders whose owners are gone and never one in use.
#include <filesystem>
#include <memory>
#include <string>

#include "cache/cache_access.h"
#include "cache/file_lock.h"

namespace kiln {

class WorkFolder {
 public:
  // Creates `<parent>/<prefix>.<random>` (dir_mode) after taking its lock.
  static WorkFolder create(const std::filesystem::path& parent, const std::string& prefix,
                           const CacheAccess& access);
  WorkFolder(WorkFolder&&) noexcept = default;
  WorkFolder& operator=(WorkFolder&&) noexcept;
  ~WorkFolder();

  const std::filesystem::path& path() const { return path_; }
  // The folder was renamed away (published): from now on only the lock is ours to drop.
  void disown();

  // Removes the folders (and orphan lock files) in `parent` whose owner is gone. Folders of
  // no owner (no lock file) count as gone. `min_age_s` spares folders modified more recently,
  // for folders that are kept on purpose after their owner exits (failed builds).
  static int sweep(const std::filesystem::path& parent, double min_age_s = 0);
  // Removes `p` (a folder or file in such a parent) if no live owner holds its lock.
  static bool remove_if_abandoned(const std::filesystem::path& p);

 private:
  WorkFolder(std::filesystem::path path, FileLock lock)
      : path_(std::move(path)), lock_(std::make_unique<FileLock>(std::move(lock))) {}
  void remove();
  std::filesystem::path path_;
  std::unique_ptr<FileLock> lock_;
  bool owned_ = true;
};

// A name part no other process on any host picks: 64 random bits in hex.
std::string random_suffix();
// Bytes under `dir` (files only, symlinks not followed), or the size of `dir` if it is a
// file; 0 when it does not exist.
uint64_t folder_bytes(const std::filesystem::path& dir);
// Seconds since `p` was last modified (0 when it cannot be read).
double age_s(const std::filesystem::path& p);

}  // namespace kiln
