#include "cache/file_stamps.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <ctime>
#include <fstream>
#include <sstream>
#include <vector>

#include "util/fs.h"
#include "util/log.h"
#include "util/sha256.h"

namespace kiln {

namespace {

constexpr size_t kSample = 4096;

int64_t ns_of(const struct timespec& t) { return int64_t{t.tv_sec} * 1000000000 + t.tv_nsec; }

// The SHA-256 of the file's first and last 4 KiB (the whole file when it is smaller), or ""
// when they cannot be read.
std::string sample_hash(int fd, const struct stat& st) {
  const auto size = static_cast<uint64_t>(st.st_size);
  std::vector<char> buf(kSample);
  Sha256 h;
  const auto take = [&](uint64_t at, size_t n) {
    size_t got = 0;
    while (got < n) {
      const ssize_t r = ::pread(fd, buf.data() + got, n - got, static_cast<off_t>(at + got));
      if (r < 0 && errno == EINTR) continue;
      if (r <= 0) return false;
      got += static_cast<size_t>(r);
    }
    h.update(buf.data(), n);
    return true;
  };
  const size_t head = static_cast<size_t>(std::min<uint64_t>(size, kSample));
  if (!take(0, head)) return "";
  if (size > kSample) {
    const size_t tail = static_cast<size_t>(std::min<uint64_t>(size - kSample, kSample));
    if (!take(size - tail, tail)) return "";
  }
  return h.hex_digest();
}

std::string stamp_of(int fd, const struct stat& st, const std::string& sha256) {
  const std::string sample = sample_hash(fd, st);
  if (sample.empty()) return "";
  std::ostringstream line;
  line << st.st_dev << ' ' << st.st_ino << ' ' << st.st_size << ' ' << ns_of(st.st_mtim) << ' '
       << ns_of(st.st_ctim) << ' ' << sha256 << ' ' << sample;
  return line.str();
}

bool plain_name(const std::string& name) {
  return !name.empty() && std::none_of(name.begin(), name.end(), [](char c) {
    return c == '\t' || c == '\n' || c == '\r';
  });
}

}  // namespace

FileStamps FileStamps::read(const std::filesystem::path& dir) {
  FileStamps out;
  std::ifstream in(dir / kFileName);
  std::string line;
  while (std::getline(in, line)) {
    const size_t tab = line.find('\t');
    if (tab == std::string::npos || tab == 0) return FileStamps{};  // not ours: trust none
    out.stamps_[line.substr(0, tab)] = line.substr(tab + 1);
  }
  return out;
}

std::string FileStamps::stamp(int fd, const struct stat& st, const std::string& digest) {
  return stamp_of(fd, st, digest);
}

bool FileStamps::settled(const struct stat& st) {
  // A write in the same clock tick as the one that stamped a change time leaves it as it was:
  // a stamp is only taken once the tick has surely passed. A file system that keeps whole
  // seconds (every time's nanoseconds zero) needs two of them.
  struct timespec now {};
  ::clock_gettime(CLOCK_REALTIME, &now);
  const bool coarse = st.st_ctim.tv_nsec == 0 && st.st_mtim.tv_nsec == 0;
  const int64_t margin = coarse ? int64_t{2000000000} : int64_t{50000000};
  return ns_of(now) - ns_of(st.st_ctim) >= margin;
}

bool FileStamps::covers(const std::string& name, int fd, const struct stat& st,
                        const std::string& sha256) const {
  auto it = stamps_.find(name);
  if (it == stamps_.end()) return false;
  return it->second == stamp_of(fd, st, sha256);
}

void FileStamps::add(const std::string& name, int fd, const struct stat& st,
                     const std::string& sha256) {
  if (!plain_name(name) || !settled(st)) return;
  std::string stamp = stamp_of(fd, st, sha256);
  if (!stamp.empty()) stamps_[name] = std::move(stamp);
}

void FileStamps::write(const std::filesystem::path& dir, mode_t mode) const {
  std::string text;
  for (const auto& [name, stamp] : stamps_) text += name + '\t' + stamp + '\n';
  try {
    write_file_atomic(dir / kFileName, text, mode, true, false);
  } catch (const std::exception& e) {
    log_line(std::string("cache: could not record file stamps: ") + e.what());
  }
}

}  // namespace kiln
