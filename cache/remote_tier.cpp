#include "cache/remote_tier.h"

#include <chrono>
#include <cstdlib>
#include <random>

#include "util/fs.h"
#include "util/log.h"
#include "util/sha256.h"

namespace kiln {
namespace {

constexpr const char kMagic[] = "kiln-entry 1\n";

std::string random_token() {
  static thread_local std::mt19937_64 gen{std::random_device{}()};
  return std::to_string(gen()) + "-" + std::to_string(gen());
}

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

}  // namespace

std::optional<RemoteConfig> RemoteConfig::from_env() {
  const char* url = std::getenv("KILN_REMOTE_CACHE");
  if (!url || !*url) return std::nullopt;
  RemoteConfig c;
  c.url = RedisUrl::parse(url, "KILN_REMOTE_CACHE");
  if (const char* ns = std::getenv("KILN_REMOTE_CACHE_NAMESPACE"); ns && *ns) {
    c.ns = ns;
    if (c.ns.find_first_of(" :\n") != std::string::npos)
      throw UserError("KILN_REMOTE_CACHE_NAMESPACE: '" + c.ns + "' may not hold spaces or ':'");
  }
  if (const char* t = std::getenv("KILN_REMOTE_TIMEOUT"); t && *t) {
    char* end = nullptr;
    double s = std::strtod(t, &end);
    if (*end != '\0' || !(s > 0) || s > 600)
      throw UserError(std::string("KILN_REMOTE_TIMEOUT: '") + t +
                      "' is not a number of seconds (e.g. 1, 0.25)");
    c.timeout_ms = std::max(1, static_cast<int>(s * 1000));
    c.connect_ms = std::min(c.connect_ms, c.timeout_ms);
  }
  auto seconds = [](const char* var, double max_s) -> std::optional<int> {
    const char* t = std::getenv(var);
    if (!t || !*t) return std::nullopt;
    char* end = nullptr;
    double s = std::strtod(t, &end);
    if (*end != '\0' || !(s > 0) || s > max_s)
      throw UserError(std::string(var) + ": '" + t + "' is not a number of seconds");
    return std::max(1, static_cast<int>(s * 1000));
  };
  if (auto ms = seconds("KILN_REMOTE_LEASE", 3600)) c.lease_ms = *ms;
  if (auto ms = seconds("KILN_REMOTE_WAIT", 86400)) c.wait_ms = *ms;
  if (const char* trust = std::getenv("KILN_REMOTE_CACHE_TRUST"); trust && *trust) {
    if (std::string(trust) != "unsigned" && std::string(trust) != "signed")
      throw UserError(std::string("KILN_REMOTE_CACHE_TRUST: '") + trust +
                      "' is neither 'signed' (the default) nor 'unsigned'");
    c.trust_unsigned = std::string(trust) == "unsigned";
  }
  return c;
}

std::string pack_entry(const EntryMeta& meta, const std::vector<std::string>& file_bytes) {
  const std::string json = meta.to_json();
  std::string blob = kMagic + std::to_string(json.size()) + "\n" + json;
  for (const auto& f : file_bytes) blob += f;
  return blob;
}

RemoteEntry unpack_entry(const std::string& blob, const std::string& key) {
  const size_t magic = sizeof kMagic - 1;
  if (blob.compare(0, magic, kMagic) != 0) throw CacheEntryError("not a kiln entry (bad header)");
  const size_t nl = blob.find('\n', magic);
  if (nl == std::string::npos || nl - magic > 12) throw CacheEntryError("bad meta.json length");
  char* end = nullptr;
  const std::string len_text = blob.substr(magic, nl - magic);
  const unsigned long long json_len = std::strtoull(len_text.c_str(), &end, 10);
  if (len_text.empty() || *end != '\0' || json_len > blob.size() - nl - 1)
    throw CacheEntryError("meta.json length " + len_text + " runs past the entry");
  RemoteEntry e;
  e.bytes = blob.size();
  e.meta = EntryMeta::parse(blob.substr(nl + 1, json_len), "remote meta.json");
  if (e.meta.key != key) throw CacheEntryError("it describes key " + e.meta.key);
  size_t at = nl + 1 + json_len;
  for (const auto& f : e.meta.files) {
    if (f.size > blob.size() - at)
      throw CacheEntryError(f.name + " is truncated (" + std::to_string(blob.size() - at) +
                            " bytes left, meta.json says " + std::to_string(f.size) + ")");
    std::string bytes = blob.substr(at, f.size);
    at += f.size;
    if (sha256_hex(bytes) != f.sha256)
      throw CacheEntryError(f.name + " does not match its SHA-256 in meta.json");
    e.files.emplace_back(f.name, std::move(bytes));
  }
  if (at != blob.size())
    throw CacheEntryError(std::to_string(blob.size() - at) + " bytes after the last file");
  return e;
}

RemoteTier::RemoteTier(RemoteConfig config, SignaturePolicy signatures)
    : config_(std::move(config)), signatures_(std::move(signatures)) {}

RemoteTier* RemoteTier::process_default() {
  static std::once_flag once;
  static std::unique_ptr<RemoteTier> tier;

  std::call_once(once, [] {
    if (auto c = RemoteConfig::from_env())
      tier = std::make_unique<RemoteTier>(*c, SignaturePolicy::from_env());
  });
  return tier.get();
}

bool RemoteTier::available(const char* what) {
  if (now_s() < skip_until_) {
    if (debug_level() >= 2)
      log_line(std::string("remote cache: skipped (") + what + "): circuit open");
    return false;
  }
  if (!client_)
    client_ = std::make_unique<RedisClient>(config_.url, config_.connect_ms, config_.timeout_ms);
  return true;
}

void RemoteTier::fault(const std::string& what) {
  ++counters_.errors;
  skip_until_ = now_s() + config_.breaker_s;
  warn("remote cache " + config_.url.describe() + ": " + what +
       "; compiling locally (the remote is skipped for " +
       std::to_string(static_cast<int>(config_.breaker_s)) + " s)");
}

std::optional<RemoteEntry> RemoteTier::fetch(const std::string& key) {
  std::lock_guard lock(mutex_);
  return fetch_locked(key);
}

std::optional<RemoteEntry> RemoteTier::fetch_locked(const std::string& key) {
  if (signatures_.trusted.empty() && !config_.trust_unsigned) {
    if (!warned_untrusted_) {
      warned_untrusted_ = true;
      warn(
          "KILN_REMOTE_CACHE is set but no key is trusted, so remote entries are not read: set "
          "KILN_CACHE_TRUSTED_KEYS to the writers' public keys (kiln cache keygen NAME --out DIR "
          "makes a pair), or KILN_REMOTE_CACHE_TRUST=unsigned to accept unsigned entries");
    }
    return std::nullopt;
  }
  if (!available("get")) return std::nullopt;
  RedisReply r;
  try {
    r = client_->command({"GET", entry_key(key)});
  } catch (const RemoteError& e) {
    fault(e.what());
    return std::nullopt;
  }
  if (r.is_error()) {
    fault("GET refused: " + r.str);
    return std::nullopt;
  }
  if (r.kind == RedisReply::Kind::kNil) {
    ++counters_.misses;
    return std::nullopt;
  }
  if (r.kind != RedisReply::Kind::kString) {
    fault("GET returned something other than a string");
    return std::nullopt;
  }
  counters_.bytes_in += r.str.size();
  try {
    RemoteEntry e = unpack_entry(r.str, key);
    if (!config_.trust_unsigned) {
      if (std::string why = signature_problem(e.meta, signatures_.trusted, config_.ns);
          !why.empty())
        throw CacheEntryError("not signed by a trusted key: " + why);
    }
    ++counters_.hits;
    return e;
  } catch (const CacheEntryError& e) {
    ++counters_.rejects;
    warn("remote cache entry " + key + " rejected (" + e.what() + "); compiling locally");
    return std::nullopt;
  }
}

void RemoteTier::upload(const EntryMeta& local, const std::filesystem::path& dir) {
  if (!can_write()) return;  // readers never write
  std::lock_guard lock(mutex_);
  if (!available("set")) return;
  EntryMeta meta = local;
  meta.signatures = {sign_entry(meta, *signatures_.signer, config_.ns)};
  std::vector<std::string> bytes;
  for (const auto& f : meta.files) {
    std::string b = read_file(dir / f.name);
    if (b.size() != f.size || sha256_hex(b) != f.sha256) return;  // changed under us: skip
    bytes.push_back(std::move(b));
  }
  const std::string blob = pack_entry(meta, bytes);
  try {
    RedisReply r = client_->command({"SET", entry_key(meta.key), blob, "NX"});
    if (r.is_error()) return fault("SET refused: " + r.str);
    if (r.kind == RedisReply::Kind::kStatus) {
      ++counters_.uploads;
      counters_.bytes_out += blob.size();
      return;
    }
    // Someone uploaded this key first: the same bytes, or a build that is not reproducible.
    RedisReply existing = client_->command({"GET", entry_key(meta.key)});
    if (existing.kind != RedisReply::Kind::kString) return;
    try {
      RemoteEntry theirs = unpack_entry(existing.str, meta.key);
      for (size_t i = 0; i < meta.files.size() && i < theirs.meta.files.size(); ++i) {
        if (theirs.meta.files[i].sha256 != meta.files[i].sha256) {
          warn("remote cache: key " + meta.key + " is not reproducible: its " + meta.files[i].name +
               " differs from the one another machine uploaded (kept theirs)");
          return;
        }
      }
    } catch (const CacheEntryError&) {
      // A bad entry there is rejected by every reader; nothing to compare.
    }
  } catch (const RemoteError& e) {
    fault(e.what());
  }
}

namespace {

// Extends or drops a lease only if it still holds this process's token.
constexpr const char kRenewScript[] =
    "if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('pexpire', KEYS[1], ARGV[2]) "
    "else return 0 end";
constexpr const char kReleaseScript[] =
    "if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) else return 0 "
    "end";

}  // namespace

RemoteLease::RemoteLease(const RemoteConfig& config, std::string redis_key, std::string token)
    : config_(config), key_(std::move(redis_key)), token_(std::move(token)) {
  renewer_ = std::thread([this] { renew_loop(); });
}

void RemoteLease::renew_loop() {
  // Its own connection: a hiredis context serves one thread.
  RedisClient client(config_.url, config_.connect_ms, config_.timeout_ms);
  std::unique_lock lock(mutex_);
  while (!stop_cv_.wait_for(lock, std::chrono::milliseconds(config_.lease_ms / 3),
                            [this] { return stop_; })) {
    try {
      client.command({"EVAL", kRenewScript, "1", key_, token_, std::to_string(config_.lease_ms)});
    } catch (const RemoteError&) {
      // The lease lapses; another machine may then compile too. Only time is lost.
    }
  }
  try {
    client.command({"EVAL", kReleaseScript, "1", key_, token_});
  } catch (const RemoteError&) {
  }
}

RemoteLease::~RemoteLease() {
  {
    std::lock_guard lock(mutex_);
    stop_ = true;
  }
  stop_cv_.notify_all();
  renewer_.join();
}

std::pair<std::unique_ptr<RemoteLease>, std::optional<RemoteEntry>> RemoteTier::claim_or_wait(
    const std::string& key) {
  std::unique_lock lock(mutex_);
  const double deadline = now_s() + config_.wait_ms / 1000.0;
  bool waited = false;
  for (;;) {
    if (!available("lease")) return {};
    try {
      if (can_write()) {
        const std::string token = random_token();
        RedisReply r = client_->command(
            {"SET", lease_key(key), token, "NX", "PX", std::to_string(config_.lease_ms)});
        if (r.is_error()) {
          fault("SET (lease) refused: " + r.str);
          return {};
        }
        if (r.kind == RedisReply::Kind::kStatus) {
          // Taken: but another holder may have uploaded just before releasing it.
          if (waited) {
            if (auto e = fetch_locked(key)) return {nullptr, std::move(e)};
          }
          return {std::make_unique<RemoteLease>(config_, lease_key(key), token), std::nullopt};
        }
      } else {
        RedisReply r = client_->command({"GET", lease_key(key)});
        if (r.is_error()) {
          fault("GET (lease) refused: " + r.str);
          return {};
        }
        if (r.kind == RedisReply::Kind::kNil) {
          if (waited) {
            if (auto e = fetch_locked(key)) return {nullptr, std::move(e)};
          }
          return {};  // nobody compiles it: compile here, without a lease
        }
      }
    } catch (const RemoteError& e) {
      fault(e.what());
      return {};
    }
    // Another process compiles this key: poll for its entry.
    if (!waited && debug_level() >= 2)
      log_line("remote cache: waiting for another compile of " + key);
    waited = true;
    if (now_s() > deadline) {
      warn("remote cache: gave up waiting " + std::to_string(config_.wait_ms / 1000) +
           " s for another machine's compile of " + key + "; compiling here");
      return {};
    }
    lock.unlock();
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    lock.lock();
    if (auto e = fetch_locked(key)) return {nullptr, std::move(e)};
  }
}

std::optional<int64_t> RemoteTier::status(int64_t limit, std::string* why) {
  std::lock_guard lock(mutex_);
  try {
    if (!client_)
      client_ = std::make_unique<RedisClient>(config_.url, config_.connect_ms, config_.timeout_ms);
    RedisReply pong = client_->command({"PING"});
    if (pong.is_error()) {
      *why = pong.str;
      return std::nullopt;
    }
    int64_t n = 0;
    std::string cursor = "0";
    do {
      RedisReply r =
          client_->command({"SCAN", cursor, "MATCH", config_.ns + ":e:*", "COUNT", "1000"});
      if (r.kind != RedisReply::Kind::kArray || r.elements.size() != 2) break;
      cursor = r.elements[0].str;
      n += static_cast<int64_t>(r.elements[1].elements.size());
    } while (cursor != "0" && n < limit);
    return n;
  } catch (const RemoteError& e) {
    *why = e.what();
    return std::nullopt;
  }
}

RemoteCounters RemoteTier::counters() const {
  std::lock_guard lock(mutex_);
  return counters_;
}

}  // namespace kiln
