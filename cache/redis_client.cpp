#include "cache/redis_client.h"

#include <hiredis/hiredis.h>
#include <sys/time.h>

#include <cstdlib>

namespace kiln {
namespace {

timeval to_timeval(int ms) {
  timeval tv{};
  tv.tv_sec = ms / 1000;
  tv.tv_usec = (ms % 1000) * 1000;
  return tv;
}

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

}  // namespace

RedisUrl RedisUrl::parse(const std::string& text, const std::string& where) {
  auto bad = [&](const std::string& why) {
    return UserError(where + ": '" + text + "' is not a Redis URL (" + why +
                     "; expected redis://[user:password@]host:port[/db])");
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
  auto number = [&](const std::string& s, int lo, int hi, const char* what) {
    char* end = nullptr;
    long v = std::strtol(s.c_str(), &end, 10);
    if (s.empty() || *end != '\0' || v < lo || v > hi) throw bad(std::string("bad ") + what);
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
  if (ctx_) redisFree(ctx_);
  ctx_ = nullptr;
}

void RedisClient::connect() {
  ctx_ = redisConnectWithTimeout(url_.host.c_str(), url_.port, to_timeval(connect_ms_));
  if (!ctx_ || ctx_->err) {
    std::string why = ctx_ ? ctx_->errstr : "out of memory";
    drop();
    throw RemoteError("cannot connect to Redis at " + url_.describe() + ": " + why);
  }
  if (redisSetTimeout(ctx_, to_timeval(op_ms_)) != REDIS_OK) {
    drop();
    throw RemoteError("cannot set timeouts on the Redis connection to " + url_.describe());
  }
  auto setup = [&](const std::vector<std::string>& args, const char* what) {
    RedisReply r = command(args);
    if (r.is_error()) {
      drop();
      throw RemoteError(std::string(what) + " on Redis at " + url_.describe() +
                        " failed: " + r.str);
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

RedisReply RedisClient::command(const std::vector<std::string>& args) {
  if (!ctx_) connect();
  std::vector<const char*> argv;
  std::vector<size_t> lens;
  for (const auto& a : args) {
    argv.push_back(a.data());
    lens.push_back(a.size());
  }
  auto* r = static_cast<redisReply*>(
      redisCommandArgv(ctx_, static_cast<int>(args.size()), argv.data(), lens.data()));
  if (!r) {
    std::string why = ctx_->errstr[0] ? ctx_->errstr : "no reply";
    drop();  // a broken or timed-out connection is not reused
    throw RemoteError("Redis at " + url_.describe() + ": " + args.at(0) + " failed: " + why);
  }
  RedisReply out = convert(r);
  freeReplyObject(r);
  return out;
}

}  // namespace kiln
