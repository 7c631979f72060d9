#pragma once
// The on-disk kernel cache: immutable entries under objects/<k[0:2]>/<key>/, each published by
// one rename of a complete staging folder and verified (size + SHA-256 of every file) before
// it is handed out. Per-key flock()s serialise compiles of one key and pin loaded entries
// against eviction; nothing is global. The cache stores artifacts by key and knows nothing
// of what produced them.
#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "cache/cache_index.h"
#include "cache/entry_meta.h"
#include "cache/file_lock.h"

namespace kiln {

// A verified entry. It cannot be evicted while `pin` (a shared lock) is held.
struct CacheEntry {
  EntryMeta meta;
  std::filesystem::path dir;
  std::shared_ptr<FileLock> pin;
  std::filesystem::path file(const std::string& name) const { return dir / name; }
};

struct LookupResult {
  std::optional<CacheEntry> entry;  // set on a hit
  std::string problem;              // set when an entry existed but failed verification
};

struct GcReport {
  int removed = 0;
  uint64_t removed_bytes = 0;
  std::vector<std::string> in_use;  // keys kept because a live process has them loaded
  int swept = 0;                    // stale staging, trash and index rows cleaned up
};

struct VerifyReport {
  int good = 0;
  std::vector<std::string> bad;  // "key: problem", each moved to quarantine/
};

class CacheStore {
 public:
  // One store per cache folder per process (it owns the index connection).
  static std::shared_ptr<CacheStore> open(const std::filesystem::path& root);
  // KILN_CACHE_MAX_SIZE (e.g. "2G", "500MiB", "1000000"), default 2 GiB.
  static uint64_t default_max_size();

  const std::filesystem::path& root() const { return root_; }
  std::filesystem::path entry_dir(const std::string& key) const;

  // Finds and verifies `key`. With quarantine_bad, an entry that fails verification is moved
  // to quarantine/ with a warning (callers do this under lock_key()); otherwise it is only
  // reported in `problem`. Records a hit in the index.
  LookupResult lookup(const std::string& key, bool quarantine_bad);
  // The per-key compile lock: a second compiler of the same key waits here, then hits.
  FileLock lock_key(const std::string& key);

  // A fresh, private folder to build an entry's files in.
  std::filesystem::path new_staging(const std::string& key);
  // Hashes the files named in `meta.files` (sizes and SHA-256s are filled in), writes
  // meta.json and publishes the folder with one rename. If another process published the key
  // first, its entry is returned and `staging` is discarded. Then enforces the size cap.
  CacheEntry publish(const std::filesystem::path& staging, EntryMeta meta);

  void record_miss();
  std::optional<EntryMeta> read_meta(const std::string& key);
  // Full keys starting with `prefix` (at most 10).
  std::vector<std::string> resolve_prefix(const std::string& prefix);
  std::vector<IndexRow> list();
  std::optional<IndexRow> row(const std::string& key);
  std::vector<IndexRow> with_family(const std::string& family);
  std::vector<IndexRow> with_label(const std::string& label);
  IndexTotals stats();

  // Evicts least-recently-used entries until the cache holds at most max_size bytes and
  // nothing older (by last use) than max_age_s; entries that are pinned stay. With sweep,
  // also removes what dead processes left (staging, scratch, trash) and stale index rows.
  GcReport gc(std::optional<uint64_t> max_size, std::optional<double> max_age_s,
              bool sweep = false);
  VerifyReport verify_all();
  GcReport clear();  // every entry not in use, plus quarantine/, failed/ and counters
  int reindex();     // rebuilds index.sqlite from objects/ alone; returns the entry count

 private:
  explicit CacheStore(std::filesystem::path root);
  void open_index();
  std::filesystem::path lock_path(const std::string& key, const char* kind) const;
  // Checks one entry folder; returns its meta or throws CacheEntryError.
  EntryMeta verify(const std::string& key, const std::filesystem::path& dir);
  void quarantine(const std::string& key, const std::string& problem);
  bool evict(const IndexRow& row);  // false when in use
  int sweep();

  std::filesystem::path root_;
  std::unique_ptr<CacheIndex> index_;
};

// "2G", "2GiB", "500M", "64k", "1000": bytes (binary multiples). Throws UserError naming `what`.
uint64_t parse_size(const std::string& text, const std::string& what);
// "30s", "15m", "12h", "7d", "2w", or plain seconds.
double parse_age(const std::string& text, const std::string& what);
std::string format_size(uint64_t bytes);

}  // namespace kiln
