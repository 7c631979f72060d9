#pragma once
// Test servers for the remote tier: a real redis-server started on a free loopback port, a
// server that speaks something other than RESP, and a scripted one that answers RESP slowly
// or with whatever a test asks for; plus the key pairs and environments the tests run kiln with.
#include <sys/types.h>

#include <atomic>
#include <filesystem>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "cache/redis_client.h"

namespace kiln::testing::redis {

// A port nothing listens on right now (the kernel picks it).
int free_port();
// A free port P whose cluster bus port, P + 10000, is free too (so P <= 55535).
int free_cluster_port();

// A redis-server of its own on 127.0.0.1, stopped (SIGKILL) with the test.
class RedisServer {
 public:
  // port 0: a free one.
  explicit RedisServer(const std::vector<std::string>& extra = {}, int port = 0);
  ~RedisServer();
  RedisServer(const RedisServer&) = delete;
  RedisServer& operator=(const RedisServer&) = delete;
  bool up() const { return up_; }
  RedisUrl url() const;
  std::string url_text(const std::string& cred = "") const;
  RedisReply admin(const std::vector<std::string>& args) const;
  pid_t pid() const { return pid_; }
  int port() const { return port_; }
  // SIGKILL now, reaped: a shard that dies mid-run.
  void kill_now();
  bool alive() const { return pid_ > 0; }

 private:
  int port_;
  pid_t pid_ = -1;
  bool up_ = false;
};

// A server that answers anything with bytes that are not RESP.
class GarbageServer {
 public:
  GarbageServer();
  ~GarbageServer();
  std::string url() const { return "redis://127.0.0.1:" + std::to_string(port_); }

 private:
  int port_, fd_;
  std::thread thread_;
};

// A server whose every reply is written by `reply(request bytes)` and sent `gap_ms` apart per
// byte (0: at once), so tests can play a slow, lying or endless server.
class ScriptedServer {
 public:
  // close_after: the connection is closed after each reply (a body cut short).
  ScriptedServer(std::function<std::string(const std::string&)> reply, int gap_ms,
                 bool close_after = false);
  ~ScriptedServer();
  std::string url() const { return "redis://127.0.0.1:" + std::to_string(port_); }
  int port() const { return port_; }

 private:
  int port_, fd_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

// A stored blob as the packed entry it carries (expanded when it travels compressed).
std::string plain(const std::string& blob);
// The cache key of a Redis key "ns:e:{KEY}" (or a lease's, "ns:l:{KEY}").
std::string cache_key_of(const std::string& redis_key);

struct Keys {
  std::filesystem::path dir;
  std::string pub;
};

// `kiln cache keygen NAME --out DIR`: DIR/NAME.secret and the public key.
Keys make_keys(const std::filesystem::path& dir, const std::string& name);
// A Redis Cluster of its own on loopback ports: `masters` masters, each with `replicas`
// replicas, slots spread evenly, up (cluster_state:ok everywhere) before the constructor
// returns. Shards keep serving while another is down (cluster-require-full-coverage no), and
// a replica takes over a master that has been unreachable for a second.
class RedisCluster {
 public:
  RedisCluster(int masters, int replicas);
  bool up() const { return up_; }
  std::string url_text(const std::string& cred = "") const;  // redis+cluster://all masters
  RedisServer& node(size_t i) { return *nodes_.at(i); }
  size_t masters() const { return masters_; }
  // The master that serves `key`'s slot now (by CLUSTER SLOTS).
  size_t owner_of(const std::string& key) const;
  // Waits (bounded) until every live node reports cluster_state:ok and no slot names a dead
  // master; false on timeout.
  bool wait_ok(double seconds) const;
  std::string node_id(size_t i) const;

 private:
  size_t masters_;
  std::string dir_;
  std::vector<std::unique_ptr<RedisServer>> nodes_;
  bool up_ = false;
};

// Environments for a writer and a reader of any remote URL list.
std::vector<std::string> writer_env(const std::string& remote, const std::filesystem::path& cache,
                                    const Keys& k, const std::string& name);
std::vector<std::string> reader_env(const std::string& remote, const std::filesystem::path& cache,
                                    const Keys& k);
// `n` hosts started at once, each with its own cache (base/m<i>) and all writers of `remote`,
// each running `kiln` with args_of(i); every compiler run goes through `cc_wrapper`, which logs
// it, so a test can count the compiles across all hosts.
struct HostsRun {
  std::vector<std::string> errs;  // each host's stderr
  std::string failed;             // the hosts that exited non-zero, one per line
  int compiler_runs = 0;          // compiler starts across every host
  int kernels_compiled = 0;       // what the hosts' "kernels …" lines say they compiled
};
HostsRun run_hosts_at_once(int n, const std::string& remote, const std::filesystem::path& base,
                           const Keys& k, const std::string& cc_wrapper,
                           const std::function<std::vector<std::string>(int)>& args_of);

std::vector<std::string> writer_env(const RedisServer& s, const std::filesystem::path& cache,
                                    const Keys& k, const std::string& name);
std::vector<std::string> reader_env(const RedisServer& s, const std::filesystem::path& cache,
                                    const Keys& k);

}  // namespace kiln::testing::redis
