#include "cache/redis_cluster.h"

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstdlib>
#include <string_view>

#include "util/error.h"
#include "util/escape.h"

namespace kiln {
namespace {

constexpr int kSlots = 16384;

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

std::string node_name(const RedisUrl& u) { return u.host + ":" + std::to_string(u.port); }

bool starts_with(const std::string& s, const char* prefix) { return s.rfind(prefix, 0) == 0; }

// The key a command of kiln's is routed by: EVAL's first key, else its first argument.
std::string routing_key(const std::vector<std::string>& args) {
  if (args.empty()) return "";
  if (args[0] == "EVAL" || args[0] == "EVALSHA") return args.size() > 3 ? args[3] : "";
  if (args[0] == "PING" || args[0] == "SCAN" || args[0] == "INFO" || args[0] == "DBSIZE") return "";
  return args.size() > 1 ? args[1] : "";
}

}  // namespace

ClusterUrl ClusterUrl::parse(const std::string& text, const std::string& where) {
  const std::string scheme = "redis+cluster://";
  if (text.rfind(scheme, 0) != 0)
    throw UserError(where + ": expected redis+cluster://[user:password@]host:port[,host:port...]");
  std::string rest = text.substr(scheme.size()), cred;
  if (auto at = rest.rfind('@'); at != std::string::npos) {
    cred = rest.substr(0, at + 1);
    rest = rest.substr(at + 1);
  }
  if (rest.find('/') != std::string::npos) {
    throw UserError(where + ": a Redis Cluster has only database 0: drop the '/…' from " +
                    in_quotes(scheme + rest));
  }
  ClusterUrl u;
  size_t from = 0;
  while (from <= rest.size()) {
    const size_t comma = rest.find(',', from);
    const std::string hostport =
        rest.substr(from, comma == std::string::npos ? comma : comma - from);
    // Each seed goes through the one Redis URL parser (its host and port rules, its errors).
    std::string seed = "redis://";
    seed += cred;
    seed += hostport;
    u.seeds.push_back(RedisUrl::parse(seed, where));
    if (comma == std::string::npos) break;
    from = comma + 1;
  }
  return u;
}

std::string ClusterUrl::describe() const {
  std::string s = "redis+cluster://";
  for (size_t i = 0; i < seeds.size(); ++i) s += (i ? "," : "") + node_name(seeds[i]);
  return s;
}

int cluster_slot(const std::string& key) {
  std::string_view k = key;
  if (auto open = k.find('{'); open != std::string_view::npos) {
    if (auto close = k.find('}', open + 1); close != std::string_view::npos && close > open + 1)
      k = k.substr(open + 1, close - open - 1);
  }
  uint16_t crc = 0;
  for (unsigned char c : k) {
    crc ^= static_cast<uint16_t>(c << 8);
    for (int i = 0; i < 8; ++i)
      crc = (crc & 0x8000) ? static_cast<uint16_t>((crc << 1) ^ 0x1021)
                           : static_cast<uint16_t>(crc << 1);
  }
  return crc % kSlots;
}

RedisClusterClient::RedisClusterClient(ClusterUrl url, int connect_ms, int op_ms, double breaker_s)
    : url_(std::move(url)),
      connect_ms_(connect_ms),
      op_ms_(op_ms),
      breaker_s_(breaker_s),
      owner_(kSlots) {
  for (const auto& s : url_.seeds) nodes_[node_name(s)] = s;
}

RedisClient& RedisClusterClient::client(const std::string& node) {
  auto& c = clients_[node];
  if (!c) {
    auto it = nodes_.find(node);
    if (it == nodes_.end()) {
      clients_.erase(node);
      throw ShardError("unknown cluster node " + in_quotes(node));
    }
    c = std::make_unique<RedisClient>(it->second, connect_ms_, op_ms_);
  }
  return *c;
}

std::string RedisClusterClient::add_node(const std::string& host_in, long long port,
                                         const std::string& asked) {
  // An empty host (or "?") means "the node you asked" (Redis 7 may answer so).
  std::string host = host_in;
  if (host.empty() || host == "?") host = nodes_.count(asked) ? nodes_.at(asked).host : "";
  bool ok = !host.empty() && port >= 1 && port <= 65535 && host.size() <= 255;
  for (char ch : host) {
    ok = ok && (std::isalnum(static_cast<unsigned char>(ch)) || ch == '.' || ch == '-' ||
                ch == '_' || ch == ':');
  }
  if (!ok) {
    throw ShardError("the cluster named a node that is not an address: " +
                     in_quotes(host_in + ":" + std::to_string(port)));
  }
  std::string name = host + ":" + std::to_string(port);
  if (!nodes_.count(name)) {
    RedisUrl u = url_.seeds.at(0);  // the URL's credentials
    u.host = host;
    u.port = static_cast<int>(port);
    nodes_[name] = u;
  }
  return name;
}

bool RedisClusterClient::is_down(const std::string& node) const {
  auto it = down_until_.find(node);
  return it != down_until_.end() && now_s() < it->second;
}

void RedisClusterClient::refresh() {
  refreshed_at_ = now_s();
  std::vector<std::string> candidates;
  for (const auto& [name, u] : nodes_) {
    if (!is_down(name)) candidates.push_back(name);
  }
  std::string why = "no node is up";
  for (const auto& name : candidates) {
    RedisReply r;
    try {
      r = client(name).command({"CLUSTER", "SLOTS"}, uint64_t{4} << 20);
    } catch (const RemoteError& e) {
      down_until_[name] = now_s() + breaker_s_;
      why = e.what();
      continue;
    }
    if (r.kind != RedisReply::Kind::kArray) {
      why = "CLUSTER SLOTS on " + name + " answered " +
            (r.is_error() ? terminal_text(r.str.substr(0, 200)) : std::string("no slot map"));
      continue;
    }
    std::vector<std::string> owner(kSlots);
    for (const auto& range : r.elements) {
      if (range.elements.size() < 3 || range.elements[2].elements.size() < 2) continue;
      const auto lo = range.elements[0].integer, hi = range.elements[1].integer;
      const auto& master = range.elements[2];
      std::string node;
      try {
        node = add_node(master.elements[0].str, master.elements[1].integer, name);
      } catch (const ShardError&) {
        continue;  // a slot range with a bad address stays unserved
      }
      for (long long s = std::max(0LL, lo); s <= hi && s < kSlots; ++s)
        owner[static_cast<size_t>(s)] = node;
    }
    owner_ = std::move(owner);
    stale_ = false;
    return;
  }
  throw RemoteError("cannot read the slot map (" + why + ")");
}

void RedisClusterClient::maybe_refresh() {
  if (stale_ && now_s() - refreshed_at_ >= 1.0) {
    try {
      refresh();
    } catch (const RemoteError&) {
      // Keep the map we have; its live shards still serve.
    }
  }
}

RedisReply RedisClusterClient::on_node(const std::string& node,
                                       const std::vector<std::string>& args,
                                       uint64_t max_reply_bytes, bool asking) {
  try {
    RedisClient& c = client(node);
    if (asking) c.command({"ASKING"});
    return c.command(args, max_reply_bytes);
  } catch (const RemoteError& e) {
    down_until_[node] = now_s() + breaker_s_;
    stale_ = true;  // a failover may move its slots
    throw ShardError("shard " + node + ": " + e.what());
  }
}

RedisReply RedisClusterClient::command(const std::vector<std::string>& args,
                                       uint64_t max_reply_bytes) {
  if (owner_[0].empty() && stale_) refresh();  // the first command: no map yet
  maybe_refresh();
  const std::string key = routing_key(args);
  std::string node;
  if (key.empty()) {
    for (const auto& [name, u] : nodes_) {
      if (!is_down(name)) {
        node = name;
        break;
      }
    }
    if (node.empty()) throw RemoteError("no node is up");
  } else {
    node = owner_[static_cast<size_t>(cluster_slot(key))];
    if (node.empty()) {
      stale_ = true;  // a map read mid-change: read it again
      throw ShardError("no shard serves slot " + std::to_string(cluster_slot(key)));
    }
  }
  bool asking = false;
  for (int hop = 0; hop < 5; ++hop) {
    if (is_down(node)) {
      throw ShardError("shard " + node + " failed recently; skipped");
    }
    RedisReply r = on_node(node, args, max_reply_bytes, asking);
    if (!r.is_error()) return r;
    // "MOVED 3999 127.0.0.1:6381": the slot lives elsewhere now; "ASK ...": for this one
    // command, while the slot migrates.
    const bool moved = starts_with(r.str, "MOVED "), ask = starts_with(r.str, "ASK ");
    if (moved || ask) {
      // "MOVED <slot> <host>:<port>", host possibly empty.
      const std::string addr = r.str.substr(r.str.rfind(' ') + 1);
      const auto colon = addr.rfind(':');
      char* end = nullptr;
      const long long port =
          colon == std::string::npos ? 0 : std::strtoll(addr.c_str() + colon + 1, &end, 10);
      if (colon == std::string::npos || end == addr.c_str() + colon + 1 || *end != '\0') {
        throw ShardError("shard " + node + " redirected to " + in_quotes(addr) +
                         ", which is not an address");
      }
      const std::string to = add_node(addr.substr(0, colon), port, node);
      if (moved) {
        const int slot = std::atoi(r.str.c_str() + 6);
        if (slot >= 0 && slot < kSlots) owner_[static_cast<size_t>(slot)] = to;
        stale_ = true;
      }
      node = to;
      asking = ask;
      continue;
    }
    if (starts_with(r.str, "CLUSTERDOWN") || starts_with(r.str, "TRYAGAIN")) {
      stale_ = true;
      throw ShardError("shard " + node + ": " + terminal_text(r.str.substr(0, 200)));
    }
    return r;  // an ordinary error reply (NOPERM, OOM): the caller's to judge
  }
  throw ShardError("more than 5 redirections for " + in_quotes(key));
}

std::vector<RedisUrl> RedisClusterClient::data_nodes() {
  if (stale_) {
    try {
      refresh();
    } catch (const RemoteError&) {
    }
  }
  std::vector<RedisUrl> out;
  std::vector<std::string> seen;
  for (const auto& n : owner_) {
    if (n.empty() || std::find(seen.begin(), seen.end(), n) != seen.end()) continue;
    seen.push_back(n);
    out.push_back(nodes_.at(n));
  }
  if (out.empty()) out = url_.seeds;
  return out;
}

}  // namespace kiln
