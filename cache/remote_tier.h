#pragma once
// The shared remote tier of the cache, on Redis: memo -> local store -> remote -> compile.
// An entry read from Redis is verified — its meta.json hashes to the key, every file has
// the recorded size and SHA-256, and a trusted Ed25519 key signed it for this namespace —
// before anything is written locally; the caller then publishes it through the local store
// as usual. Writers (holders of KILN_CACHE_SIGNING_KEY) upload what they compile with
// SET NX; readers without a key never write. A server that is down, slow, refusing or lying
// costs a warning and a local compile, and is skipped for 30 s (a circuit breaker), so it
// costs one timeout per process, not one per compile.
#include <cstdint>
#include <filesystem>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "cache/entry_meta.h"
#include "cache/entry_signature.h"
#include "cache/redis_client.h"

namespace kiln {

struct RemoteConfig {
  RedisUrl url;
  std::string ns = "kiln";  // KILN_REMOTE_CACHE_NAMESPACE: a new one revokes everything
  int timeout_ms = 1000;    // KILN_REMOTE_TIMEOUT (seconds), per operation
  int connect_ms = 200;
  bool trust_unsigned = false;  // KILN_REMOTE_CACHE_TRUST=unsigned
  double breaker_s = 30;        // how long a failed server is skipped
  // nullopt when KILN_REMOTE_CACHE is unset; throws UserError naming a malformed variable.
  static std::optional<RemoteConfig> from_env();
};

struct RemoteEntry {
  EntryMeta meta;
  std::vector<std::pair<std::string, std::string>> files;  // name -> bytes, meta's order
  uint64_t bytes = 0;                                      // the blob's size
};

struct RemoteCounters {
  int64_t hits = 0, misses = 0, rejects = 0, errors = 0, uploads = 0;
  uint64_t bytes_in = 0, bytes_out = 0;
};

// The stored form: "kiln-entry 1\n<meta.json bytes>\n<meta.json><each file's bytes in order>".
std::string pack_entry(const EntryMeta& meta, const std::vector<std::string>& file_bytes);
// Parses and checks a blob against `key` (meta.json, sizes, SHA-256s; not signatures).
// Throws CacheEntryError saying what is wrong.
RemoteEntry unpack_entry(const std::string& blob, const std::string& key);

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
  void upload(const EntryMeta& meta, const std::filesystem::path& dir);
  // PING, and the number of entries in this namespace (SCAN, at most `limit`).
  std::optional<int64_t> status(int64_t limit, std::string* why);
  RemoteCounters counters() const;

 private:
  bool available(const char* what);
  void fault(const std::string& what);
  std::string entry_key(const std::string& key) const { return config_.ns + ":e:" + key; }

  RemoteConfig config_;
  SignaturePolicy signatures_;
  mutable std::mutex mutex_;  // one connection, one command at a time
  std::unique_ptr<RedisClient> client_;
  double skip_until_ = 0;
  bool warned_untrusted_ = false;
  RemoteCounters counters_;
};

}  // namespace kiln
