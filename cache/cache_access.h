#pragma once
// Who may write a cache folder, and what kiln therefore trusts in it. A cache entry is code
// kiln will run, so by default the cache is private: folders 0700, files 0600, and a root (or
// top-level folder) that is not owned by this user or that others can write is refused.
// KILN_CACHE_UMASK (octal, as ccache's `umask`) opts into a cache shared by a group: folders
// and files get 0777/0666 less that mask, and files of other users are accepted as long as
// nobody outside the mask's permissions can write them.
#include <sys/stat.h>
#include <sys/types.h>

#include <filesystem>
#include <optional>
#include <string>

namespace kiln {

class CacheAccess {
 public:
  // From KILN_CACHE_UMASK; throws UserError naming the variable when it is not octal.
  static CacheAccess from_env();
  static CacheAccess private_access() { return CacheAccess(std::nullopt); }
  static CacheAccess shared_access(mode_t umask) { return CacheAccess(umask); }

  bool shared() const { return umask_.has_value(); }
  mode_t dir_mode() const;
  mode_t file_mode() const;

  // Refuses (UserError saying why and what to do) a folder kiln would load code from that
  // this user does not control: wrong owner (private mode) or writable by others.
  void check_folder(const std::filesystem::path& dir) const;
  // Why a file or folder of an entry must not be trusted, or "" when it may be.
  std::string distrust(const struct stat& st) const;
  // Creates `dir` (and parents) with dir_mode(), then checks it.
  void make_folder(const std::filesystem::path& dir) const;

 private:
  explicit CacheAccess(std::optional<mode_t> umask) : umask_(umask) {}
  std::optional<mode_t> umask_;
};

}  // namespace kiln
