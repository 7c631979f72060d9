#pragma once
// What a full verification of an entry saw of each file, so that a later lookup can skip
// hashing a file that has not changed since: the idea of ccache's inode cache. A stamp is the
// file's device, inode, size, modification and change times (the kernel sets the change time
// on every write, rename or chmod, and no user can set it back) plus a hash of its first and
// last 4 KiB. Stamps are only trusted in a private cache, where nobody but this user can
// write a file; a shared cache, `kiln cache verify` and a lookup that is about to quarantine
// hash every byte. A file whose change time is too recent to tell a later write in the same
// clock tick from this one gets no stamp.
#include <sys/stat.h>

#include <filesystem>
#include <map>
#include <string>

namespace kiln {

class FileStamps {
 public:
  // The stamps an entry's folder holds ("" when none, or when they cannot be read or parsed:
  // then every file is hashed, as before).
  static FileStamps read(const std::filesystem::path& dir);
  // True when `fd` (fstat'ed as `st`) is the very file stamped under `name` with this SHA-256.
  bool covers(const std::string& name, int fd, const struct stat& st,
              const std::string& sha256) const;
  // Records a file just hashed to `sha256` (nothing when its times are too recent to trust).
  void add(const std::string& name, int fd, const struct stat& st, const std::string& sha256);
  bool empty() const { return stamps_.empty(); }
  // Writes them into the entry's folder, atomically but without an fsync (stamps lost in a
  // crash are only hashing to redo). A failure is only logged: stamps save time, they never
  // decide anything alone.
  void write(const std::filesystem::path& dir, mode_t mode) const;

  static constexpr const char* kFileName = ".stamps";

  // One file's stamp with the digest it vouches for ("" when the file cannot be read).
  static std::string stamp(int fd, const struct stat& st, const std::string& digest);
  // False while the file's change time is inside the clock tick that could hide a later write.
  static bool settled(const struct stat& st);

 private:
  std::map<std::string, std::string> stamps_;  // file name -> stamp line
};

}  // namespace kiln
