#include "cache/cache_access.h"

#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "util/error.h"
#include "util/fs.h"

namespace kiln {
namespace {

std::string octal(mode_t m) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "%04o", static_cast<unsigned>(m & 07777));
  return buf;
}

}  // namespace

CacheAccess CacheAccess::from_env() {
  const char* env = std::getenv("KILN_CACHE_UMASK");
  if (!env || !*env) return private_access();
  char* end = nullptr;
  errno = 0;
  long v = std::strtol(env, &end, 8);
  if (errno != 0 || *end != '\0' || v < 0 || v > 0777) {
    throw UserError(std::string("KILN_CACHE_UMASK: '") + env +
                    "' is not an octal umask (examples: 002 for a group-shared cache, 077 "
                    "private)");
  }
  // Whatever the mask, the owner keeps full access to what it creates.
  return shared_access(static_cast<mode_t>(v) & 077);
}

mode_t CacheAccess::dir_mode() const { return umask_ ? (0777 & ~*umask_) : 0700; }
mode_t CacheAccess::file_mode() const { return umask_ ? (0666 & ~*umask_) : 0600; }

std::string CacheAccess::distrust(const struct stat& st) const {
  const uid_t me = ::geteuid();
  if (!umask_) {
    if (st.st_uid != me) {
      return "it is owned by uid " + std::to_string(st.st_uid) + ", not by this user (uid " +
             std::to_string(me) + ")";
    }
    if (st.st_mode & (S_IWGRP | S_IWOTH)) {
      return "its mode " + octal(st.st_mode) + " lets other users write it";
    }
    return "";
  }
  // Shared: any owner, but no write permission beyond what the configured mask grants.
  const mode_t allowed = S_ISDIR(st.st_mode) ? dir_mode() : file_mode();
  const mode_t extra = st.st_mode & (S_IWGRP | S_IWOTH) & ~allowed;
  if (extra) {
    return "its mode " + octal(st.st_mode) +
           " lets users outside KILN_CACHE_UMASK=" + octal(*umask_) + " write it";
  }
  return "";
}

void CacheAccess::check_folder(const std::filesystem::path& dir) const {
  struct stat st {};
  if (::stat(dir.c_str(), &st) != 0) {
    throw UserError("cannot use cache folder '" + dir.string() + "': " + std::strerror(errno));
  }
  if (!S_ISDIR(st.st_mode)) throw UserError("cache folder '" + dir.string() + "' is not a folder");
  std::string why = distrust(st);
  if (why.empty()) return;
  std::string fix =
      umask_ ? "make it writable only by the owner and the sharing group (chmod o-w), or use "
               "another KILN_CACHE_DIR"
             : "fix it with `chown -R $USER` and `chmod -R go-w` if you trust its contents, "
               "point KILN_CACHE_DIR at a folder of your own, or set KILN_CACHE_UMASK (e.g. "
               "002) for a cache shared on purpose";
  throw UserError("refusing cache folder '" + dir.string() + "': " + why +
                  ", so another user could plant code that kiln would run; " + fix);
}

void CacheAccess::make_folder(const std::filesystem::path& dir) const {
  make_dirs(dir, dir_mode());
  check_folder(dir);
}

}  // namespace kiln
