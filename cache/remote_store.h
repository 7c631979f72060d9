#pragma once
// One remote storage behind the remote tier: a Redis server, a Redis Cluster, or an HTTP
// (WebDAV) server. A store moves opaque blobs under cache keys; what a blob holds, who signed
// it and whether to trust it is the tier's business (cache/remote_tier.h). Every operation is
// bounded in time and size and reports a transport fault as RemoteError (ShardError when one
// shard of a cluster is down and the rest still serve).
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "cache/redis_client.h"

namespace kiln {

struct StoreOptions {
  std::string ns = "kiln";
  int connect_ms = 200;
  int timeout_ms = 1000;
  double breaker_s = 30;  // how long a failed cluster shard is skipped
  std::string ca_file;    // KILN_REMOTE_CA: the CA bundle https stores are verified with
};

// What `kiln cache remote status` prints for one server (a shard of a cluster, or the store).
struct ShardStatus {
  std::string name;
  bool reachable = false;
  double latency_ms = 0;
  int64_t entries = -1;  // -1: the store cannot count them
  int64_t bytes = -1;    // memory or disk in use; -1: unknown
  std::string why;       // why it is unreachable, or why the count stopped
};

class RemoteStore {
 public:
  virtual ~RemoteStore() = default;
  // Where it is, without credentials: "redis://host:port/db", "http://host:port/path".
  virtual std::string describe() const = 0;
  // The blob under `key`, or nullopt when there is none; a blob over max_bytes is a fault.
  virtual std::optional<std::string> get(const std::string& key, uint64_t max_bytes) = 0;
  // Stores `blob` unless `key` has one already: true when stored, false when it existed.
  virtual bool put_new(const std::string& key, const std::string& blob) = 0;
  // Redis stores lend leases their connection and a way to open another (for the renewing
  // thread) and name the keys that must share the entry's shard; stores without atomic
  // claims return nullptr: single flight then comes from another remote, or is off.
  virtual RedisLink* lease_link() { return nullptr; }
  virtual std::function<std::unique_ptr<RedisLink>()> link_factory() const { return {}; }
  // Each server's reachability, latency, and entries of this namespace (counted up to
  // `limit`, within `seconds`).
  virtual std::vector<ShardStatus> status(int64_t limit, double seconds) = 0;
};

// The store a URL names: redis://, redis+cluster://host:port[,host:port...], http://, https://.
// Throws UserError naming `where` for anything else or a malformed URL.
std::unique_ptr<RemoteStore> make_remote_store(const std::string& url, const StoreOptions& options,
                                               const std::string& where);
// The Redis key of a cache key's entry, lease and failure marker: one hash tag, so a cluster
// keeps all three on the key's shard and a lease's scripts touch one slot.
std::string redis_entry_key(const std::string& ns, const std::string& key);
std::string redis_lease_key(const std::string& ns, const std::string& key);
std::string redis_failed_key(const std::string& ns, const std::string& key);

}  // namespace kiln
