#include "cache/cache_index.h"

#include <sqlite3.h>
#include <sys/vfs.h>

#include <algorithm>
#include <chrono>

namespace kiln {
namespace {

constexpr const char* kRowColumns =
    "key, label, family, size, created, last_used, compile_ms, hits";

// Binds a std::string as text that SQLite copies (the string may die before step()).
void bind_text(sqlite3_stmt* s, int i, const std::string& v) {
  sqlite3_bind_text(s, i, v.data(), static_cast<int>(v.size()), SQLITE_TRANSIENT);
}

std::string column_text(sqlite3_stmt* s, int i) {
  const unsigned char* t = sqlite3_column_text(s, i);
  return t ? reinterpret_cast<const char*>(t) : "";
}

// Finalizes a one-off statement however the scope is left.
struct OwnedStmt {
  sqlite3_stmt* s;
  ~OwnedStmt() { sqlite3_finalize(s); }
};

// Resets a cached statement however the scope is left.
struct StmtScope {
  sqlite3_stmt* s;
  ~StmtScope() {
    sqlite3_reset(s);
    sqlite3_clear_bindings(s);
  }
};

}  // namespace

bool on_network_filesystem(const std::filesystem::path& dir) {
  struct statfs st {};
  if (::statfs(dir.c_str(), &st) != 0) return false;
  switch (static_cast<uint32_t>(st.f_type)) {
    case 0x6969:      // NFS
    case 0x517B:      // SMB
    case 0xFF534D42:  // CIFS
    case 0xFE534D42:  // SMB2
    case 0x0BD00BD0:  // Lustre
    case 0x00C36400:  // Ceph
    case 0x47504653:  // GPFS
      return true;
    default:
      return false;
  }
}

bool CacheIndexError::corrupt() const { return code_ == SQLITE_CORRUPT || code_ == SQLITE_NOTADB; }

CacheIndex::CacheIndex(const std::filesystem::path& path, int busy_ms) : path_(path) {
  // Processes that create the index together can see SQLITE_BUSY outside the busy handler
  // (WAL recovery, the journal-mode switch): retry those within a budget, fail on the rest.
  const auto start = std::chrono::steady_clock::now();
  const auto budget = std::chrono::milliseconds(std::max(250, 5 * busy_ms));
  for (int attempt = 0;; ++attempt) {
    try {
      init(busy_ms);
      return;
    } catch (const CacheIndexError& e) {
      close();
      if ((e.sqlite_code() != SQLITE_BUSY && e.sqlite_code() != SQLITE_LOCKED) ||
          std::chrono::steady_clock::now() - start > budget)
        throw;
      sqlite3_sleep(std::min(20 + 10 * attempt, 200));
    }
  }
}

void CacheIndex::set_busy_timeout(int ms) {
  std::lock_guard lock(mutex_);
  sqlite3_busy_timeout(db_, ms);
}

void CacheIndex::init(int busy_ms) {
  if (sqlite3_open_v2(path_.c_str(), &db_,
                      SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX,
                      nullptr) != SQLITE_OK) {
    std::string msg = db_ ? sqlite3_errmsg(db_) : "out of memory";
    int code = db_ ? sqlite3_errcode(db_) : SQLITE_NOMEM;
    throw CacheIndexError("cannot open cache index '" + path_.string() + "': " + msg, code);
  }
  // Many processes share the file: wait a little for a writer rather than failing at once.
  sqlite3_busy_timeout(db_, busy_ms);
  sqlite3_extended_result_codes(db_, 0);
  bool wal = false;
  {
    sqlite3_stmt* s = prepare("PRAGMA journal_mode");
    wal = sqlite3_step(s) == SQLITE_ROW && column_text(s, 0) == "wal";
    sqlite3_finalize(s);
  }
  // SQLite documents WAL as unsafe on network filesystems (its shared memory is per host):
  // there the index uses a rollback journal. Sharing across machines is the remote tier's job.
  if (on_network_filesystem(path_.parent_path())) {
    if (wal) exec("PRAGMA journal_mode=DELETE");
  } else if (!wal) {
    exec("PRAGMA journal_mode=WAL");  // persistent: only the creator switches it
  }
  exec("PRAGMA synchronous=NORMAL");  // WAL + NORMAL: durable across crashes of the process
  // Keep the WAL file when the last connection closes: a short-lived process (each kiln
  // command) would otherwise create it again on its first write, which syncs the new WAL
  // header and the folder (~0.5 ms of every fresh-process cache hit).
  int persist = 1;
  sqlite3_file_control(db_, "main", SQLITE_FCNTL_PERSIST_WAL, &persist);
  exec(
      "CREATE TABLE IF NOT EXISTS entries(key TEXT PRIMARY KEY, label TEXT NOT NULL, family TEXT "
      "NOT NULL,"
      " size INTEGER NOT NULL, created REAL NOT NULL, last_used REAL NOT NULL, compile_ms REAL NOT "
      "NULL,"
      " hits INTEGER NOT NULL DEFAULT 0) WITHOUT ROWID");
  exec("CREATE INDEX IF NOT EXISTS entries_last_used ON entries(last_used)");
  exec("CREATE INDEX IF NOT EXISTS entries_family ON entries(family)");
  exec(
      "CREATE TABLE IF NOT EXISTS counters(name TEXT PRIMARY KEY, value REAL NOT NULL) WITHOUT "
      "ROWID");
  // The statements a hit does not use are prepared on first use: a fresh process that only
  // hits (most kiln commands) saves compiling them.
  hit_ = prepare("UPDATE entries SET hits=hits+1, last_used=? WHERE key=? RETURNING compile_ms");
}

void CacheIndex::close() {
  for (sqlite3_stmt* s : {find_, put_, hit_, bump_}) sqlite3_finalize(s);
  find_ = put_ = hit_ = bump_ = nullptr;
  if (db_) sqlite3_close(db_);
  db_ = nullptr;
}

CacheIndex::~CacheIndex() { close(); }

void CacheIndex::fail(const std::string& what) {
  throw CacheIndexError(
      "cache index '" + path_.string() + "': " + what + ": " + sqlite3_errmsg(db_),
      sqlite3_errcode(db_));
}

void CacheIndex::exec(const char* sql) {
  char* err = nullptr;
  if (sqlite3_exec(db_, sql, nullptr, nullptr, &err) != SQLITE_OK) {
    std::string msg = err ? err : sqlite3_errmsg(db_);
    sqlite3_free(err);
    throw CacheIndexError("cache index '" + path_.string() + "': " + msg, sqlite3_errcode(db_));
  }
}

sqlite3_stmt* CacheIndex::prepare(const char* sql) {
  sqlite3_stmt* s = nullptr;
  if (sqlite3_prepare_v3(db_, sql, -1, SQLITE_PREPARE_PERSISTENT, &s, nullptr) != SQLITE_OK)
    fail("prepare");
  return s;
}

std::vector<IndexRow> CacheIndex::rows(sqlite3_stmt* s) {
  std::vector<IndexRow> out;
  int rc;
  while ((rc = sqlite3_step(s)) == SQLITE_ROW) {
    IndexRow r;
    r.key = column_text(s, 0);
    r.label = column_text(s, 1);
    r.family = column_text(s, 2);
    r.size = static_cast<uint64_t>(sqlite3_column_int64(s, 3));
    r.created = sqlite3_column_double(s, 4);
    r.last_used = sqlite3_column_double(s, 5);
    r.compile_ms = sqlite3_column_double(s, 6);
    r.hits = sqlite3_column_int64(s, 7);
    out.push_back(std::move(r));
  }
  if (rc != SQLITE_DONE) fail("query");
  return out;
}

sqlite3_stmt* CacheIndex::lazy(sqlite3_stmt*& slot, const char* sql) {
  if (!slot) slot = prepare(sql);
  return slot;
}

std::optional<IndexRow> CacheIndex::find(const std::string& key) {
  std::lock_guard lock(mutex_);
  lazy(find_,
       "SELECT key, label, family, size, created, last_used, compile_ms, hits FROM entries WHERE "
       "key=?");
  StmtScope scope{find_};
  bind_text(find_, 1, key);
  auto r = rows(find_);
  if (r.empty()) return std::nullopt;
  return r.front();
}

void CacheIndex::put(const IndexRow& row) {
  std::lock_guard lock(mutex_);
  put_locked(row);
}

void CacheIndex::put_locked(const IndexRow& row) {
  lazy(
      put_,
      "INSERT INTO entries(key, label, family, size, created, last_used, compile_ms, hits)"
      " VALUES(?,?,?,?,?,?,?,?) ON CONFLICT(key) DO UPDATE SET label=excluded.label, "
      "family=excluded.family,"
      " size=excluded.size, created=excluded.created, last_used=max(last_used, excluded.last_used),"
      " compile_ms=excluded.compile_ms");
  StmtScope scope{put_};
  bind_text(put_, 1, row.key);
  bind_text(put_, 2, row.label);
  bind_text(put_, 3, row.family);
  sqlite3_bind_int64(put_, 4, static_cast<sqlite3_int64>(row.size));
  sqlite3_bind_double(put_, 5, row.created);
  sqlite3_bind_double(put_, 6, row.last_used);
  sqlite3_bind_double(put_, 7, row.compile_ms);
  sqlite3_bind_int64(put_, 8, row.hits);
  if (sqlite3_step(put_) != SQLITE_DONE) fail("insert");
}

void CacheIndex::remove(const std::string& key) {
  std::lock_guard lock(mutex_);
  OwnedStmt s{prepare("DELETE FROM entries WHERE key=?")};
  bind_text(s.s, 1, key);
  if (sqlite3_step(s.s) != SQLITE_DONE) fail("delete");
}

void CacheIndex::bump(const char* counter, double by) {
  lazy(bump_,
       "INSERT INTO counters(name, value) VALUES(?, ?)"
       " ON CONFLICT(name) DO UPDATE SET value=value+excluded.value");
  StmtScope scope{bump_};
  sqlite3_bind_text(bump_, 1, counter, -1, SQLITE_STATIC);
  sqlite3_bind_double(bump_, 2, by);
  if (sqlite3_step(bump_) != SQLITE_DONE) fail("update counters");
}

void CacheIndex::record_hit(const std::string& key, double now, const std::string& counter) {
  std::lock_guard lock(mutex_);
  exec("BEGIN IMMEDIATE");
  try {
    double saved = 0;
    {
      StmtScope scope{hit_};
      sqlite3_bind_double(hit_, 1, now);
      bind_text(hit_, 2, key);
      int rc = sqlite3_step(hit_);
      if (rc == SQLITE_ROW)
        saved = sqlite3_column_double(hit_, 0);
      else if (rc != SQLITE_DONE)
        fail("record hit");
    }
    bump(counter.c_str(), 1);
    bump(counter == "hits" ? "saved_ms" : (counter + "_saved_ms").c_str(), saved);
    exec("COMMIT");
  } catch (...) {
    sqlite3_exec(db_, "ROLLBACK", nullptr, nullptr, nullptr);
    throw;
  }
}

void CacheIndex::record_miss() {
  std::lock_guard lock(mutex_);
  bump("misses", 1);
}

void CacheIndex::add_to_counter(const char* counter, double by) {
  std::lock_guard lock(mutex_);
  bump(counter, by);
}

void CacheIndex::record_compile() {
  std::lock_guard lock(mutex_);
  bump("compiles", 1);
}

std::vector<IndexRow> CacheIndex::list(Order order) {
  std::lock_guard lock(mutex_);
  std::string sql = std::string("SELECT ") + kRowColumns + " FROM entries ORDER BY last_used " +
                    (order == Order::kMostRecent ? "DESC" : "ASC");
  OwnedStmt s{prepare(sql.c_str())};
  return rows(s.s);
}

std::vector<IndexRow> CacheIndex::rows_where(const char* column, const std::string& value) {
  std::lock_guard lock(mutex_);
  std::string sql = std::string("SELECT ") + kRowColumns + " FROM entries WHERE " + column +
                    "=? ORDER BY last_used DESC";
  OwnedStmt s{prepare(sql.c_str())};
  bind_text(s.s, 1, value);
  return rows(s.s);
}

std::vector<IndexRow> CacheIndex::with_family(const std::string& family) {
  return rows_where("family", family);
}
std::vector<IndexRow> CacheIndex::with_label(const std::string& label) {
  return rows_where("label", label);
}

std::vector<std::string> CacheIndex::keys_with_prefix(const std::string& prefix) {
  std::lock_guard lock(mutex_);
  // Keys are lowercase hex, so a range scan on the primary key finds the prefix.
  OwnedStmt s{prepare("SELECT key FROM entries WHERE key >= ? AND key < ? ORDER BY key LIMIT 10")};
  bind_text(s.s, 1, prefix);
  bind_text(s.s, 2, prefix + "\x7f");
  std::vector<std::string> out;
  while (sqlite3_step(s.s) == SQLITE_ROW) out.push_back(column_text(s.s, 0));
  return out;
}

IndexTotals CacheIndex::totals() {
  std::lock_guard lock(mutex_);
  IndexTotals t;
  OwnedStmt sizes{prepare("SELECT count(*), coalesce(sum(size), 0) FROM entries")};
  if (sqlite3_step(sizes.s) == SQLITE_ROW) {
    t.entries = sqlite3_column_int64(sizes.s, 0);
    t.bytes = static_cast<uint64_t>(sqlite3_column_int64(sizes.s, 1));
  }
  OwnedStmt counters{prepare("SELECT name, value FROM counters")};
  while (sqlite3_step(counters.s) == SQLITE_ROW) {
    std::string name = column_text(counters.s, 0);
    double v = sqlite3_column_double(counters.s, 1);
    if (const auto at = name.find('@'); at != std::string::npos && name.rfind("remote_", 0) == 0) {
      IndexTotals::PerRemote& r = t.remotes[name.substr(at + 1)];
      const std::string what = name.substr(7, at - 7);
      const auto n = static_cast<int64_t>(v);
      if (what == "hits")
        r.hits = n;
      else if (what == "misses")
        r.misses = n;
      else if (what == "rejects")
        r.rejects = n;
      else if (what == "errors")
        r.errors = n;
      else if (what == "uploads")
        r.uploads = n;
      else if (what == "bytes")
        r.bytes = v;
      continue;
    }
    if (name == "hits")
      t.hits = static_cast<int64_t>(v);
    else if (name == "misses")
      t.misses = static_cast<int64_t>(v);
    else if (name == "compiles")
      t.compiles = static_cast<int64_t>(v);
    else if (name == "saved_ms")
      t.saved_ms = v;
    else if (name == "remote_hits")
      t.remote_hits = static_cast<int64_t>(v);
    else if (name == "remote_misses")
      t.remote_misses = static_cast<int64_t>(v);
    else if (name == "remote_rejects")
      t.remote_rejects = static_cast<int64_t>(v);
    else if (name == "remote_errors")
      t.remote_errors = static_cast<int64_t>(v);
    else if (name == "remote_uploads")
      t.remote_uploads = static_cast<int64_t>(v);
    else if (name == "remote_bytes")
      t.remote_bytes = v;
    else if (name == "kernel_hits")
      t.kernel_hits = static_cast<int64_t>(v);
    else if (name == "kernel_hits_saved_ms")
      t.kernel_saved_ms = v;
    else if (name == "kernel_compiles")
      t.kernel_compiles = static_cast<int64_t>(v);
    else if (name == "prepared_hits")
      t.prepared_hits = static_cast<int64_t>(v);
    else if (name == "prepared_stores")
      t.prepared_stores = static_cast<int64_t>(v);
    else if (name == "model_hits")
      t.model_hits = static_cast<int64_t>(v);
    else if (name == "model_stores")
      t.model_stores = static_cast<int64_t>(v);
  }
  OwnedStmt kernels{
      prepare("SELECT count(*), coalesce(sum(size), 0) FROM entries WHERE family = 'kernel'")};
  if (sqlite3_step(kernels.s) == SQLITE_ROW) {
    t.kernels = sqlite3_column_int64(kernels.s, 0);
    t.kernel_bytes = static_cast<uint64_t>(sqlite3_column_int64(kernels.s, 1));
  }
  OwnedStmt prepared{
      prepare("SELECT count(*), coalesce(sum(size), 0) FROM entries WHERE family = 'prepared'")};
  if (sqlite3_step(prepared.s) == SQLITE_ROW) {
    t.prepared = sqlite3_column_int64(prepared.s, 0);
    t.prepared_bytes = static_cast<uint64_t>(sqlite3_column_int64(prepared.s, 1));
  }
  OwnedStmt models{
      prepare("SELECT count(*), coalesce(sum(size), 0) FROM entries WHERE family = 'model'")};
  if (sqlite3_step(models.s) == SQLITE_ROW) {
    t.models = sqlite3_column_int64(models.s, 0);
    t.model_bytes = static_cast<uint64_t>(sqlite3_column_int64(models.s, 1));
  }
  return t;
}

void CacheIndex::replace_all(const std::vector<IndexRow>& all) {
  std::lock_guard lock(mutex_);
  exec("BEGIN IMMEDIATE");
  try {
    exec("DELETE FROM entries");
    for (const auto& r : all) put_locked(r);
    exec("COMMIT");
  } catch (...) {
    sqlite3_exec(db_, "ROLLBACK", nullptr, nullptr, nullptr);
    throw;
  }
}

void CacheIndex::reset_counters() {
  std::lock_guard lock(mutex_);
  exec("DELETE FROM counters");
}

}  // namespace kiln
