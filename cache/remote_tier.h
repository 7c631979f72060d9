#pragma once
// The shared remote tier of the cache: memo -> local store -> remotes -> compile. The remotes
// (KILN_REMOTE_CACHE, a space-separated list of Redis, Redis Cluster and HTTP stores) are read
// in order and written to all; an entry found further down the list is copied to the ones
// before it (by writers), so a near store fills from a large one behind it. Entries travel
// zstd-compressed (cache/blob_codec.h). An entry read from a remote is verified — its size is
// bounded, its meta.json hashes to the key, lists the files an entry of its kind holds, every file
// has the recorded size and SHA-256, and a trusted Ed25519 key signed the whole meta.json for this
// namespace — before anything is written locally; the caller then publishes it through the local
// store as usual. Writers (holders of KILN_CACHE_SIGNING_KEY) upload what they compile with SET NX;
// readers without a key never write. A server that is down, slow, refusing, lying or serving forged
// entries costs a warning and a local compile, and is skipped for 30 s (a circuit breaker), so it
// costs one timeout per process, not one per compile.
#include <condition_variable>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "cache/entry_meta.h"
#include "cache/entry_signature.h"
#include "cache/redis_client.h"
#include "cache/remote_store.h"

namespace kiln {

struct RemoteConfig {
  std::vector<std::string> urls;  // KILN_REMOTE_CACHE, in the order they are read
  std::string ns = "kiln";        // KILN_REMOTE_CACHE_NAMESPACE: a new one revokes everything
  int timeout_ms = 1000;          // KILN_REMOTE_TIMEOUT: the whole of one operation
  int connect_ms = 200;
  bool trust_unsigned = false;  // KILN_REMOTE_CACHE_TRUST=unsigned
  double breaker_s = 30;        // how long a failed server is skipped
  int lease_ms = 30000;         // KILN_REMOTE_LEASE: a compile's claim on a key
  int wait_ms = 300000;         // KILN_REMOTE_WAIT: the longest wait for another's compile
  uint64_t max_entry_bytes = uint64_t{64} << 20;  // KILN_REMOTE_MAX_ENTRY: larger is refused
  int compress_level = 3;                         // KILN_REMOTE_COMPRESS: zstd[:LEVEL] or off (0)
  std::string ca_file;     // KILN_REMOTE_CA: for https stores; default: the system's
  StoreOptions store_options() const { return {ns, connect_ms, timeout_ms, breaker_s, ca_file}; }
  // nullopt when KILN_REMOTE_CACHE is unset; throws UserError naming a malformed variable.
  // Durations go through parse_duration, the namespace through check_name, the size through
  // parse_size: one rule each, with bounds.
  static std::optional<RemoteConfig> from_env();
};

struct RemoteEntry {
  EntryMeta meta;
  std::vector<std::pair<std::string, std::string>> files;  // name -> bytes, meta's order
  uint64_t bytes = 0;                                      // the blob's size as stored
  std::string from;                                        // the store it came from
};

struct RemoteCounters {
  int64_t hits = 0, misses = 0, rejects = 0, errors = 0, uploads = 0;
  uint64_t bytes_in = 0, bytes_out = 0;  // as moved (compressed)
  RemoteCounters& operator+=(const RemoteCounters& o);
};

// Each store's counters, in the list's order.
using StoreCounters = std::vector<std::pair<std::string, RemoteCounters>>;

// One store's place in `kiln cache remote status`.
struct RemoteStatus {
  std::string store;
  std::vector<ShardStatus> shards;
  bool ok() const;
};

// The stored form: "kiln-entry 1\n<meta.json bytes>\n<meta.json><each file's bytes in order>".
std::string pack_entry(const EntryMeta& meta, const std::vector<std::string>& file_bytes);
// Parses and checks a blob against `key` (meta.json's size, fields and layout, sizes,
// SHA-256s; not signatures). Throws CacheEntryError saying what is wrong.
RemoteEntry unpack_entry(const std::string& blob, const std::string& key);

// A claim on one key while this process compiles it (SET NX PX with a random token), renewed
// by a thread and released with a token check, so other machines wait for this compile
// instead of repeating it. A holder that dies stops renewing; the claim expires. A holder that
// releases without having uploaded (its compile failed, the upload did not happen) leaves a
// short-lived failure marker, so the machines waiting on it compile at once, side by side,
// instead of taking the lease in turns.
class RemoteLease {
 public:
  RemoteLease(const RemoteConfig& config, std::function<std::unique_ptr<RedisLink>()> link,
              std::string redis_key, std::string failed_key, std::string token);
  ~RemoteLease();
  RemoteLease(const RemoteLease&) = delete;
  RemoteLease& operator=(const RemoteLease&) = delete;
  // The entry is uploaded: release without a failure marker.
  void set_uploaded() { uploaded_ = true; }

 private:
  void renew_loop();
  RemoteConfig config_;
  std::function<std::unique_ptr<RedisLink>()> link_;
  std::string key_, failed_key_, token_;
  std::mutex mutex_;
  std::condition_variable stop_cv_;
  bool stop_ = false;
  bool uploaded_ = false;
  std::thread renewer_;
};

class RemoteTier {
 public:
  RemoteTier(RemoteConfig config, SignaturePolicy signatures);
  // The tier of this process (from the environment), or nullptr when none is configured.
  static RemoteTier* process_default();

  const RemoteConfig& config() const { return config_; }
  bool can_write() const { return signatures_.signer.has_value(); }
  // A verified entry, or nullopt: a miss, or — with a warning — a rejected entry or a fault.
  std::optional<RemoteEntry> fetch(const std::string& key);
  // Signs a verified local entry for this namespace and stores it unless the key exists; a
  // different entry under the same key is reported as a build that is not reproducible.
  // True when the key holds an entry afterwards (this one or an earlier writer's).
  bool upload(const EntryMeta& meta, const std::filesystem::path& dir);
  // Before compiling a key it lacks: a lease for this process (writers), or, when another
  // process holds one, that process's entry once it is uploaded (polled, bounded). Returns
  // (lease, entry); both empty means compile without a lease (a reader, a fault, a holder
  // that failed or gave up, a lease planted without an expiry).
  std::pair<std::unique_ptr<RemoteLease>, std::optional<RemoteEntry>> claim_or_wait(
      const std::string& key);
  // Every store and shard: reachable, latency, entries of this namespace (at most `limit`,
  // within a deadline of a few operation timeouts) and bytes in use.
  std::vector<RemoteStatus> status(int64_t limit);
  RemoteCounters counters() const;  // all stores together
  StoreCounters counters_by_store() const;
  std::vector<std::string> stores() const;

 private:
  struct Remote {
    std::unique_ptr<RemoteStore> store;
    double skip_until = 0;
    double shard_warned_until = 0;
    RemoteCounters counters;
  };
  bool available(Remote& r, const char* what);
  void fault(Remote& r, const std::string& what);
  void shard_fault(Remote& r, const std::string& what);
  std::optional<RemoteEntry> fetch_locked(const std::string& key);
  // The blob of `key` from one store, verified; nullopt on a miss, a fault or a rejection.
  std::optional<RemoteEntry> fetch_from(size_t i, const std::string& key, std::string* blob);
  Remote* lease_remote();

  RemoteConfig config_;
  SignaturePolicy signatures_;
  mutable std::mutex mutex_;  // one connection per store, one command at a time
  std::vector<Remote> remotes_;
  bool warned_untrusted_ = false;
  // Keys whose entry in a store was rejected (until when): not fetched again for the breaker
  // period, so a forged entry costs a process one verification, not one per compile.
  std::map<std::pair<size_t, std::string>, double> rejected_;
  // Keys this process gave up waiting for: it does not wait for them again.
  std::set<std::string> abandoned_;
};

}  // namespace kiln
