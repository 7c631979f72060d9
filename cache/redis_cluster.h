#pragma once
// A Redis Cluster as one RedisLink: commands go to the master that serves their key's slot
// (CRC16 of the key's hash tag, from the map CLUSTER SLOTS gives), follow MOVED (the map is
// read again) and ASK (one ASKING, then the command) redirections, and a shard that fails is
// skipped for breaker_s: its keys raise ShardError at once — one timeout per process, not per
// key — while every other shard keeps serving. The map is read again (at most once a second)
// after a redirection or a failure, so a replica promoted in a failover takes over its slots.
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "cache/redis_client.h"

namespace kiln {

// redis+cluster://[user:password@]host:port[,host:port...]: the seed nodes.
struct ClusterUrl {
  std::vector<RedisUrl> seeds;  // each with the URL's credentials
  static ClusterUrl parse(const std::string& url, const std::string& where);
  std::string describe() const;  // redis+cluster://host:port,..., no password
};

// The slot (0..16383) of a key: CRC16-XMODEM of its hash tag ({...}) or of the whole key.
int cluster_slot(const std::string& key);

class RedisClusterClient : public RedisLink {
 public:
  RedisClusterClient(ClusterUrl url, int connect_ms, int op_ms, double breaker_s);
  RedisReply command(const std::vector<std::string>& args,
                     uint64_t max_reply_bytes = kDefaultMaxReply) override;
  std::vector<RedisUrl> data_nodes() override;

 private:
  void refresh();  // reads the slot map from the first seed or known node that answers
  void maybe_refresh();
  RedisClient& client(const std::string& node);
  // Registers host:port (checked: a lying server's redirection is refused, not parsed
  // loosely) and returns its name; an empty host is the node `asked`.
  std::string add_node(const std::string& host, long long port, const std::string& asked);
  bool is_down(const std::string& node) const;
  RedisReply on_node(const std::string& node, const std::vector<std::string>& args,
                     uint64_t max_reply_bytes, bool asking);

  ClusterUrl url_;
  int connect_ms_, op_ms_;
  double breaker_s_;
  std::vector<std::string> owner_;  // slot -> "host:port" ("" until the map is read)
  std::map<std::string, RedisUrl> nodes_;
  std::map<std::string, std::unique_ptr<RedisClient>> clients_;
  std::map<std::string, double> down_until_;
  bool stale_ = true;
  double refreshed_at_ = -1e9;
};

}  // namespace kiln
