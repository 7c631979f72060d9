#pragma once
// A remote store over HTTP(S), as ccache's and bazel-remote's HTTP caches and any WebDAV
// server (nginx's dav module) serve one: GET <base>/<ns>/<key> reads an entry (404: a miss),
// HEAD tells whether one exists, PUT writes it. Every request is bounded (connect and total
// time, the body's size: a larger or truncated body is a fault, never a short entry). HTTP has
// no atomic claim, so this store lends no leases: single flight comes from a Redis remote
// listed beside it, or is off.
#include <memory>
#include <string>

#include "cache/remote_store.h"

namespace kiln {

// http[s]://[user:password@]host[:port][/path]
struct HttpUrl {
  std::string scheme, host, path;  // path without a trailing '/'
  int port = 0;
  std::string user, password;
  static HttpUrl parse(const std::string& url, const std::string& where);
  std::string base() const;      // with credentials left out: they go to curl separately
  std::string describe() const;  // the same, for messages
};

class HttpStore : public RemoteStore {
 public:
  HttpStore(HttpUrl url, StoreOptions options);
  ~HttpStore() override;
  HttpStore(const HttpStore&) = delete;
  HttpStore& operator=(const HttpStore&) = delete;
  std::string describe() const override { return url_.describe(); }
  std::optional<std::string> get(const std::string& key, uint64_t max_bytes) override;
  bool put_new(const std::string& key, const std::string& blob) override;
  std::vector<ShardStatus> status(int64_t limit, double seconds) override;

 private:
  struct Reply {
    long code = 0;
    std::string body;
  };
  // One request on the kept-alive handle; throws RemoteError on a transport fault.
  Reply request(const std::string& method, const std::string& url, const std::string* body,
                uint64_t max_bytes);
  std::string entry_url(const std::string& key) const;
  HttpUrl url_;
  StoreOptions options_;
  void* curl_ = nullptr;  // CURL*, kept so connections are reused
};

}  // namespace kiln
