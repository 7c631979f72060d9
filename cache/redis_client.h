#pragma once
// A Redis connection whose every operation is bounded in time and size: the connect by
// connect_timeout, each command by op_timeout in total plus one second per kMinBytesPerSecond
// moved (not per read: a server that sends one byte every half second still fails at the
// deadline, while a 64 MiB entry gets the time a loaded server needs), and each reply by a
// byte count. kiln
// speaks RESP over its own non-blocking socket and uses hiredis only to parse replies. A
// transport failure — refused, timed out, closed, too large, or a reply that is not RESP — is a
// RemoteError and drops the connection; the next command reconnects. An error *reply*
// (NOPERM, OOM, WRONGTYPE) comes back as a kError reply.
#include <cstdint>
#include <string>
#include <vector>

#include "util/error.h"

namespace kiln {

// The slowest transfer rate an operation's deadline allows for beyond its timeout.
inline constexpr uint64_t kMinBytesPerSecond = uint64_t{8} << 20;

class RemoteError : public Error {
 public:
  using Error::Error;
};

// One shard of a cluster is down or skipped: the keys it serves miss, the others still work,
// so the remote as a whole stays in use.
class ShardError : public RemoteError {
 public:
  using RemoteError::RemoteError;
};

// redis://[user:password@]host:port[/db]
struct RedisUrl {
  std::string host = "127.0.0.1";
  int port = 6379;
  std::string user, password;
  int db = 0;
  // Throws UserError naming `where` when the URL is malformed; the message never shows the
  // password.
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

// Something that runs Redis commands: one server (RedisClient) or a cluster that routes each
// command by its key (RedisClusterClient). Commands kiln sends name their key first (GET, SET,
// DEL) or as EVAL's only key.
class RedisLink {
 public:
  // Replies larger than this fail unless a command asks for more.
  static constexpr uint64_t kDefaultMaxReply = 1 << 20;
  virtual ~RedisLink() = default;
  virtual RedisReply command(const std::vector<std::string>& args,
                             uint64_t max_reply_bytes = kDefaultMaxReply) = 0;
  // The servers that hold data (the masters of a cluster), for status walks.
  virtual std::vector<RedisUrl> data_nodes() = 0;
};

class RedisClient : public RedisLink {
 public:
  RedisClient(RedisUrl url, int connect_timeout_ms, int op_timeout_ms);
  ~RedisClient();
  RedisClient(const RedisClient&) = delete;
  RedisClient& operator=(const RedisClient&) = delete;

  // Sends one command and reads its reply within op_timeout in total; a reply of more than
  // max_reply_bytes is a RemoteError (and the connection is dropped, unread).
  RedisReply command(const std::vector<std::string>& args,
                     uint64_t max_reply_bytes = kDefaultMaxReply) override;
  std::vector<RedisUrl> data_nodes() override { return {url_}; }
  const RedisUrl& url() const { return url_; }

 private:
  void connect();
  void drop();
  RedisUrl url_;
  int connect_ms_, op_ms_;
  int fd_ = -1;
};

}  // namespace kiln
