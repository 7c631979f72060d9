#pragma once
// A Redis connection (hiredis) whose every operation is bounded: the connect by
// connect_timeout, each command by op_timeout (socket timeouts, applied again after every
// reconnect, since hiredis 0.14 has no per-command timeout). A transport failure — refused,
// timed out, closed, or a reply that is not RESP — is a RemoteError; the next command
// reconnects. An error *reply* (NOPERM, OOM, WRONGTYPE) comes back as a kError reply.
#include <string>
#include <vector>

#include "util/error.h"

struct redisContext;

namespace kiln {

class RemoteError : public Error {
 public:
  using Error::Error;
};

// redis://[user:password@]host:port[/db]
struct RedisUrl {
  std::string host = "127.0.0.1";
  int port = 6379;
  std::string user, password;
  int db = 0;
  // Throws UserError naming `where` when the URL is malformed.
  static RedisUrl parse(const std::string& url, const std::string& where);
  std::string describe() const;  // host:port/db, no password
};

struct RedisReply {
  enum class Kind { kNil, kString, kStatus, kInteger, kArray, kError };
  Kind kind = Kind::kNil;
  std::string str;  // string, status or error text
  long long integer = 0;
  std::vector<RedisReply> elements;
  bool is_error() const { return kind == Kind::kError; }
};

class RedisClient {
 public:
  RedisClient(RedisUrl url, int connect_timeout_ms, int op_timeout_ms);
  ~RedisClient();
  RedisClient(const RedisClient&) = delete;
  RedisClient& operator=(const RedisClient&) = delete;

  RedisReply command(const std::vector<std::string>& args);
  const RedisUrl& url() const { return url_; }

 private:
  void connect();
  void drop();
  RedisUrl url_;
  int connect_ms_, op_ms_;
  redisContext* ctx_ = nullptr;
};

}  // namespace kiln
