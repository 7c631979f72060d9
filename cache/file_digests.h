#pragma once
// Content digests of files outside the cache (a model file), remembered in the cache folder
// by the file's stamp (cache/file_stamps.h: device, inode, size, modification and change
// times, first and last 4 KiB), so a model that has not changed is not read whole again to
// learn its digest: the idea of ccache's inode cache. Only a private cache keeps them (where
// nobody else can write the record); elsewhere every lookup misses.
#include <sys/stat.h>

#include <filesystem>
#include <optional>
#include <string>

#include "cache/cache_store.h"

namespace kiln {

class FileDigests {
 public:
  explicit FileDigests(const CacheStore& store) : store_(store) {}
  // The digest recorded under `kind` for the open file `fd` at `path` (fstat'ed as `st`),
  // if its stamp still matches.
  std::optional<std::string> find(const std::string& kind, const std::filesystem::path& path,
                                  int fd, const struct stat& st) const;
  // Records `digest` for the file (nothing in a shared or read-only cache, or while the file's
  // change time is too recent to stamp; a failure is only logged).
  void remember(const std::string& kind, const std::filesystem::path& path, int fd,
                const struct stat& st, const std::string& digest) const;

 private:
  std::filesystem::path record(const std::string& kind, const std::filesystem::path& path,
                               const struct stat& st) const;
  const CacheStore& store_;
};

}  // namespace kiln
