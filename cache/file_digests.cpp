#include "cache/file_digests.h"

#include "cache/file_stamps.h"
#include "util/fs.h"
#include "util/log.h"
#include "util/sha256.h"

namespace kiln {

namespace fs = std::filesystem;

fs::path FileDigests::record(const std::string& kind, const fs::path& path,
                             const struct stat& st) const {
  // One record per file (its path, device and inode) and kind of digest.
  const std::string id = sha256_hex(kind + "\n" + fs::absolute(path).lexically_normal().string() +
                                    "\n" + std::to_string(st.st_dev) + " " +
                                    std::to_string(st.st_ino));
  return store_.root() / "digests" / id.substr(0, 2) / id;
}

std::optional<std::string> FileDigests::find(const std::string& kind, const fs::path& path,
                                             int fd, const struct stat& st) const {
  if (store_.access().shared()) return std::nullopt;
  std::string text;
  try {
    text = read_regular_file(record(kind, path, st), 4096, false);
  } catch (const Error&) {
    return std::nullopt;
  }
  // "<digest> <stamp>": the stamp vouches for the digest, and is made over it.
  const size_t space = text.find(' ');
  if (space != 64 || text.back() != '\n') return std::nullopt;  // not a record of ours
  const std::string digest = text.substr(0, space);
  const std::string stamp = text.substr(space + 1, text.size() - space - 2);
  if (stamp.empty() || stamp != FileStamps::stamp(fd, st, digest)) return std::nullopt;
  return digest;
}

void FileDigests::remember(const std::string& kind, const fs::path& path, int fd,
                           const struct stat& st, const std::string& digest) const {
  if (store_.access().shared() || !store_.writable() || digest.size() != 64 ||
      !FileStamps::settled(st))
    return;
  const std::string stamp = FileStamps::stamp(fd, st, digest);
  if (stamp.empty()) return;
  const fs::path file = record(kind, path, st);
  try {
    store_.access().make_folder(file.parent_path());
    write_file_atomic(file, digest + " " + stamp + "\n", store_.access().file_mode(), true,
                      false);
  } catch (const std::exception& e) {
    log_line(std::string("cache: could not record a file digest: ") + e.what());
  }
}

}  // namespace kiln
