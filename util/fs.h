#pragma once
// Small filesystem helpers with errors that name the path and the errno.
#include <sys/types.h>

#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

namespace kiln {

// Closes a file descriptor when the scope that opened it ends, however it ends.
struct FdCloser {
  int fd;
  ~FdCloser();
};

// The whole file; a folder is an error naming the path.
std::string read_file(const std::filesystem::path& path);
// For files someone else may have handed kiln: a regular file only (no folder, FIFO, device
// or socket, unless allow_special) of at most max_bytes, checked before and while reading.
std::string read_regular_file(const std::filesystem::path& path, uint64_t max_bytes,
                              bool allow_special = false);
// Why a file kiln would load code or keys from must not be trusted: it, or a folder above
// it, is owned by someone other than this user or root, or writable by group or others (a
// sticky folder such as /tmp excepted). "" when it may be trusted.
std::string path_distrust(const std::filesystem::path& path);
// Writes to a temporary sibling, fsyncs, checks close, and renames, so readers never see a
// partial file and a full disk is an error naming the path, never a silent short file. The
// file gets `mode` exactly (not filtered by the process umask) when `exact_mode`; otherwise
// mode & ~umask, as open(2) does. On failure the temporary file is removed.
// `durable` false skips the fsync, for a file whose loss or garbling a reader tolerates (a
// hint that only saves time): readers still never see a partial file while the system runs.
void write_file_atomic(const std::filesystem::path& path, std::string_view contents,
                       mode_t mode = 0666, bool exact_mode = false, bool durable = true);
// The same for a file given as pieces written one after another.
void write_file_atomic(const std::filesystem::path& path,
                       const std::vector<std::string_view>& pieces, mode_t mode = 0666,
                       bool exact_mode = false, bool durable = true);
// Creates `path` and its missing parents. Components created here get `mode` exactly
// (chmod after mkdir, so the process umask cannot widen or narrow it); existing ones are
// left as they are. Throws UserError naming the component that failed.
void make_dirs(const std::filesystem::path& path, mode_t mode);
// $KILN_CACHE_DIR, else $XDG_CACHE_HOME/kiln, else ~/.cache/kiln (HOME, else the passwd
// entry), else a per-user folder in the temporary directory (kiln-cache-<uid>): never a
// fixed name another user could create first.
std::filesystem::path cache_root();
// cache_root() without KILN_CACHE_DIR: this user's cache whatever folder a process uses.
std::filesystem::path default_cache_root();

}  // namespace kiln
