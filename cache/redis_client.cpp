#include "cache/redis_client.h"

#include <hiredis/hiredis.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <fcntl.h>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <memory>

#include "util/escape.h"

namespace kiln {
namespace {

using Clock = std::chrono::steady_clock;

RedisReply convert(const redisReply* r) {
  RedisReply out;
  switch (r->type) {
    case REDIS_REPLY_STRING:
      out.kind = RedisReply::Kind::kString;
      out.str.assign(r->str, r->len);
      break;
    case REDIS_REPLY_STATUS:
      out.kind = RedisReply::Kind::kStatus;
      out.str.assign(r->str, r->len);
      break;
    case REDIS_REPLY_ERROR:
      out.kind = RedisReply::Kind::kError;
      out.str.assign(r->str, r->len);
      break;
    case REDIS_REPLY_INTEGER:
      out.kind = RedisReply::Kind::kInteger;
      out.integer = r->integer;
      break;
    case REDIS_REPLY_ARRAY:
      out.kind = RedisReply::Kind::kArray;
      for (size_t i = 0; i < r->elements; ++i) out.elements.push_back(convert(r->element[i]));
      break;
    default:
      out.kind = RedisReply::Kind::kNil;
  }
  return out;
}

int ms_left(Clock::time_point deadline) {
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
  return left.count() > 0 ? static_cast<int>(left.count()) : 0;
}

long long ms_since(Clock::time_point t) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - t).count();
}

// Waits until fd is ready for `events` or the deadline passes; false on timeout.
bool wait_for(int fd, short events, Clock::time_point deadline) {
  for (;;) {
    pollfd p{fd, events, 0};
    const int n = ::poll(&p, 1, ms_left(deadline));
    if (n > 0) return true;
    if (n == 0) return false;
    if (errno != EINTR) return false;
  }
}

// "redis://user:secret@host" -> "redis://user:***@host": URLs in messages never hold passwords.
std::string redacted(const std::string& url) {
  const auto scheme = url.find("://");
  const auto at = url.rfind('@');
  if (scheme == std::string::npos || at == std::string::npos || at < scheme) return url;
  const std::string cred = url.substr(scheme + 3, at - scheme - 3);
  const auto colon = cred.find(':');
  const std::string shown = colon == std::string::npos ? "***" : cred.substr(0, colon) + ":***";
  return url.substr(0, scheme + 3) + shown + url.substr(at);
}

}  // namespace

RedisUrl RedisUrl::parse(const std::string& text, const std::string& where) {
  auto bad = [&](const std::string& why) {
    return UserError(where + ": " + in_quotes(redacted(text)) + " is not a Redis URL (" + why +
                     "; expected redis://[user:password@]host:port[/db]; other remotes: "
                     "redis+cluster://host:port,..., http://host:port/path, https://...)");
  };
  const std::string scheme = "redis://";
  if (text.rfind(scheme, 0) != 0) throw bad("no redis:// scheme");
  std::string rest = text.substr(scheme.size());
  RedisUrl u;
  if (auto at = rest.rfind('@'); at != std::string::npos) {
    std::string cred = rest.substr(0, at);
    rest = rest.substr(at + 1);
    auto colon = cred.find(':');
    if (colon == std::string::npos) {
      u.password = cred;
    } else {
      u.user = cred.substr(0, colon);
      u.password = cred.substr(colon + 1);
    }
  }
  std::string hostport = rest, db;
  if (auto slash = rest.find('/'); slash != std::string::npos) {
    hostport = rest.substr(0, slash);
    db = rest.substr(slash + 1);
  }
  auto colon = hostport.rfind(':');
  u.host = colon == std::string::npos ? hostport : hostport.substr(0, colon);
  if (u.host.empty()) throw bad("no host");
  for (char c : u.host) {
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '-' || c == '_'))
      throw bad("bad host name");
  }
  auto number = [&](const std::string& s, int lo, int hi, const char* what) {
    char* end = nullptr;
    long v = std::strtol(s.c_str(), &end, 10);
    if (s.empty() || *end != '\0' || v < lo || v > hi ||
        !std::isdigit(static_cast<unsigned char>(s[0])))
      throw bad(std::string("bad ") + what);
    return static_cast<int>(v);
  };
  if (colon != std::string::npos) u.port = number(hostport.substr(colon + 1), 1, 65535, "port");
  if (!db.empty()) u.db = number(db, 0, 1 << 20, "database number");
  return u;
}

std::string RedisUrl::describe() const {
  return host + ":" + std::to_string(port) + "/" + std::to_string(db);
}

RedisClient::RedisClient(RedisUrl url, int connect_timeout_ms, int op_timeout_ms)
    : url_(std::move(url)), connect_ms_(connect_timeout_ms), op_ms_(op_timeout_ms) {}

RedisClient::~RedisClient() { drop(); }

void RedisClient::drop() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

void RedisClient::connect() {
  const auto deadline = Clock::now() + std::chrono::milliseconds(connect_ms_);
  auto fail = [&](const std::string& why) {
    drop();
    return RemoteError("cannot connect to Redis at " + url_.describe() + ": " + why);
  };
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  if (int rc = ::getaddrinfo(url_.host.c_str(), std::to_string(url_.port).c_str(), &hints, &found);
      rc != 0) {
    throw fail(::gai_strerror(rc));
  }
  std::unique_ptr<addrinfo, void (*)(addrinfo*)> list(found, ::freeaddrinfo);
  std::string why = "no address";
  for (addrinfo* a = found; a; a = a->ai_next) {
    fd_ = ::socket(a->ai_family, a->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, a->ai_protocol);
    if (fd_ < 0) {
      why = std::strerror(errno);
      continue;
    }
    int rc = ::connect(fd_, a->ai_addr, a->ai_addrlen);
    if (rc != 0 && errno == EINPROGRESS) {
      if (!wait_for(fd_, POLLOUT, deadline)) {
        why = "timed out after " + std::to_string(connect_ms_) + " ms";
        drop();
        continue;
      }
      int err = 0;
      socklen_t len = sizeof err;
      ::getsockopt(fd_, SOL_SOCKET, SO_ERROR, &err, &len);
      rc = err == 0 ? 0 : -1;
      errno = err;
    }
    if (rc == 0) break;
    why = std::strerror(errno);
    drop();
  }
  if (fd_ < 0) throw fail(why);
  int one = 1;
  ::setsockopt(fd_, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  auto setup = [&](const std::vector<std::string>& args, const char* what) {
    RedisReply r = command(args);
    if (r.is_error()) {
      drop();
      throw RemoteError(std::string(what) + " on Redis at " + url_.describe() +
                        " failed: " + terminal_text(r.str.substr(0, 200)));
    }
  };
  if (!url_.password.empty()) {
    if (url_.user.empty()) {
      setup({"AUTH", url_.password}, "AUTH");
    } else {
      setup({"AUTH", url_.user, url_.password}, "AUTH");
    }
  }
  if (url_.db != 0) setup({"SELECT", std::to_string(url_.db)}, "SELECT");
}

RedisReply RedisClient::command(const std::vector<std::string>& args, uint64_t max_reply_bytes) {
  if (fd_ < 0) connect();
  // The deadline grows with the bytes moved (kMinBytesPerSecond): a large entry may take
  // longer than a small one, a server that trickles bytes still fails near op_timeout.
  const auto start = Clock::now();
  uint64_t moved = 0;
  auto deadline_now = [&] {
    return start + std::chrono::milliseconds(op_ms_) +
           std::chrono::milliseconds(moved * 1000 / kMinBytesPerSecond);
  };
  const std::string& name = args.at(0);
  auto fail = [&](const std::string& why) {
    drop();  // a broken, slow or oversized exchange leaves the connection mid-reply
    return RemoteError("Redis at " + url_.describe() + ": " + name + " failed: " + why);
  };
  std::vector<const char*> argv;
  std::vector<size_t> lens;
  for (const auto& a : args) {
    argv.push_back(a.data());
    lens.push_back(a.size());
  }
  char* raw = nullptr;
  const int len =
      redisFormatCommandArgv(&raw, static_cast<int>(args.size()), argv.data(), lens.data());
  if (len < 0) throw fail("out of memory");
  std::unique_ptr<char, void (*)(void*)> request(raw, std::free);
  for (size_t sent = 0; sent < static_cast<size_t>(len);) {
    const ssize_t n = ::send(fd_, raw + sent, static_cast<size_t>(len) - sent, MSG_NOSIGNAL);
    if (n > 0) {
      sent += static_cast<size_t>(n);
      moved += static_cast<uint64_t>(n);
    } else if (n < 0 && (errno == EAGAIN || errno == EINTR)) {
      if (!wait_for(fd_, POLLOUT, deadline_now()))
        throw fail("timed out sending after " + std::to_string(ms_since(start)) + " ms");
    } else {
      throw fail(std::strerror(errno));
    }
  }
  std::unique_ptr<redisReader, void (*)(redisReader*)> reader(redisReaderCreate(), redisReaderFree);
  if (!reader) throw fail("out of memory");
  uint64_t received = 0;
  char buf[1 << 16];
  for (;;) {
    void* reply = nullptr;
    if (redisReaderGetReply(reader.get(), &reply) != REDIS_OK) {
      throw fail("the reply is not RESP (" + terminal_text(reader->errstr) + ")");
    }
    if (reply) {
      RedisReply out = convert(static_cast<redisReply*>(reply));
      freeReplyObject(reply);
      return out;
    }
    if (!wait_for(fd_, POLLIN, deadline_now()))
      throw fail("no complete reply within " + std::to_string(ms_since(start)) + " ms");
    const ssize_t n = ::recv(fd_, buf, sizeof buf, 0);
    if (n == 0) throw fail("the server closed the connection");
    if (n < 0) {
      if (errno == EAGAIN || errno == EINTR) continue;
      throw fail(std::strerror(errno));
    }
    received += static_cast<uint64_t>(n);
    moved += static_cast<uint64_t>(n);
    if (received > max_reply_bytes + 64) {  // 64: RESP's own framing around a bulk string
      throw fail("the reply is larger than " + std::to_string(max_reply_bytes) + " bytes");
    }
    if (redisReaderFeed(reader.get(), buf, static_cast<size_t>(n)) != REDIS_OK)
      throw fail("out of memory");
  }
}

}  // namespace kiln
