#include "cache/remote_store.h"

#include "cache/http_store.h"
#include "cache/redis_cluster.h"
#include "cache/redis_store.h"
#include "util/error.h"

namespace kiln {

std::unique_ptr<RemoteStore> make_remote_store(const std::string& url, const StoreOptions& options,
                                               const std::string& where) {
  if (url.rfind("redis+cluster://", 0) == 0) {
    ClusterUrl u = ClusterUrl::parse(url, where);
    return std::make_unique<RedisStore>(
        u.describe(),
        [u, options] {
          return std::make_unique<RedisClusterClient>(u, options.connect_ms, options.timeout_ms,
                                                      options.breaker_s);
        },
        options);
  }
  if (url.rfind("http://", 0) == 0 || url.rfind("https://", 0) == 0)
    return std::make_unique<HttpStore>(HttpUrl::parse(url, where), options);
  // Everything else goes to the Redis parser, whose error lists what a Redis URL looks like.
  RedisUrl u = RedisUrl::parse(url, where);
  return std::make_unique<RedisStore>(
      "redis://" + u.describe(),
      [u, options] {
        return std::make_unique<RedisClient>(u, options.connect_ms, options.timeout_ms);
      },
      options);
}

}  // namespace kiln
