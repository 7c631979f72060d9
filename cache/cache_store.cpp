#include "cache/cache_store.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>

#include <atomic>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>

#include "cache/file_stamps.h"
#include "util/fs.h"
#include "util/log.h"
#include "util/quantity.h"
#include "util/sha256.h"

namespace kiln {
namespace {

namespace fs = std::filesystem;

double now_s() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

// A use time for the LRU order: the wall clock, but strictly increasing within the process,
// so two uses in a row are ordered even when the clock steps back or does not advance.
double use_stamp() {
  static std::mutex mutex;
  static double last = 0;
  std::lock_guard lock(mutex);
  last = std::max(now_s(), last + 1e-6);
  return last;
}

// Failed builds and quarantined entries older than this go at the next sweep.
constexpr double kDebrisAge = 7 * 24 * 3600.0;

// Entries in objects/: (name, folder), in no particular order. Names are not yet validated.
std::vector<std::pair<std::string, fs::path>> entry_folders(const fs::path& objects) {
  std::vector<std::pair<std::string, fs::path>> out;
  std::error_code ec;
  for (const auto& shard : fs::directory_iterator(objects, ec)) {
    if (!shard.is_directory()) continue;
    for (const auto& e : fs::directory_iterator(shard.path(), ec)) {
      out.emplace_back(e.path().filename().string(), e.path());
    }
  }
  return out;
}

double mtime_s(const fs::path& p) {
  struct stat st {};
  if (::stat(p.c_str(), &st) != 0) return 0;
  return static_cast<double>(st.st_mtim.tv_sec) + st.st_mtim.tv_nsec * 1e-9;
}

uint64_t entry_bytes(const EntryMeta& meta, uint64_t meta_json_size) {
  uint64_t total = meta_json_size;
  for (const auto& f : meta.files) total += f.size;
  return total;
}

IndexRow row_of(const EntryMeta& meta, uint64_t meta_json_size, double last_used) {
  IndexRow r;
  r.key = meta.key;
  r.label = meta.label;
  r.family = meta.family;
  r.size = entry_bytes(meta, meta_json_size);
  r.created = meta.created;
  r.last_used = last_used;
  r.compile_ms = meta.compile_ms;
  return r;
}

// Reads one file of an entry without following a symlink, after checking who may write it.
// An entry's file, opened without following a link and checked (regular, trusted, of the
// size meta.json records): the open descriptor, which the caller closes.
int open_entry_file(const fs::path& p, const std::string& name, const CacheAccess& access,
                    std::optional<uint64_t> expect_size, struct stat& st) {
  int fd = ::open(p.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOENT) throw CacheEntryError(name + " is missing");
    throw CacheEntryError(name + " cannot be opened: " + std::strerror(errno));
  }
  try {
    if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode))
      throw CacheEntryError(name + " is not a regular file");
    if (std::string why = access.distrust(st); !why.empty())
      throw CacheEntryError(name + " is not trusted: " + why);
    if (expect_size && static_cast<uint64_t>(st.st_size) != *expect_size) {
      throw CacheEntryError(name + " is " + std::to_string(st.st_size) + " bytes, meta.json says " +
                            std::to_string(*expect_size));
    }
  } catch (...) {
    ::close(fd);
    throw;
  }
  return fd;
}

std::string read_entry_file(const fs::path& p, const std::string& name, const CacheAccess& access,
                            std::optional<uint64_t> expect_size) {
  struct stat st {};
  const int fd = open_entry_file(p, name, access, expect_size, st);
  std::string bytes(static_cast<size_t>(st.st_size), '\0');
  try {
    size_t got = 0;
    while (got < bytes.size()) {
      const ssize_t n = ::read(fd, bytes.data() + got, bytes.size() - got);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) throw CacheEntryError(name + " cannot be read: " + std::strerror(errno));
      got += static_cast<size_t>(n);
    }
  } catch (...) {
    ::close(fd);
    throw;
  }
  ::close(fd);
  return bytes;
}

// The SHA-256 of an entry's open file, hashed while it is read through one small buffer: a
// 100 MB file of prepared weights costs no 100 MB of fresh memory to verify.
std::string hash_entry_fd(int fd, const struct stat& st, const std::string& name) {
  Sha256 h;
  std::vector<char> buf(size_t{1} << 20);
  for (uint64_t got = 0, size = static_cast<uint64_t>(st.st_size); got < size;) {
    const ssize_t n =
        ::pread(fd, buf.data(), static_cast<size_t>(std::min<uint64_t>(buf.size(), size - got)),
                static_cast<off_t>(got));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) throw CacheEntryError(name + " cannot be read: " + std::strerror(errno));
    h.update(buf.data(), static_cast<size_t>(n));
    got += static_cast<uint64_t>(n);
  }
  return h.hex_digest();
}

// Why a folder of the cache must not be trusted ("" when it may be); follows no symlink.
std::string folder_distrust(const fs::path& dir, const CacheAccess& access) {
  struct stat st {};
  if (::lstat(dir.c_str(), &st) != 0) return std::string("cannot be read: ") + std::strerror(errno);
  if (!S_ISDIR(st.st_mode)) return "is not a folder";
  return access.distrust(st);
}

}  // namespace

bool is_cache_key(const std::string& s) {
  if (s.size() != 64) return false;
  for (char c : s) {
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  }
  return true;
}

std::shared_ptr<CacheStore> CacheStore::open(const fs::path& root) {
  static std::mutex mutex;
  static std::map<fs::path, std::shared_ptr<CacheStore>> stores;
  std::lock_guard lock(mutex);
  auto& slot = stores[root];
  // A cache folder removed under a running process (rm -rf) is recreated, not written blind.
  std::error_code ec;
  if (!slot || !fs::exists(root / "objects", ec) ||
      (slot->writable() && !fs::exists(root / "index.sqlite", ec))) {
    slot.reset(new CacheStore(root));
  }
  return slot;
}

uint64_t CacheStore::default_max_size() {
  const char* env = std::getenv("KILN_CACHE_MAX_SIZE");
  if (env && *env) return parse_size(env, "KILN_CACHE_MAX_SIZE");
  return uint64_t{2} << 30;
}

CacheStore::CacheStore(fs::path root)
    : root_(std::move(root)),
      access_(CacheAccess::from_env()),
      signatures_(SignaturePolicy::from_env()) {
  default_max_size();  // a bad KILN_CACHE_MAX_SIZE fails now, not after a compile
  access_.make_folder(root_);
  writable_ = ::access(root_.c_str(), W_OK) == 0;
  for (const char* sub :
       {"objects", "locks", "staging", "scratch", "failed", "quarantine", "trash", "toolchains"}) {
    const fs::path dir = root_ / sub;
    struct stat st {};
    const bool core = std::strcmp(sub, "objects") == 0 || std::strcmp(sub, "locks") == 0;
    if (::lstat(dir.c_str(), &st) == 0 || (core && writable_)) {
      access_.make_folder(dir);
    }
  }
  if (writable_ && ::access((root_ / "locks").c_str(), W_OK) != 0) writable_ = false;
  open_index();
}

std::string CacheStore::publish_blocker() const {
  if (!writable_) return "cache folder '" + root_.string() + "' is read-only";
  if (signatures_.required && !signatures_.signer) {
    return "KILN_CACHE_REQUIRE_SIGNATURES=1 and no KILN_CACHE_SIGNING_KEY to sign with";
  }
  return "";
}

void CacheStore::set_patient(bool patient) {
  std::lock_guard lock(index_mutex_);
  busy_ms_ = patient ? 10000 : kHotBusyMs;
  if (index_) index_->set_busy_timeout(busy_ms_);
  index_retry_at_ = 0;
}

void CacheStore::index_failed(const std::string& what) {
  // The index is an accelerator: say so once per process, then carry on without it.
  if (!warned_index_ || debug_level() >= 2) {
    warned_index_ = true;
    if (debug_level() >= 1 || !writable_) {
      log_line("cache: " + what + " (carrying on without the index; `kiln cache gc` repairs it)");
    }
  }
}

CacheIndex* CacheStore::index() {
  std::lock_guard lock(index_mutex_);
  if (index_) return index_.get();
  if (now_s() < index_retry_at_) return nullptr;
  index_retry_at_ = now_s() + 1.0;
  try {
    open_index();
  } catch (const Error& e) {
    index_failed(e.what());
  }
  return index_.get();
}

void CacheStore::open_index() {
  const fs::path path = root_ / "index.sqlite";
  if (!writable_) {
    index_failed("cache folder '" + root_.string() + "' is read-only");
    return;
  }
  try {
    index_ = std::make_unique<CacheIndex>(path, busy_ms_);
    ::chmod(path.c_str(), access_.file_mode());  // SQLite gives -wal and -shm the same mode
    return;
  } catch (const CacheIndexError& first) {
    if (!first.corrupt()) {
      index_failed(first.what());
      return;
    }
    // One process repairs; the others wait and then find a working index.
    FileLock repair = FileLock::acquire(root_ / "locks" / "index-repair.lock",
                                        FileLock::Mode::kExclusive, access_.file_mode());
    try {
      index_ = std::make_unique<CacheIndex>(path, busy_ms_);
      return;
    } catch (const CacheIndexError& again) {
      if (!again.corrupt()) {
        index_failed(again.what());
        return;
      }
    }
    access_.make_folder(root_ / "quarantine");
    fs::path aside = root_ / "quarantine" / ("index.sqlite." + random_suffix());
    std::error_code ec;
    fs::rename(path, aside, ec);
    for (const char* ext : {"-wal", "-shm"}) {
      fs::path side = path;
      side += ext;
      fs::remove(side, ec);
    }
    warn(std::string(first.what()) + "; moved it to " + aside.string() +
         " and rebuilt it from objects/");
    index_ = std::make_unique<CacheIndex>(path, busy_ms_);
    ::chmod(path.c_str(), access_.file_mode());
  }
  reindex();
}

void CacheStore::mark_dirty() {
  try {
    write_file_atomic(root_ / "index.dirty", "", access_.file_mode(), true);
  } catch (const Error&) {
  }
}

fs::path CacheStore::entry_dir(const std::string& key) const {
  if (!is_cache_key(key)) throw CacheEntryError("'" + key + "' is not a cache key (64 hex digits)");
  return root_ / "objects" / key.substr(0, 2) / key;
}

fs::path CacheStore::lock_path(const std::string& key, const char* kind) const {
  if (!is_cache_key(key)) throw CacheEntryError("'" + key + "' is not a cache key (64 hex digits)");
  return root_ / "locks" / key.substr(0, 2) / (key + "." + kind);
}

FileLock CacheStore::lock_key(const std::string& key) {
  return FileLock::acquire(lock_path(key, "compile"), FileLock::Mode::kExclusive,
                           access_.file_mode());
}

EntryMeta CacheStore::verify(const std::string& key, const fs::path& dir, Hashing hashing,
                             int& files_hashed) {
  for (const fs::path& folder : {dir.parent_path(), dir}) {
    if (std::string why = folder_distrust(folder, access_); !why.empty()) {
      throw CacheEntryError("folder " + folder.string() + " is not trusted: " + why);
    }
  }
  const std::string text = read_entry_file(dir / "meta.json", "meta.json", access_, std::nullopt);
  EntryMeta meta = EntryMeta::parse(text, "meta.json");
  if (meta.key != key) throw CacheEntryError("meta.json describes key " + meta.key);
  if (meta.files.empty()) throw CacheEntryError("meta.json lists no files");
  // The files an entry of its kind needs (the producer's rule): a hit without its plan or
  // module is a bad entry, rebuilt, not a hit that fails on every load.
  if (std::string why = entry_layout_problem(meta); !why.empty()) throw CacheEntryError(why);
  if (signatures_.required) {
    // Checked before any file is hashed: an unsigned entry is refused whatever it holds.
    if (std::string why = signature_problem(meta, signatures_.trusted, std::nullopt);
        !why.empty()) {
      throw CacheEntryError("not signed by a trusted key: " + why);
    }
  }
  // Stamps stand in for hashing only where nobody else can write a file (a private cache).
  const bool stamped = hashing == Hashing::kStamped && !access_.shared();
  const FileStamps stamps = stamped ? FileStamps::read(dir) : FileStamps{};
  FileStamps taken;
  bool hashed = false;
  for (const auto& f : meta.files) {
    struct stat st {};
    const int fd = open_entry_file(dir / f.name, f.name, access_, f.size, st);
    try {
      if (stamps.covers(f.name, fd, st, f.sha256)) {
        taken.add(f.name, fd, st, f.sha256);
      } else {
        if (hash_entry_fd(fd, st, f.name) != f.sha256)
          throw CacheEntryError(f.name + " does not match its SHA-256 in meta.json");
        hashed = true;
        ++files_hashed;
        taken.add(f.name, fd, st, f.sha256);
      }
    } catch (...) {
      ::close(fd);
      throw;
    }
    ::close(fd);
  }
  if (stamped && hashed && writable_ && !taken.empty()) taken.write(dir, access_.file_mode());
  return meta;
}

void CacheStore::move_aside(const fs::path& from, const std::string& name,
                            const std::string& problem) {
  access_.make_folder(root_ / "quarantine");
  const fs::path dest = root_ / "quarantine" / (name + "." + random_suffix());
  std::error_code ec;
  fs::rename(from, dest, ec);
  if (ec) {
    if (ec == std::errc::no_such_file_or_directory) return;  // someone else moved it already
    warn("cache entry " + name + " is bad (" + problem +
         ") and could not be moved aside: " + ec.message());
    return;
  }
  try {
    write_file_atomic(dest / "reason.txt", problem + "\n", access_.file_mode(), true);
  } catch (const Error& e) {
    log_line(std::string("cache: ") + e.what());
  }
  warn("cache entry " + name + " failed verification (" + problem + "); moved it to " +
       dest.string());
}

void CacheStore::quarantine(const std::string& key, const std::string& problem) {
  move_aside(entry_dir(key), key, problem);
  if (CacheIndex* idx = index()) {
    try {
      idx->remove(key);
    } catch (const CacheIndexError& e) {
      mark_dirty();
    }
  }
}

LookupResult CacheStore::lookup(const std::string& key, bool quarantine_bad, Hashing hashing) {
  LookupResult result;
  const fs::path dir = entry_dir(key);
  std::error_code ec;
  if (!fs::exists(dir, ec)) return result;  // a plain miss creates nothing
  // Pin, then look again: once pinned, no gc can take the entry away before it is loaded. In
  // a folder this process cannot write, nobody here can evict either: no pin is needed.
  std::shared_ptr<FileLock> pin;
  if (writable_) {
    pin = std::make_shared<FileLock>(
        FileLock::acquire(lock_path(key, "use"), FileLock::Mode::kShared, access_.file_mode()));
  }
  if (!fs::exists(dir, ec)) return result;
  EntryMeta meta;
  try {
    meta = verify(key, dir, hashing, result.files_hashed);
  } catch (const CacheEntryError& e) {
    result.problem = e.what();
    pin.reset();
    if (!quarantine_bad || !writable_) return result;
    // Move it only under the exclusive use lock, and only if it is still bad: a passing read
    // error must not take away an entry another process is about to load.
    auto use = FileLock::try_acquire(lock_path(key, "use"), FileLock::Mode::kExclusive,
                                     access_.file_mode());
    if (!use) {
      warn("cache entry " + key + " failed verification (" + result.problem +
           ") but another process has it loaded; left in place");
      return result;
    }
    try {
      verify(key, dir, Hashing::kFull, result.files_hashed);
      use->release();
      return lookup(key, false, Hashing::kFull);  // the problem passed
    } catch (const CacheEntryError& again) {
      result.problem = again.what();
    }
    quarantine(key, result.problem);
    return result;
  }
  if (CacheIndex* idx = index()) {
    try {
      if (!idx->find(key)) {  // published while the index was busy: repair its row now
        std::error_code size_ec;
        auto meta_size = fs::file_size(dir / "meta.json", size_ec);
        idx->put(row_of(meta, size_ec ? 0 : meta_size, use_stamp()));
      }
      idx->record_hit(key, use_stamp(),
                      meta.family == kKernelFamily     ? "kernel_hits"
                      : meta.family == kPreparedFamily ? "prepared_hits"
                      : meta.family == kModelFamily    ? "model_hits"
                                                       : "hits");
    } catch (const CacheIndexError& e) {
      index_failed(std::string(e.what()) + " (the entry is used anyway)");
    }
  }
  result.entry = CacheEntry{std::move(meta), dir, std::move(pin)};
  return result;
}

void CacheStore::discard_bad(const std::string& key, const std::string& problem) {
  if (!writable_) {
    warn("cache entry " + key + " is bad (" + problem + ") and the cache is read-only; not used");
    return;
  }
  auto use =
      FileLock::try_acquire(lock_path(key, "use"), FileLock::Mode::kExclusive, access_.file_mode());
  if (!use) {
    warn("cache entry " + key + " is bad (" + problem +
         ") but another process has it loaded; left in place");
    return;
  }
  quarantine(key, problem);
}

WorkFolder CacheStore::new_staging(const std::string& key) {
  if (!is_cache_key(key)) throw CacheEntryError("'" + key + "' is not a cache key");
  return WorkFolder::create(root_ / "staging", key.substr(0, 16), access_);
}

WorkFolder CacheStore::new_scratch(const std::string& prefix) {
  return WorkFolder::create(root_ / "scratch", prefix, access_);
}

fs::path CacheStore::keep_failed(const std::string& key,
                                 const std::vector<std::pair<std::string, std::string>>& files) {
  if (!is_cache_key(key)) throw CacheEntryError("'" + key + "' is not a cache key");
  const fs::path parent = root_ / "failed";
  WorkFolder work = WorkFolder::create(parent, key, access_);
  for (const auto& [name, contents] : files) {
    write_file_atomic(work.path() / name, contents, access_.file_mode(), true);
  }
  const fs::path final_dir = parent / key;
  std::error_code ec;
  if (fs::exists(final_dir, ec)) {
    access_.make_folder(root_ / "trash");
    fs::path old = root_ / "trash" / (key + ".failed." + random_suffix());
    fs::rename(final_dir, old, ec);
    fs::remove_all(old, ec);
  }
  fs::rename(work.path(), final_dir, ec);
  if (ec) return work.path();  // another failing compile kept its copy: keep ours beside it
  work.disown();
  return final_dir;
}

CacheEntry CacheStore::publish_fetched(
    EntryMeta meta, const std::vector<std::pair<std::string, std::string>>& files) {
  WorkFolder staging = new_staging(meta.key);
  if (files.size() != meta.files.size())
    throw UserError("publish_fetched: the files do not match meta.json's list");
  for (size_t i = 0; i < files.size(); ++i) {
    if (files[i].first != meta.files[i].name || files[i].second.size() != meta.files[i].size)
      throw UserError("publish_fetched: " + files[i].first + " does not match meta.json");
    write_file_atomic(staging.path() / files[i].first, files[i].second, access_.file_mode(), true);
  }
  return publish_folder(std::move(staging), std::move(meta), true);
}

CacheEntry CacheStore::publish(WorkFolder staging, EntryMeta meta) {
  return publish_folder(std::move(staging), std::move(meta), false);
}

CacheEntry CacheStore::publish_folder(WorkFolder staging, EntryMeta meta, bool fetched) {
  const fs::path& dir_in = staging.path();
  for (auto& f : meta.files) {
    if (fetched) continue;  // written from bytes whose sizes and hashes were just checked
    const fs::path p = dir_in / f.name;
    // Hashed through a small buffer: a file of weights read whole cost its size in fresh
    // memory, more than the hashing.
    const int fd = ::open(p.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) throw UserError("cannot open '" + p.string() + "': " + std::strerror(errno));
    const FdCloser closer{fd};
    struct stat st {};
    if (::fstat(fd, &st) != 0)
      throw UserError("cannot stat '" + p.string() + "': " + std::strerror(errno));
    f.size = static_cast<uint64_t>(st.st_size);
    f.sha256 = hash_entry_fd(fd, st, p.string());
    if (::chmod(p.c_str(), access_.file_mode()) != 0) {
      throw UserError("cannot set the mode of '" + p.string() + "': " + std::strerror(errno));
    }
  }
  if (signatures_.signer) meta.signatures.push_back(sign_entry(meta, *signatures_.signer, ""));
  const std::string meta_json = meta.to_json();
  write_file_atomic(dir_in / "meta.json", meta_json, access_.file_mode(), true);

  const fs::path dir = entry_dir(meta.key);
  auto pin = std::make_shared<FileLock>(
      FileLock::acquire(lock_path(meta.key, "use"), FileLock::Mode::kShared, access_.file_mode()));
  access_.make_folder(dir.parent_path());
  std::error_code ec;
  fs::rename(dir_in, dir, ec);
  if (ec) {
    // Another process published first (only possible without the key lock): use theirs.
    LookupResult existing = lookup(meta.key, true);
    if (existing.entry) return std::move(*existing.entry);
    throw UserError("cannot publish cache entry '" + dir.string() + "': " + ec.message());
  }
  staging.disown();
  if (CacheIndex* idx = index()) {
    try {
      if (fs::exists(root_ / "index.dirty", ec)) repair_index();
      IndexRow row = row_of(meta, meta_json.size(), use_stamp());
      idx->put(row);
      if (fetched) {
        // A remote hit: the tier's counters say so.
      } else if (meta.family == kKernelFamily) {
        idx->add_to_counter("kernel_compiles", 1);
      } else if (meta.family == kPreparedFamily) {
        idx->add_to_counter("prepared_stores", 1);
      } else if (meta.family == kModelFamily) {
        idx->add_to_counter("model_stores", 1);
      } else {
        idx->record_compile();
      }
      uint64_t cap = default_max_size();
      if (idx->totals().bytes + debris_bytes() > cap) gc(cap, std::nullopt);
    } catch (const CacheIndexError& e) {
      mark_dirty();  // the next publish, gc or listing adds the missing row
      index_failed(std::string(e.what()) + " (the entry was published)");
    }
  } else {
    mark_dirty();
  }
  return CacheEntry{std::move(meta), dir, std::move(pin)};
}

std::optional<std::string> CacheStore::read_private(const fs::path& relative) {
  fs::path p = root_;
  for (const auto& part : relative.parent_path()) {
    p /= part;
    if (std::string why = folder_distrust(p, access_); !why.empty()) {
      if (fs::exists(p)) warn("ignoring " + p.string() + ": " + why);
      return std::nullopt;
    }
  }
  try {
    return read_entry_file(root_ / relative, (root_ / relative).string(), access_, std::nullopt);
  } catch (const CacheEntryError& e) {
    if (fs::exists(root_ / relative)) warn(std::string("ignoring ") + e.what());
    return std::nullopt;
  }
}

void CacheStore::write_private(const fs::path& relative, const std::string& contents) {
  if (!writable_) return;
  access_.make_folder((root_ / relative).parent_path());
  write_file_atomic(root_ / relative, contents, access_.file_mode(), true);
}

void CacheStore::count(const std::string& counter, double by) {
  if (CacheIndex* idx = index()) {
    try {
      idx->add_to_counter(counter.c_str(), by);
    } catch (const CacheIndexError& e) {
      index_failed(e.what());
    }
  }
}

void CacheStore::record_miss() {
  if (CacheIndex* idx = index()) {
    try {
      idx->record_miss();
    } catch (const CacheIndexError& e) {
      index_failed(e.what());
    }
  }
}

std::optional<EntryMeta> CacheStore::read_meta(const std::string& key) {
  try {
    return EntryMeta::parse(read_file(entry_dir(key) / "meta.json"), key + "/meta.json");
  } catch (const UserError&) {
    return std::nullopt;
  }
}

namespace {

CacheIndex& need(CacheIndex* idx, const fs::path& root) {
  if (!idx) {
    throw UserError("the cache index '" + (root / "index.sqlite").string() +
                    "' cannot be used now (busy, locked or read-only); entries still load, "
                    "retry later or run `kiln cache reindex`");
  }
  return *idx;
}

}  // namespace

std::vector<std::string> CacheStore::resolve_prefix(const std::string& prefix) {
  return need(index(), root_).keys_with_prefix(prefix);
}

std::optional<IndexRow> CacheStore::row(const std::string& key) {
  return need(index(), root_).find(key);
}
std::vector<IndexRow> CacheStore::list() {
  std::error_code ec;
  if (fs::exists(root_ / "index.dirty", ec)) repair_index();
  return need(index(), root_).list(CacheIndex::Order::kMostRecent);
}
std::vector<IndexRow> CacheStore::with_family(const std::string& family) {
  return need(index(), root_).with_family(family);
}
std::vector<IndexRow> CacheStore::with_label(const std::string& label) {
  return need(index(), root_).with_label(label);
}
IndexTotals CacheStore::stats() {
  std::error_code ec;
  if (fs::exists(root_ / "index.dirty", ec)) repair_index();
  return need(index(), root_).totals();
}

uint64_t CacheStore::debris_bytes() {
  return folder_bytes(root_ / "failed") + folder_bytes(root_ / "quarantine");
}

void CacheStore::repair_index() {
  CacheIndex& idx = need(index(), root_);
  std::map<std::string, bool> known;
  for (const auto& r : idx.list(CacheIndex::Order::kLeastRecent)) {
    if (!is_cache_key(r.key)) {
      // A row no kiln wrote: it never becomes a path.
      warn("cache index: dropping a row whose key is not a cache key ('" + r.key.substr(0, 80) +
           "')");
      idx.remove(r.key);
      continue;
    }
    known[r.key] = true;
  }
  for (const auto& [name, dir] : entry_folders(root_ / "objects")) {
    if (!is_cache_key(name) || known.count(name)) continue;
    try {
      std::string text = read_file(dir / "meta.json");
      EntryMeta meta = EntryMeta::parse(text, (dir / "meta.json").string());
      if (meta.key != name) continue;  // verify/lookup quarantine it
      idx.put(row_of(meta, text.size(), mtime_s(dir)));
    } catch (const UserError&) {
      continue;
    }
  }
  std::error_code ec;
  fs::remove(root_ / "index.dirty", ec);
}

bool CacheStore::evict(const IndexRow& row) {
  if (!is_cache_key(row.key)) return false;
  auto use = FileLock::try_acquire(lock_path(row.key, "use"), FileLock::Mode::kExclusive,
                                   access_.file_mode());
  if (!use) return false;
  access_.make_folder(root_ / "trash");
  const fs::path trash = root_ / "trash" / (row.key + "." + random_suffix());
  std::error_code ec;
  fs::rename(entry_dir(row.key), trash, ec);
  if (CacheIndex* idx = index()) idx->remove(row.key);
  use->unlink_and_release();
  if (auto compile = FileLock::try_acquire(lock_path(row.key, "compile"),
                                           FileLock::Mode::kExclusive, access_.file_mode())) {
    compile->unlink_and_release();
  }
  fs::remove_all(trash, ec);
  return true;
}

int CacheStore::sweep(double debris_age_s) {
  int swept = 0;
  std::error_code ec;
  // Work folders are live exactly while their owner holds their lock.
  swept += WorkFolder::sweep(root_ / "staging");
  swept += WorkFolder::sweep(root_ / "scratch");
  swept += WorkFolder::sweep(root_ / "failed", debris_age_s);
  swept += WorkFolder::sweep(root_ / "quarantine", debris_age_s);
  // trash/ holds only what an evict renamed away and is deleting: nothing there is in use.
  for (const auto& e : fs::directory_iterator(root_ / "trash", ec)) {
    swept += fs::remove_all(e.path(), ec) > 0;
  }
  // Lock files of keys with no entry (a failed compile, an evicted entry): unused ones go.
  for (const auto& shard : fs::directory_iterator(root_ / "locks", ec)) {
    if (!shard.is_directory()) continue;
    for (const auto& lock : fs::directory_iterator(shard.path(), ec)) {
      std::string key = lock.path().stem().string();
      if (!is_cache_key(key) || fs::exists(entry_dir(key), ec)) continue;
      if (auto held = FileLock::try_acquire(lock.path(), FileLock::Mode::kExclusive)) {
        held->unlink_and_release();
        ++swept;
      }
    }
  }
  if (CacheIndex* idx = index()) {
    for (const auto& row : idx->list(CacheIndex::Order::kLeastRecent)) {
      if (!fs::exists(entry_dir(row.key), ec)) {
        idx->remove(row.key);
        ++swept;
      }
    }
  }
  return swept;
}

int CacheStore::drop_debris(uint64_t& total, uint64_t cap) {
  // Failed builds and quarantined entries go first, oldest first: nobody loads them.
  std::vector<std::pair<double, fs::path>> items;
  std::error_code ec;
  for (const char* sub : {"failed", "quarantine"}) {
    for (const auto& e : fs::directory_iterator(root_ / sub, ec)) {
      if (e.path().extension() == ".lock") continue;
      items.emplace_back(mtime_s(e.path()), e.path());
    }
  }
  std::sort(items.begin(), items.end());
  int removed = 0;
  for (const auto& [mtime, p] : items) {
    if (total <= cap) break;
    uint64_t bytes = folder_bytes(p);
    if (WorkFolder::remove_if_abandoned(p)) {
      total -= std::min(total, bytes);
      ++removed;
    }
  }
  return removed;
}

GcReport CacheStore::gc(std::optional<uint64_t> max_size, std::optional<double> max_age_s,
                        bool sweep_too) {
  GcReport report;
  repair_index();
  if (sweep_too) report.swept = sweep(max_age_s ? *max_age_s : kDebrisAge);
  CacheIndex& idx = need(index(), root_);
  const auto rows = idx.list(CacheIndex::Order::kLeastRecent);
  uint64_t total = debris_bytes();
  for (const auto& r : rows) total += r.size;
  if (max_size && total > *max_size) report.swept += drop_debris(total, *max_size);
  const double now = now_s();
  for (const auto& r : rows) {
    bool expired = max_age_s && now - r.last_used > *max_age_s;
    bool over = max_size && total > *max_size;
    if (!expired && !over) continue;
    if (evict(r)) {
      ++report.removed;
      report.removed_bytes += r.size;
      total -= std::min(total, r.size);
    } else {
      report.in_use.push_back(r.key);
    }
  }
  return report;
}

VerifyReport CacheStore::verify_all() {
  VerifyReport report;
  for (const auto& [name, dir] : entry_folders(root_ / "objects")) {
    if (!is_cache_key(name)) {
      move_aside(dir, "not-a-key", "folder name '" + name + "' is not a cache key");
      report.bad.push_back(name + ": not a cache key; moved to quarantine/");
      continue;
    }
    LookupResult r = lookup(name, true, Hashing::kFull);
    if (r.entry) {
      ++report.good;
    } else if (!r.problem.empty()) {
      report.bad.push_back(name + ": " + r.problem);
    }
  }
  return report;
}

GcReport CacheStore::clear() {
  reindex();
  GcReport report = gc(uint64_t{0}, std::nullopt, true);
  for (const char* sub : {"quarantine", "failed", "scratch", "staging"})
    report.swept += WorkFolder::sweep(root_ / sub);
  std::error_code ec;
  fs::remove_all(root_ / "digests", ec);  // remembered file digests (cache/file_digests.h)
  need(index(), root_).reset_counters();
  return report;
}

int CacheStore::reindex() {
  CacheIndex& idx = need(index(), root_);
  std::map<std::string, IndexRow> old;
  for (auto& r : idx.list(CacheIndex::Order::kLeastRecent)) old[r.key] = r;
  std::vector<IndexRow> rows;
  for (const auto& [name, dir] : entry_folders(root_ / "objects")) {
    if (!is_cache_key(name)) {
      warn("reindex: skipping " + dir.string() + ": not a cache key (run `kiln cache verify`)");
      continue;
    }
    std::string text;
    EntryMeta meta;
    try {
      text = read_file(dir / "meta.json");
      meta = EntryMeta::parse(text, (dir / "meta.json").string());
      if (meta.key != name) throw CacheEntryError("meta.json describes key " + meta.key);
    } catch (const UserError& e) {
      warn(std::string("reindex: skipping ") + dir.string() + ": " + e.what() +
           " (run `kiln cache verify`)");
      continue;
    }
    IndexRow r = row_of(meta, text.size(), mtime_s(dir));
    if (auto it = old.find(name); it != old.end()) {
      r.hits = it->second.hits;
      r.last_used = std::max(r.last_used, it->second.last_used);
    }
    rows.push_back(std::move(r));
  }
  idx.replace_all(rows);
  std::error_code ec;
  fs::remove(root_ / "index.dirty", ec);
  return static_cast<int>(rows.size());
}

std::string format_size(uint64_t bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(bytes);
  int u = 0;
  while (v >= 1024 && u < 4) {
    v /= 1024;
    ++u;
  }
  char buf[32];
  std::snprintf(buf, sizeof buf, u == 0 ? "%.0f %s" : "%.1f %s", v, units[u]);
  return buf;
}

}  // namespace kiln
