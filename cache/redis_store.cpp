#include "cache/redis_store.h"

#include <chrono>

#include "util/escape.h"

namespace kiln {
namespace {

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// An error reply is a fault of this store: the tier reports it and skips the store.
void check(const RedisReply& r, const char* what) {
  if (r.is_error())
    throw RemoteError(std::string(what) + " refused: " + terminal_text(r.str.substr(0, 200)));
}

// One INFO field ("used_memory:123") as a number; -1 when absent.
int64_t info_field(const std::string& info, const std::string& name) {
  const auto at = info.find(name + ":");
  if (at == std::string::npos) return -1;
  return std::atoll(info.c_str() + at + name.size() + 1);
}

}  // namespace

std::string redis_entry_key(const std::string& ns, const std::string& key) {
  return ns + ":e:{" + key + "}";
}
std::string redis_lease_key(const std::string& ns, const std::string& key) {
  return ns + ":l:{" + key + "}";
}
std::string redis_failed_key(const std::string& ns, const std::string& key) {
  return ns + ":x:{" + key + "}";
}

RedisStore::RedisStore(std::string description, LinkFactory factory, StoreOptions options)
    : description_(std::move(description)),
      factory_(std::move(factory)),
      options_(std::move(options)) {}

RedisLink& RedisStore::link() {
  if (!link_) link_ = factory_();
  return *link_;
}

std::optional<std::string> RedisStore::get(const std::string& key, uint64_t max_bytes) {
  RedisReply r = link().command({"GET", redis_entry_key(options_.ns, key)}, max_bytes);
  check(r, "GET");
  if (r.kind == RedisReply::Kind::kNil) return std::nullopt;
  if (r.kind != RedisReply::Kind::kString)
    throw RemoteError("GET returned something other than a string");
  return std::move(r.str);
}

bool RedisStore::put_new(const std::string& key, const std::string& blob) {
  RedisReply r = link().command({"SET", redis_entry_key(options_.ns, key), blob, "NX"});
  check(r, "SET");
  return r.kind == RedisReply::Kind::kStatus;
}

std::vector<ShardStatus> RedisStore::status(int64_t limit, double seconds) {
  std::vector<ShardStatus> out;
  std::vector<RedisUrl> nodes;
  try {
    nodes = link().data_nodes();
  } catch (const RemoteError& e) {
    ShardStatus s;
    s.name = description_;
    s.why = e.what();
    return {s};
  }
  const double deadline = now_s() + seconds;
  for (const RedisUrl& node : nodes) {
    ShardStatus s;
    s.name = node.host + ":" + std::to_string(node.port);
    // A connection of its own per shard: status walks every master, not one key's owner.
    RedisClient c(node, options_.connect_ms, options_.timeout_ms);
    try {
      const double t0 = now_s();
      RedisReply pong = c.command({"PING"});
      s.latency_ms = (now_s() - t0) * 1000;
      check(pong, "PING");
      s.reachable = true;
      RedisReply info = c.command({"INFO", "memory"});
      if (info.kind == RedisReply::Kind::kString) s.bytes = info_field(info.str, "used_memory");
      // SCAN may keep returning a cursor and no keys: bounded by time and rounds.
      int64_t n = 0;
      std::string cursor = "0";
      constexpr int kRounds = 100000;
      for (int round = 0; round < kRounds; ++round) {
        RedisReply r = c.command({"SCAN", cursor, "MATCH", options_.ns + ":e:*", "COUNT", "1000"});
        if (r.kind != RedisReply::Kind::kArray || r.elements.size() != 2) {
          // Not a count: the entries are unknown, not zero.
          s.why = "SCAN answered something other than a cursor and keys (counted " +
                  std::to_string(n) + " entries so far)";
          break;
        }
        cursor = r.elements[0].str;
        n += static_cast<int64_t>(r.elements[1].elements.size());
        if (cursor == "0" || n >= limit) break;
        if (now_s() > deadline) {
          s.why = "SCAN did not finish within " + std::to_string(static_cast<int>(seconds)) +
                  " s (counted " + std::to_string(n) + " entries so far)";
          break;
        }
      }
      // Out of rounds before the deadline (a fast server that never ends its scan): the
      // count is as unfinished as at the deadline.
      if (s.why.empty() && cursor != "0" && n < limit) {
        s.why = "SCAN did not finish in " + std::to_string(kRounds) + " rounds (counted " +
                std::to_string(n) + " entries so far)";
      }
      s.entries = n;
    } catch (const RemoteError& e) {
      s.why = e.what();
    }
    out.push_back(std::move(s));
  }
  return out;
}

}  // namespace kiln
