#pragma once
// index.sqlite: an accelerator over objects/ for lookup, LRU order and statistics. WAL mode,
// so readers never block the writer; every process opens its own connection. It holds
// nothing that cannot be rebuilt from objects/ (except the hit/miss counters).
#include <cstdint>
#include <filesystem>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "util/error.h"

struct sqlite3;
struct sqlite3_stmt;

namespace kiln {

class CacheIndexError : public UserError {
 public:
  CacheIndexError(const std::string& what, int sqlite_code) : UserError(what), code_(sqlite_code) {}
  int sqlite_code() const { return code_; }  // primary result code, e.g. SQLITE_BUSY
  bool corrupt() const;                      // the file is damaged or not a database

 private:
  int code_;
};

// NFS, SMB/CIFS, Lustre, Ceph, GPFS: where SQLite's WAL is unsafe.
bool on_network_filesystem(const std::filesystem::path& dir);

struct IndexRow {
  std::string key, label, family;
  uint64_t size = 0;
  double created = 0, last_used = 0, compile_ms = 0;
  int64_t hits = 0;
};

struct IndexTotals {
  int64_t entries = 0;
  uint64_t bytes = 0;
  int64_t hits = 0, misses = 0, compiles = 0;
  double saved_ms = 0;  // compile time that hits did not spend
  // Kernel objects (entries of family "kernel"): how many, their bytes, the times a module
  // build found one here or compiled one, and the compile time those hits saved.
  int64_t kernels = 0;
  uint64_t kernel_bytes = 0;
  int64_t kernel_hits = 0, kernel_compiles = 0;
  double kernel_saved_ms = 0;
  // Prepared weight sets (family "prepared"): how many, their bytes, hits and stores.
  int64_t prepared = 0;
  uint64_t prepared_bytes = 0;
  int64_t prepared_hits = 0, prepared_stores = 0;
  // Imported models (family "model"): how many, their bytes, hits and stores.
  int64_t models = 0;
  uint64_t model_bytes = 0;
  int64_t model_hits = 0, model_stores = 0;
  // The remote tier, as this cache saw it: entries fetched, keys it lacked, entries refused,
  // faults, uploads, and bytes moved.
  int64_t remote_hits = 0, remote_misses = 0, remote_rejects = 0, remote_errors = 0,
          remote_uploads = 0;
  double remote_bytes = 0;
  // The same, per remote store (its URL, no credentials), from counters named
  // "remote_hits@<store>".
  struct PerRemote {
    int64_t hits = 0, misses = 0, rejects = 0, errors = 0, uploads = 0;
    double bytes = 0;
  };
  std::map<std::string, PerRemote> remotes;
};

class CacheIndex {
 public:
  // Opens or creates the database; throws CacheIndexError when it is unusable. `busy_ms`
  // bounds every wait for another process's lock (and, times a few, the retries at open), so
  // a busy or exclusively held index costs milliseconds, not a hang.
  CacheIndex(const std::filesystem::path& path, int busy_ms);
  ~CacheIndex();
  CacheIndex(const CacheIndex&) = delete;
  CacheIndex& operator=(const CacheIndex&) = delete;

  std::optional<IndexRow> find(const std::string& key);
  void put(const IndexRow& row);  // insert, or update all but hits
  void remove(const std::string& key);
  // Counts the hit under "<counter>" and the compile time it saved under "<counter>_saved_ms"
  // ("hits" and "saved_ms" for modules).
  void record_hit(const std::string& key, double now, const std::string& counter = "hits");
  void record_miss();
  void record_compile();
  void add_to_counter(const char* counter, double by);

  enum class Order { kMostRecent, kLeastRecent };
  std::vector<IndexRow> list(Order order);
  std::vector<IndexRow> with_family(const std::string& family);
  std::vector<IndexRow> with_label(const std::string& label);
  std::vector<std::string> keys_with_prefix(const std::string& prefix);
  IndexTotals totals();
  // Replaces every row in one transaction (reindex); counters are kept.
  void replace_all(const std::vector<IndexRow>& rows);
  void reset_counters();
  // How long a statement waits for another process's lock before SQLITE_BUSY.
  void set_busy_timeout(int ms);

 private:
  void init(int busy_ms);
  void close();
  sqlite3_stmt* prepare(const char* sql);
  sqlite3_stmt* lazy(sqlite3_stmt*& slot, const char* sql);  // prepared on first use
  void exec(const char* sql);
  void put_locked(const IndexRow& row);
  [[noreturn]] void fail(const std::string& what);
  std::vector<IndexRow> rows(sqlite3_stmt* stmt);
  std::vector<IndexRow> rows_where(const char* column,
                                   const std::string& value);  // column: a literal
  void bump(const char* counter, double by);

  std::filesystem::path path_;
  sqlite3* db_ = nullptr;
  std::mutex mutex_;
  sqlite3_stmt* find_ = nullptr;
  sqlite3_stmt* put_ = nullptr;
  sqlite3_stmt* hit_ = nullptr;
  sqlite3_stmt* bump_ = nullptr;
};

}  // namespace kiln
