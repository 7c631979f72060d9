#include "cache/cache_store.h"

#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>

#include "util/fs.h"
#include "util/log.h"
#include "util/sha256.h"

namespace kiln {
namespace {

namespace fs = std::filesystem;

double now_s() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

std::string unique_suffix() {
  static std::atomic<int> counter{0};
  return std::to_string(::getpid()) + "." + std::to_string(counter++);
}

bool is_key(const std::string& s) {
  if (s.size() != 64) return false;
  for (char c : s) {
    if (!std::isxdigit(static_cast<unsigned char>(c)) ||
        std::isupper(static_cast<unsigned char>(c)))
      return false;
  }
  return true;
}

// Entries in objects/: (key, folder), in no particular order.
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

// A staging folder is stale when the process that made it is gone (its pid is in the name).
bool staging_is_stale(const fs::path& p) {
  std::string name = p.filename().string();
  auto dot = name.find('.');
  if (dot == std::string::npos) return true;
  long pid = std::strtol(name.c_str() + dot + 1, nullptr, 10);
  if (pid <= 0) return true;
  if (::kill(static_cast<pid_t>(pid), 0) != 0 && errno == ESRCH) return true;
  return now_s() - mtime_s(p) > 24 * 3600;  // a pid reused by an unrelated process
}

}  // namespace

std::shared_ptr<CacheStore> CacheStore::open(const fs::path& root) {
  static std::mutex mutex;
  static std::map<fs::path, std::shared_ptr<CacheStore>> stores;
  std::lock_guard lock(mutex);
  auto& slot = stores[root];
  // A cache folder removed under a running process (rm -rf) is recreated, not written blind.
  std::error_code ec;
  if (!slot || !fs::exists(root / "index.sqlite", ec)) slot.reset(new CacheStore(root));
  return slot;
}

uint64_t CacheStore::default_max_size() {
  const char* env = std::getenv("KILN_CACHE_MAX_SIZE");
  if (env && *env) return parse_size(env, "KILN_CACHE_MAX_SIZE");
  return uint64_t{2} << 30;
}

CacheStore::CacheStore(fs::path root) : root_(std::move(root)) {
  default_max_size();  // a bad KILN_CACHE_MAX_SIZE fails now, not after a compile

  for (const char* sub : {"objects", "locks", "staging"}) {
    std::error_code ec;
    fs::create_directories(root_ / sub, ec);
    if (ec)
      throw UserError("cannot create cache folder '" + (root_ / sub).string() +
                      "': " + ec.message());
  }
  open_index();
}

void CacheStore::open_index() {
  const fs::path path = root_ / "index.sqlite";
  try {
    index_ = std::make_unique<CacheIndex>(path);
    return;
  } catch (const CacheIndexError& first) {
    if (!first.corrupt()) throw;
    // One process repairs; the others wait and then find a working index.
    FileLock repair =
        FileLock::acquire(root_ / "locks" / "index-repair.lock", FileLock::Mode::kExclusive);
    try {
      index_ = std::make_unique<CacheIndex>(path);
      return;
    } catch (const CacheIndexError& again) {
      if (!again.corrupt()) throw;
    }
    fs::path aside = root_ / "quarantine" / ("index.sqlite." + unique_suffix());
    std::error_code ec;
    fs::create_directories(aside.parent_path(), ec);
    fs::rename(path, aside, ec);
    for (const char* ext : {"-wal", "-shm"}) {
      fs::path side = path;
      side += ext;
      fs::remove(side, ec);
    }
    warn(std::string(first.what()) + "; moved it to " + aside.string() +
         " and rebuilt it from objects/");
    index_ = std::make_unique<CacheIndex>(path);
    reindex();
  }
}

fs::path CacheStore::entry_dir(const std::string& key) const {
  return root_ / "objects" / key.substr(0, 2) / key;
}

fs::path CacheStore::lock_path(const std::string& key, const char* kind) const {
  return root_ / "locks" / key.substr(0, 2) / (key + "." + kind);
}

FileLock CacheStore::lock_key(const std::string& key) {
  return FileLock::acquire(lock_path(key, "compile"), FileLock::Mode::kExclusive);
}

EntryMeta CacheStore::verify(const std::string& key, const fs::path& dir) {
  const fs::path meta_path = dir / "meta.json";
  std::string text;
  try {
    text = read_file(meta_path);
  } catch (const UserError&) {
    throw CacheEntryError("meta.json is missing");
  }
  EntryMeta meta = EntryMeta::parse(text, "meta.json");
  if (meta.key != key) throw CacheEntryError("meta.json describes key " + meta.key);
  if (meta.files.empty()) throw CacheEntryError("meta.json lists no files");
  for (const auto& f : meta.files) {
    const fs::path p = dir / f.name;
    struct stat st {};
    if (::stat(p.c_str(), &st) != 0) throw CacheEntryError(f.name + " is missing");
    if (static_cast<uint64_t>(st.st_size) != f.size) {
      throw CacheEntryError(f.name + " is " + std::to_string(st.st_size) +
                            " bytes, meta.json says " + std::to_string(f.size));
    }
    std::string bytes;
    try {
      bytes = read_file(p);
    } catch (const UserError& e) {
      throw CacheEntryError(f.name + " cannot be read: " + e.what());
    }
    if (sha256_hex(bytes) != f.sha256)
      throw CacheEntryError(f.name + " does not match its SHA-256 in meta.json");
  }
  return meta;
}

void CacheStore::quarantine(const std::string& key, const std::string& problem) {
  const fs::path dir = entry_dir(key);
  const fs::path dest = root_ / "quarantine" / (key + "." + unique_suffix());
  std::error_code ec;
  fs::create_directories(dest.parent_path(), ec);
  fs::rename(dir, dest, ec);
  if (ec) {
    if (ec == std::errc::no_such_file_or_directory) return;  // someone else moved it already
    warn("cache entry " + key + " is bad (" + problem +
         ") and could not be moved aside: " + ec.message());
    return;
  }
  try {
    write_file_atomic(dest / "reason.txt", problem + "\n");
    index_->remove(key);
  } catch (const Error& e) {
    log_line(std::string("cache: ") + e.what());
  }
  warn("cache entry " + key + " failed verification (" + problem + "); moved it to " +
       dest.string());
}

LookupResult CacheStore::lookup(const std::string& key, bool quarantine_bad) {
  LookupResult result;
  const fs::path dir = entry_dir(key);
  std::error_code ec;
  if (!fs::exists(dir, ec)) return result;  // a plain miss creates nothing
  // Pin, then look again: once pinned, no gc can take the entry away before it is loaded.
  auto pin =
      std::make_shared<FileLock>(FileLock::acquire(lock_path(key, "use"), FileLock::Mode::kShared));
  if (!fs::exists(dir, ec)) return result;
  EntryMeta meta;
  try {
    meta = verify(key, dir);
  } catch (const CacheEntryError& e) {
    result.problem = e.what();
    if (quarantine_bad) quarantine(key, result.problem);
    return result;
  }
  try {
    if (!index_->find(key)) {
      std::error_code size_ec;
      auto meta_size = fs::file_size(dir / "meta.json", size_ec);
      index_->put(row_of(meta, size_ec ? 0 : meta_size, now_s()));
    }
    index_->record_hit(key, now_s());
  } catch (const CacheIndexError& e) {
    warn(std::string(e.what()) + " (the entry is used anyway)");
  }
  result.entry = CacheEntry{std::move(meta), dir, std::move(pin)};
  return result;
}

fs::path CacheStore::new_staging(const std::string& key) {
  fs::path p = root_ / "staging" / (key.substr(0, 16) + "." + unique_suffix());
  std::error_code ec;
  fs::create_directories(p, ec);
  if (ec) throw UserError("cannot create staging folder '" + p.string() + "': " + ec.message());
  return p;
}

CacheEntry CacheStore::publish(const fs::path& staging, EntryMeta meta) {
  for (auto& f : meta.files) {
    std::string bytes = read_file(staging / f.name);
    f.size = bytes.size();
    f.sha256 = sha256_hex(bytes);
  }
  const std::string meta_json = meta.to_json();
  write_file_atomic(staging / "meta.json", meta_json);

  const fs::path dir = entry_dir(meta.key);
  auto pin = std::make_shared<FileLock>(
      FileLock::acquire(lock_path(meta.key, "use"), FileLock::Mode::kShared));
  std::error_code ec;
  fs::create_directories(dir.parent_path(), ec);
  fs::rename(staging, dir, ec);
  if (ec) {
    fs::remove_all(staging, ec);
    // Another process published first (only possible without the key lock): use theirs.
    LookupResult existing = lookup(meta.key, true);
    if (existing.entry) return std::move(*existing.entry);
    throw UserError("cannot publish cache entry '" + dir.string() + "'");
  }
  try {
    IndexRow row = row_of(meta, meta_json.size(), now_s());
    index_->put(row);
    index_->record_compile();
    uint64_t cap = default_max_size();
    if (index_->totals().bytes > cap) gc(cap, std::nullopt);
  } catch (const CacheIndexError& e) {
    warn(std::string(e.what()) +
         " (the entry was published; `kiln cache reindex` repairs the index)");
  }
  return CacheEntry{std::move(meta), dir, std::move(pin)};
}

void CacheStore::record_miss() {
  try {
    index_->record_miss();
  } catch (const CacheIndexError& e) {
    log_line(std::string("cache: ") + e.what());
  }
}

std::optional<EntryMeta> CacheStore::read_meta(const std::string& key) {
  try {
    return EntryMeta::parse(read_file(entry_dir(key) / "meta.json"), key + "/meta.json");
  } catch (const UserError&) {
    return std::nullopt;
  }
}

std::vector<std::string> CacheStore::resolve_prefix(const std::string& prefix) {
  return index_->keys_with_prefix(prefix);
}

std::optional<IndexRow> CacheStore::row(const std::string& key) { return index_->find(key); }
std::vector<IndexRow> CacheStore::list() { return index_->list(CacheIndex::Order::kMostRecent); }
std::vector<IndexRow> CacheStore::with_family(const std::string& family) {
  return index_->with_family(family);
}
std::vector<IndexRow> CacheStore::with_label(const std::string& label) {
  return index_->with_label(label);
}
IndexTotals CacheStore::stats() { return index_->totals(); }

bool CacheStore::evict(const IndexRow& row) {
  auto use = FileLock::try_acquire(lock_path(row.key, "use"), FileLock::Mode::kExclusive);
  if (!use) return false;
  const fs::path trash = root_ / "trash" / (row.key + "." + unique_suffix());
  std::error_code ec;
  fs::create_directories(trash.parent_path(), ec);
  fs::rename(entry_dir(row.key), trash, ec);
  index_->remove(row.key);
  use->unlink_and_release();
  if (auto compile =
          FileLock::try_acquire(lock_path(row.key, "compile"), FileLock::Mode::kExclusive)) {
    compile->unlink_and_release();
  }
  fs::remove_all(trash, ec);
  return true;
}

int CacheStore::sweep() {
  int swept = 0;
  std::error_code ec;
  // Names are "<prefix>.<pid>.<n>": a folder whose process is gone is abandoned.
  for (const char* sub : {"staging", "scratch", "trash"}) {
    for (const auto& e : fs::directory_iterator(root_ / sub, ec)) {
      if (staging_is_stale(e.path())) swept += fs::remove_all(e.path(), ec) > 0;
    }
  }
  // Lock files of keys with no entry (a failed compile, an evicted entry): unused ones go.
  for (const auto& shard : fs::directory_iterator(root_ / "locks", ec)) {
    if (!shard.is_directory()) continue;
    for (const auto& lock : fs::directory_iterator(shard.path(), ec)) {
      std::string key = lock.path().stem().string();
      if (!is_key(key) || fs::exists(entry_dir(key), ec)) continue;
      if (auto held = FileLock::try_acquire(lock.path(), FileLock::Mode::kExclusive)) {
        held->unlink_and_release();
        ++swept;
      }
    }
  }
  for (const auto& row : index_->list(CacheIndex::Order::kLeastRecent)) {
    if (!fs::exists(entry_dir(row.key), ec)) {
      index_->remove(row.key);
      ++swept;
    }
  }
  return swept;
}

GcReport CacheStore::gc(std::optional<uint64_t> max_size, std::optional<double> max_age_s,
                        bool sweep_too) {
  GcReport report;
  if (sweep_too) report.swept = sweep();
  const auto rows = index_->list(CacheIndex::Order::kLeastRecent);
  uint64_t total = 0;
  for (const auto& r : rows) total += r.size;
  const double now = now_s();
  for (const auto& r : rows) {
    bool expired = max_age_s && now - r.last_used > *max_age_s;
    bool over = max_size && total > *max_size;
    if (!expired && !over) continue;
    if (evict(r)) {
      ++report.removed;
      report.removed_bytes += r.size;
      total -= r.size;
    } else {
      report.in_use.push_back(r.key);
    }
  }
  return report;
}

VerifyReport CacheStore::verify_all() {
  VerifyReport report;
  for (const auto& [name, dir] : entry_folders(root_ / "objects")) {
    if (!is_key(name)) {
      std::error_code ec;
      fs::path dest = root_ / "quarantine" / (name + "." + unique_suffix());
      fs::create_directories(dest.parent_path(), ec);
      fs::rename(dir, dest, ec);
      report.bad.push_back(name + ": not a cache key; moved to " + dest.string());
      continue;
    }
    FileLock lock = lock_key(name);
    try {
      verify(name, dir);
      ++report.good;
    } catch (const CacheEntryError& e) {
      quarantine(name, e.what());
      report.bad.push_back(name + ": " + e.what());
    }
  }
  return report;
}

GcReport CacheStore::clear() {
  reindex();
  GcReport report = gc(uint64_t{0}, std::nullopt, true);
  std::error_code ec;
  for (const char* sub : {"quarantine", "failed", "scratch"}) fs::remove_all(root_ / sub, ec);
  index_->reset_counters();
  return report;
}

int CacheStore::reindex() {
  std::map<std::string, IndexRow> old;
  for (auto& r : index_->list(CacheIndex::Order::kLeastRecent)) old[r.key] = r;
  std::vector<IndexRow> rows;
  for (const auto& [name, dir] : entry_folders(root_ / "objects")) {
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
  index_->replace_all(rows);
  return static_cast<int>(rows.size());
}

namespace {

// "12.5G" -> (12.5, "G"); nullopt when it does not start with a non-negative number.
std::optional<std::pair<double, std::string>> number_and_unit(const std::string& text) {
  size_t pos = 0;
  double value = 0;
  try {
    value = std::stod(text, &pos);
  } catch (const std::exception&) {
    return std::nullopt;
  }
  if (value < 0) return std::nullopt;
  return std::make_pair(value, text.substr(pos));
}

}  // namespace

uint64_t parse_size(const std::string& text, const std::string& what) {
  static const std::map<std::string, double> units{{"", 1},
                                                   {"B", 1},
                                                   {"K", 1024.0},
                                                   {"M", 1024.0 * 1024},
                                                   {"G", 1024.0 * 1024 * 1024},
                                                   {"T", 1024.0 * 1024 * 1024 * 1024}};
  auto parsed = number_and_unit(text);
  if (parsed) {
    std::string unit = parsed->second;  // "GiB", "gb", "G" all mean GiB
    for (auto& c : unit) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
    if (unit.size() > 1 && unit.back() == 'B') unit.pop_back();
    if (unit.size() > 1 && unit.back() == 'I') unit.pop_back();
    if (auto it = units.find(unit); it != units.end())
      return static_cast<uint64_t>(parsed->first * it->second);
  }
  throw UserError(what + ": '" + text + "' is not a size (examples: 2G, 500MiB, 64k, 1000000)");
}

double parse_age(const std::string& text, const std::string& what) {
  static const std::map<std::string, double> units{{"", 1},     {"s", 1},     {"m", 60},
                                                   {"h", 3600}, {"d", 86400}, {"w", 7 * 86400}};
  auto parsed = number_and_unit(text);
  if (parsed) {
    if (auto it = units.find(parsed->second); it != units.end()) return parsed->first * it->second;
  }
  throw UserError(what + ": '" + text + "' is not an age (examples: 45s, 30m, 12h, 7d, 2w)");
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
