#include "cache/work_folder.h"

#include <sys/stat.h>

#include <chrono>
#include <random>

#include "util/error.h"
#include "util/fs.h"

namespace kiln {
namespace fs = std::filesystem;

std::string random_suffix() {
  static thread_local std::mt19937_64 gen{std::random_device{}()};
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(gen()));
  return buf;
}

uint64_t folder_bytes(const fs::path& dir) {
  uint64_t total = 0;
  struct stat top {};
  if (::lstat(dir.c_str(), &top) != 0) return 0;
  if (S_ISREG(top.st_mode)) return static_cast<uint64_t>(top.st_size);
  std::error_code ec;
  for (auto it = fs::recursive_directory_iterator(dir, ec); !ec && it != fs::end(it);
       it.increment(ec)) {
    struct stat st {};
    if (::lstat(it->path().c_str(), &st) == 0 && S_ISREG(st.st_mode))
      total += static_cast<uint64_t>(st.st_size);
  }
  return total;
}

double age_s(const fs::path& p) {
  struct stat st {};
  if (::lstat(p.c_str(), &st) != 0) return 0;
  double mtime = static_cast<double>(st.st_mtim.tv_sec) + st.st_mtim.tv_nsec * 1e-9;
  double now =
      std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  return now - mtime;
}

WorkFolder WorkFolder::create(const fs::path& parent, const std::string& prefix,
                              const CacheAccess& access) {
  access.make_folder(parent);
  fs::path dir = parent / (prefix + "." + random_suffix());
  fs::path lock_path = dir;
  lock_path += ".lock";
  // Lock first, then create: a sweeper never sees the folder without its live lock.
  FileLock lock = FileLock::acquire(lock_path, FileLock::Mode::kExclusive, access.file_mode());
  make_dirs(dir, access.dir_mode());
  return WorkFolder(std::move(dir), std::move(lock));
}

WorkFolder& WorkFolder::operator=(WorkFolder&& other) noexcept {
  if (this != &other) {
    remove();
    path_ = std::move(other.path_);
    lock_ = std::move(other.lock_);
    owned_ = other.owned_;
  }
  return *this;
}

WorkFolder::~WorkFolder() { remove(); }

void WorkFolder::disown() { owned_ = false; }

void WorkFolder::remove() {
  if (!lock_) return;
  std::error_code ec;
  if (owned_) fs::remove_all(path_, ec);
  lock_->unlink_and_release();
  lock_.reset();
}

bool WorkFolder::remove_if_abandoned(const fs::path& p) {
  fs::path lock_path = p;
  lock_path += ".lock";
  auto held = FileLock::try_acquire(lock_path, FileLock::Mode::kExclusive);
  if (!held) return false;  // its owner is alive
  std::error_code ec;
  bool removed = fs::remove_all(p, ec) > 0;
  held->unlink_and_release();
  return removed;
}

int WorkFolder::sweep(const fs::path& parent, double min_age_s) {
  int swept = 0;
  std::error_code ec;
  std::vector<fs::path> names;
  for (const auto& e : fs::directory_iterator(parent, ec)) names.push_back(e.path());
  for (const fs::path& p : names) {
    if (p.extension() == ".lock") {
      fs::path folder = p;
      folder.replace_extension();
      if (fs::exists(folder, ec)) continue;  // handled with its folder
      // An orphan lock: drop it unless someone holds it (its folder may be about to appear).
      if (auto held = FileLock::try_acquire(p, FileLock::Mode::kExclusive))
        held->unlink_and_release();
      continue;
    }
    if (min_age_s > 0 && age_s(p) < min_age_s) continue;
    swept += remove_if_abandoned(p);
  }
  return swept;
}

}  // namespace kiln
