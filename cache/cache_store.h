#pragma once
// The on-disk kernel cache: immutable entries under objects/<k[0:2]>/<key>/, each published by
// one rename of a complete staging folder and verified (owner, mode, size + SHA-256 of every
// file) before it is handed out. Per-key flock()s serialise compiles of one key and pin loaded
// entries against eviction; nothing is global. The SQLite index is an accelerator: when it is
// busy, locked or read-only, hits are served from objects/ and its upkeep is deferred. The
// cache stores artifacts by key and knows nothing of what produced them.
#include <cstdint>
#include <filesystem>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "cache/cache_access.h"
#include "cache/cache_index.h"
#include "cache/entry_meta.h"
#include "cache/entry_signature.h"
#include "cache/file_lock.h"
#include "cache/work_folder.h"

namespace kiln {

// The family of kernel objects (compiled once, linked into many modules); their hits and
// compiles are counted apart from modules'.
inline constexpr const char* kKernelFamily = "kernel";
// The family of prepared weight sets (compiler/entries/prepared_weights.h), counted apart too.
inline constexpr const char* kPreparedFamily = "prepared";
// The family of imported models (compiler/entries/model_entries.h), counted apart too.
inline constexpr const char* kModelFamily = "model";

// 64 lowercase hex digits: the only strings that ever become entry paths.
bool is_cache_key(const std::string& s);

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
  int files_hashed = 0;             // files read whole to verify (the others matched stamps)
};

struct GcReport {
  int removed = 0;
  uint64_t removed_bytes = 0;
  std::vector<std::string> in_use;  // keys kept because a live process has them loaded
  int swept = 0;                    // abandoned work folders, debris and stale index rows
};

struct VerifyReport {
  int good = 0;
  std::vector<std::string> bad;  // "key: problem", each moved to quarantine/
};

class CacheStore {
 public:
  // One store per cache folder per process (it owns the index connection). Refuses a folder
  // that CacheAccess distrusts (UserError saying why and what to do).
  static std::shared_ptr<CacheStore> open(const std::filesystem::path& root);
  // KILN_CACHE_MAX_SIZE (e.g. "2G", "500MiB", "1000000"), default 2 GiB.
  static uint64_t default_max_size();
  // How long index statements wait for another process on the compile path.
  static constexpr int kHotBusyMs = 20;

  const std::filesystem::path& root() const { return root_; }
  const CacheAccess& access() const { return access_; }
  // False for a folder this process cannot write (read-only mount, another user's cache):
  // lookups still hit, nothing is stored.
  bool writable() const { return writable_; }
  // Why entries published here would not be usable ("" when they would): a read-only
  // folder, or signatures required (KILN_CACHE_REQUIRE_SIGNATURES) with no key to sign.
  std::string publish_blocker() const;
  const SignaturePolicy& signatures() const { return signatures_; }
  // Throws CacheEntryError for anything but a cache key.
  std::filesystem::path entry_dir(const std::string& key) const;
  // Maintenance commands (ls, gc, reindex) wait for a busy index; compiles do not.
  void set_patient(bool patient);

  // Finds and verifies `key`. With quarantine_bad, an entry that fails verification is moved
  // to quarantine/ with a warning (only under the exclusive `use` lock, after verifying again,
  // so a passing read error never moves an entry another process has loaded); otherwise it
  // is only reported in `problem`. Records a hit in the index when the index is available.
  // kStamped skips hashing the files a full verification stamped unchanged since (a private
  // cache only: see FileStamps); kFull hashes every byte.
  enum class Hashing { kStamped, kFull };
  LookupResult lookup(const std::string& key, bool quarantine_bad,
                      Hashing hashing = Hashing::kStamped);
  // An entry that verified but whose contents its reader found wrong: quarantined (under the
  // exclusive use lock, like a failed verification) with a warning naming the problem; left in
  // place, with a warning, while another process has it loaded.
  void discard_bad(const std::string& key, const std::string& problem);
  // The per-key compile lock: a second compiler of the same key waits here, then hits.
  FileLock lock_key(const std::string& key);

  // A fresh, private folder to build an entry's files in (removed if not published).
  WorkFolder new_staging(const std::string& key);
  // A folder for a build that is not stored (KILN_CACHE=0, uncacheable graphs); live while
  // the WorkFolder lives, swept once its owner is gone.
  WorkFolder new_scratch(const std::string& prefix);
  // Keeps a failed build's files in failed/<key>/ (replacing an older one) for the user to
  // read; returns that folder. Swept by age and counted against the size cap.
  std::filesystem::path keep_failed(const std::string& key,
                                    const std::vector<std::pair<std::string, std::string>>& files);
  // Hashes the files named in `meta.files` (sizes and SHA-256s are filled in), writes
  // meta.json and publishes the folder with one rename. If another process published the key
  // first, its entry is returned and `staging` is discarded. Then enforces the size cap. On
  // any failure the staging folder is removed and the error names the path.
  CacheEntry publish(WorkFolder staging, EntryMeta meta);
  // An entry the remote tier fetched and verified (meta holds each file's size and SHA-256,
  // checked against these bytes in memory): the files are written to a staging folder and
  // published without being hashed again, and count as a remote hit, not as a compile or a
  // store.
  CacheEntry publish_fetched(EntryMeta meta,
                             const std::vector<std::pair<std::string, std::string>>& files);

  // A small file kiln wrote under the root (e.g. toolchains/…), read only when this user
  // controls it and every folder above it; nullopt (with a warning if it was distrusted)
  // otherwise.
  std::optional<std::string> read_private(const std::filesystem::path& relative);
  void write_private(const std::filesystem::path& relative, const std::string& contents);

  void record_miss();
  // Adds to a named counter of the index (e.g. "remote_hits"); skipped when it is busy.
  void count(const std::string& counter, double by = 1);
  std::optional<EntryMeta> read_meta(const std::string& key);
  // Full keys starting with `prefix` (at most 10).
  std::vector<std::string> resolve_prefix(const std::string& prefix);
  std::vector<IndexRow> list();
  std::optional<IndexRow> row(const std::string& key);
  std::vector<IndexRow> with_family(const std::string& family);
  std::vector<IndexRow> with_label(const std::string& label);
  IndexTotals stats();
  // Bytes held outside entries: failed builds and quarantined entries.
  uint64_t debris_bytes();

  // Evicts least-recently-used entries until the cache holds at most max_size bytes (debris
  // included, removed first) and nothing older (by last use) than max_age_s; pinned entries
  // stay. First repairs the index (rows for entries it lacks, none for keys that are not
  // keys). With sweep, also removes abandoned work folders and stale index rows.
  GcReport gc(std::optional<uint64_t> max_size, std::optional<double> max_age_s,
              bool sweep = false);
  VerifyReport verify_all();
  // Every entry not in use, plus quarantine/, failed/ and abandoned scratch (a scratch folder
  // a live process works in stays), and the counters.
  GcReport clear();
  int reindex();  // rebuilds index.sqlite from objects/ alone; returns the entry count

 private:
  CacheEntry publish_folder(WorkFolder staging, EntryMeta meta, bool fetched);
  explicit CacheStore(std::filesystem::path root);
  CacheIndex* index();  // nullptr while the index is unavailable
  void open_index();
  void index_failed(const std::string& what);
  void mark_dirty();
  void repair_index();
  std::filesystem::path lock_path(const std::string& key, const char* kind) const;
  // Checks one entry folder; returns its meta or throws CacheEntryError.
  EntryMeta verify(const std::string& key, const std::filesystem::path& dir, Hashing hashing,
                   int& files_hashed);
  void quarantine(const std::string& key, const std::string& problem);
  void move_aside(const std::filesystem::path& from, const std::string& name,
                  const std::string& problem);
  bool evict(const IndexRow& row);  // false when in use
  int sweep(double debris_age_s);
  int drop_debris(uint64_t& total, uint64_t cap);

  std::filesystem::path root_;
  CacheAccess access_;
  SignaturePolicy signatures_;
  bool writable_ = true;
  int busy_ms_ = kHotBusyMs;
  std::mutex index_mutex_;
  std::unique_ptr<CacheIndex> index_;
  double index_retry_at_ = 0;
  bool warned_index_ = false;
};

std::string format_size(uint64_t bytes);

}  // namespace kiln
