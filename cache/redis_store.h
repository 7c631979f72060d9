#pragma once
// A remote store on Redis, one server or a cluster (through a RedisLink): an entry is one
// string key written with SET NX; leases use the same link.
#include <functional>
#include <memory>
#include <string>

#include "cache/redis_client.h"
#include "cache/remote_store.h"

namespace kiln {

class RedisStore : public RemoteStore {
 public:
  using LinkFactory = std::function<std::unique_ptr<RedisLink>()>;
  RedisStore(std::string description, LinkFactory factory, StoreOptions options);
  std::string describe() const override { return description_; }
  std::optional<std::string> get(const std::string& key, uint64_t max_bytes) override;
  bool put_new(const std::string& key, const std::string& blob) override;
  RedisLink* lease_link() override { return &link(); }
  LinkFactory link_factory() const override { return factory_; }
  std::vector<ShardStatus> status(int64_t limit, double seconds) override;

 private:
  RedisLink& link();
  std::string description_;
  LinkFactory factory_;
  StoreOptions options_;
  std::unique_ptr<RedisLink> link_;
};

}  // namespace kiln
