#include "cache/remote_tier.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <mutex>
#include <random>

#include "cache/blob_codec.h"
#include "util/escape.h"
#include "util/fs.h"
#include "util/log.h"
#include "util/quantity.h"
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

std::string format_seconds_text(int ms) {
  return ms % 1000 == 0 ? std::to_string(ms / 1000) + " s" : std::to_string(ms) + " ms";
}

int64_t unix_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// A lease's value: "TOKEN UNTIL", UNTIL its holder's wall-clock deadline in unix ms, rewritten
// by every renewal. Readers, which may send nothing but GET, tell a live lease from one
// planted without an expiry (or with an absurd one) by it.
std::string lease_value(const std::string& token, int lease_ms) {
  return token + " " + std::to_string(unix_ms() + lease_ms);
}

// True when a lease's value names a deadline this machine believes: not past, and not further
// ahead than two of its own lease periods plus 5 s of clock skew.
bool lease_is_live(const std::string& value, int lease_ms) {
  const auto space = value.rfind(' ');
  if (space == std::string::npos || space + 1 >= value.size() || value.size() - space > 20)
    return false;
  int64_t until = 0;
  for (size_t i = space + 1; i < value.size(); ++i) {
    if (value[i] < '0' || value[i] > '9') return false;
    until = until * 10 + (value[i] - '0');
  }
  const int64_t now = unix_ms();
  return until >= now && until <= now + 2 * int64_t{lease_ms} + 5000;
}

// Extends a lease (a new deadline in its value) or drops it, only while it holds this
// process's token; deletes a lease only if it still holds the value that was judged dead.
constexpr const char kRenewScript[] =
    "local v = redis.call('get', KEYS[1]) "
    "if v and string.sub(v, 1, #ARGV[1] + 1) == ARGV[1] .. ' ' then "
    "return redis.call('set', KEYS[1], ARGV[1] .. ' ' .. ARGV[3], 'XX', 'PX', ARGV[2]) "
    "else return 0 end";
constexpr const char kReleaseScript[] =
    "local v = redis.call('get', KEYS[1]) "
    "if v and string.sub(v, 1, #ARGV[1] + 1) == ARGV[1] .. ' ' then "
    "return redis.call('del', KEYS[1]) else return 0 end";
constexpr const char kDropDeadScript[] =
    "if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) "
    "else return 0 end";

}  // namespace

std::optional<RemoteConfig> RemoteConfig::from_env() {
  const char* url = std::getenv("KILN_REMOTE_CACHE");
  if (!url || !*url) return std::nullopt;
  RemoteConfig c;
  // A space-separated list, read in order: a near Redis, a large HTTP store behind it.
  for (size_t at = 0; at < std::strlen(url);) {
    const std::string rest = std::string(url).substr(at);
    const size_t start = rest.find_first_not_of(" \t");
    if (start == std::string::npos) break;
    const size_t end = rest.find_first_of(" \t", start);
    c.urls.push_back(rest.substr(start, end == std::string::npos ? end : end - start));
    at += end == std::string::npos ? rest.size() : end;
  }
  if (c.urls.empty()) return std::nullopt;
  if (c.urls.size() > 8)
    throw UserError("KILN_REMOTE_CACHE: " + std::to_string(c.urls.size()) +
                    " remotes; at most 8 are read in turn");
  auto env = [](const char* var) -> std::optional<std::string> {
    const char* v = std::getenv(var);
    if (!v || !*v) return std::nullopt;
    return std::string(v);
  };
  // The namespace becomes part of every key and of SCAN's pattern: a name, no glob.
  if (auto ns = env("KILN_REMOTE_CACHE_NAMESPACE"))
    c.ns = check_name(*ns, "KILN_REMOTE_CACHE_NAMESPACE");
  auto ms = [](double s) { return static_cast<int>(s * 1000 + 0.5); };
  if (auto t = env("KILN_REMOTE_TIMEOUT")) {
    c.timeout_ms = ms(parse_duration(*t, "KILN_REMOTE_TIMEOUT", 0.01, 600));
    c.connect_ms = std::min(c.connect_ms, c.timeout_ms);
  }
  // A lease is renewed every third of its life: under a second would flood the server.
  if (auto t = env("KILN_REMOTE_LEASE"))
    c.lease_ms = ms(parse_duration(*t, "KILN_REMOTE_LEASE", 1, 3600));
  if (auto t = env("KILN_REMOTE_WAIT"))
    c.wait_ms = ms(parse_duration(*t, "KILN_REMOTE_WAIT", 0.1, 86400));
  if (auto t = env("KILN_REMOTE_MAX_ENTRY"))
    c.max_entry_bytes = parse_size(*t, "KILN_REMOTE_MAX_ENTRY", 4096);
  if (auto trust = env("KILN_REMOTE_CACHE_TRUST")) {
    if (*trust != "unsigned" && *trust != "signed")
      throw UserError("KILN_REMOTE_CACHE_TRUST: " + in_quotes(*trust) +
                      " is neither 'signed' (the default) nor 'unsigned'");
    c.trust_unsigned = *trust == "unsigned";
  }
  if (auto z = env("KILN_REMOTE_COMPRESS")) {
    if (*z == "off" || *z == "none") {
      c.compress_level = 0;
    } else if (*z == "zstd") {
      c.compress_level = 3;
    } else if (const std::string level = z->substr(std::min<size_t>(5, z->size()));
               z->rfind("zstd:", 0) == 0 && !level.empty() && level.size() <= 2 &&
               level.find_first_not_of("0123456789") == std::string::npos &&
               std::stoi(level) >= 1 && std::stoi(level) <= 19) {
      c.compress_level = std::stoi(level);
    } else {
      throw UserError("KILN_REMOTE_COMPRESS: " + in_quotes(*z) +
                      " is none of 'zstd' (the default), 'zstd:LEVEL' (1 to 19) and 'off'");
    }
  }
  if (auto ca = env("KILN_REMOTE_CA")) {
    std::error_code ec;
    if (!std::filesystem::is_regular_file(*ca, ec))
      throw UserError("KILN_REMOTE_CA: " + in_quotes(*ca) + " is not a file (a PEM CA bundle)");
    c.ca_file = *ca;
  }
  // Each URL is parsed now, so a bad one is refused before any compile, naming the variable.
  for (const auto& u : c.urls) make_remote_store(u, c.store_options(), "KILN_REMOTE_CACHE");
  return c;
}

std::string pack_entry(const EntryMeta& meta, const std::vector<std::string>& file_bytes) {
  const std::string json = meta.to_json();
  std::string blob = kMagic + std::to_string(json.size()) + "\n" + json;
  for (const auto& f : file_bytes) blob += f;
  return blob;
}

namespace {

// The blob's meta.json, checked for size, fields, key and layout; `files_at` is where the
// files begin.
EntryMeta unpack_meta(const std::string& blob, const std::string& key, size_t& files_at) {
  const size_t magic = sizeof kMagic - 1;
  if (blob.compare(0, magic, kMagic) != 0) throw CacheEntryError("not a kiln entry (bad header)");
  const size_t nl = blob.find('\n', magic);
  if (nl == std::string::npos || nl - magic > 12) throw CacheEntryError("bad meta.json length");
  char* end = nullptr;
  const std::string len_text = blob.substr(magic, nl - magic);
  const unsigned long long json_len = std::strtoull(len_text.c_str(), &end, 10);
  if (len_text.empty() || *end != '\0' || json_len > blob.size() - nl - 1)
    throw CacheEntryError("meta.json length " + in_quotes(len_text) + " runs past the entry");
  if (json_len > EntryMeta::kMaxMetaBytes) {
    throw CacheEntryError("its meta.json has " + std::to_string(json_len) +
                          " bytes, more than a meta.json may hold (" +
                          std::to_string(EntryMeta::kMaxMetaBytes) + ")");
  }
  EntryMeta meta = EntryMeta::parse(blob.substr(nl + 1, json_len), "remote meta.json");
  if (meta.key != key) throw CacheEntryError("it describes key " + in_quotes(meta.key));
  if (std::string why = entry_layout_problem(meta); !why.empty()) throw CacheEntryError(why);
  files_at = nl + 1 + json_len;
  return meta;
}

// The files behind the meta, each checked against its size and SHA-256.
std::vector<std::pair<std::string, std::string>> unpack_files(const std::string& blob,
                                                              const EntryMeta& meta, size_t at) {
  std::vector<std::pair<std::string, std::string>> files;
  for (const auto& f : meta.files) {
    if (f.size > blob.size() - at)
      throw CacheEntryError(f.name + " is truncated (" + std::to_string(blob.size() - at) +
                            " bytes left, meta.json says " + std::to_string(f.size) + ")");
    std::string bytes = blob.substr(at, f.size);
    at += f.size;
    if (sha256_hex(bytes) != f.sha256)
      throw CacheEntryError(f.name + " does not match its SHA-256 in meta.json");
    files.emplace_back(f.name, std::move(bytes));
  }
  if (at != blob.size())
    throw CacheEntryError(std::to_string(blob.size() - at) + " bytes after the last file");
  return files;
}

}  // namespace

RemoteEntry unpack_entry(const std::string& blob, const std::string& key) {
  RemoteEntry e;
  size_t at = 0;
  e.meta = unpack_meta(blob, key, at);
  e.files = unpack_files(blob, e.meta, at);
  e.bytes = blob.size();
  return e;
}

RemoteCounters& RemoteCounters::operator+=(const RemoteCounters& o) {
  hits += o.hits;
  misses += o.misses;
  rejects += o.rejects;
  errors += o.errors;
  uploads += o.uploads;
  bytes_in += o.bytes_in;
  bytes_out += o.bytes_out;
  return *this;
}

bool RemoteStatus::ok() const {
  for (const auto& s : shards) {
    if (!s.reachable || !s.why.empty()) return false;
  }
  return !shards.empty();
}

RemoteTier::RemoteTier(RemoteConfig config, SignaturePolicy signatures)
    : config_(std::move(config)), signatures_(std::move(signatures)) {
  for (const auto& u : config_.urls) {
    Remote r;
    r.store = make_remote_store(u, config_.store_options(), "KILN_REMOTE_CACHE");
    remotes_.push_back(std::move(r));
  }
}

RemoteTier* RemoteTier::process_default() {
  static std::once_flag once;
  static std::unique_ptr<RemoteTier> tier;
  static std::exception_ptr refused;
  // A bad setting is kept and rethrown on every call rather than thrown through call_once:
  // ThreadSanitizer's pthread_once never releases a flag whose function threw, so the next
  // caller (the exit's wait for background stores) would hang.
  std::call_once(once, [] {
    try {
      if (auto c = RemoteConfig::from_env())
        tier = std::make_unique<RemoteTier>(*c, SignaturePolicy::from_env());
    } catch (...) {
      refused = std::current_exception();
    }
  });
  if (refused) std::rethrow_exception(refused);
  return tier.get();
}

std::vector<std::string> RemoteTier::stores() const {
  std::vector<std::string> out;
  for (const auto& r : remotes_) out.push_back(r.store->describe());
  return out;
}

bool RemoteTier::available(Remote& r, const char* what) {
  if (now_s() < r.skip_until) {
    if (debug_level() >= 2)
      log_line("remote cache " + r.store->describe() + ": skipped (" + what + "): circuit open");
    return false;
  }
  return true;
}

void RemoteTier::fault(Remote& r, const std::string& what) {
  ++r.counters.errors;
  r.skip_until = now_s() + config_.breaker_s;
  warn("remote cache " + r.store->describe() + ": " + terminal_text(what) +
       (remotes_.size() > 1 ? "; going on without it" : "; compiling locally") +
       " (it is skipped for " + std::to_string(static_cast<int>(config_.breaker_s)) + " s)");
}

void RemoteTier::shard_fault(Remote& r, const std::string& what) {
  // One shard down: its keys miss, the store stays in use. Said once per breaker period.
  ++r.counters.errors;
  if (now_s() < r.shard_warned_until) {
    if (debug_level() >= 2) log_line("remote cache: " + terminal_text(what));
    return;
  }
  r.shard_warned_until = now_s() + config_.breaker_s;
  warn("remote cache " + r.store->describe() + ": " + terminal_text(what) +
       "; the keys it holds compile locally (it is " + "skipped for " +
       std::to_string(static_cast<int>(config_.breaker_s)) + " s)");
}

std::optional<RemoteEntry> RemoteTier::fetch(const std::string& key) {
  std::lock_guard lock(mutex_);
  return fetch_locked(key);
}

std::optional<RemoteEntry> RemoteTier::fetch_from(size_t i, const std::string& key,
                                                  std::string* blob_out) {
  Remote& rem = remotes_[i];
  if (auto it = rejected_.find({i, key}); it != rejected_.end() && now_s() < it->second) {
    if (debug_level() >= 2) log_line("remote cache: " + key + " was rejected; not fetched again");
    return std::nullopt;
  }
  if (!available(rem, "get")) return std::nullopt;
  // zstd's bound on an incompressible entry: a stored blob is never much larger than that.
  const uint64_t wire_max = config_.max_entry_bytes + config_.max_entry_bytes / 128 + 4096;
  std::optional<std::string> blob;
  try {
    blob = rem.store->get(key, wire_max);
  } catch (const ShardError& e) {
    shard_fault(rem, e.what());
    return std::nullopt;
  } catch (const RemoteError& e) {
    fault(rem, e.what());
    return std::nullopt;
  }
  if (!blob) {
    ++rem.counters.misses;
    return std::nullopt;
  }
  rem.counters.bytes_in += blob->size();
  try {
    const std::string packed = decode_blob(*blob, config_.max_entry_bytes);
    // The signature covers the whole meta.json, so it is checked before any file is hashed:
    // a forged entry costs its meta's parse and one verification per trusted key name.
    RemoteEntry e;
    size_t at = 0;
    e.meta = unpack_meta(packed, key, at);
    if (!config_.trust_unsigned) {
      if (std::string why = signature_problem(e.meta, signatures_.trusted, config_.ns);
          !why.empty())
        throw CacheEntryError("not signed by a trusted key: " + why);
    }
    e.files = unpack_files(packed, e.meta, at);
    e.bytes = blob->size();
    e.from = rem.store->describe();
    ++rem.counters.hits;
    if (blob_out) *blob_out = std::move(*blob);
    return e;
  } catch (const CacheEntryError& e) {
    ++rem.counters.rejects;
    rejected_[{i, key}] = now_s() + config_.breaker_s;
    warn("remote cache entry " + key + " from " + rem.store->describe() + " rejected (" +
         terminal_text(e.what()) + ")" +
         (i + 1 < remotes_.size() ? "; trying the next remote" : "; compiling locally"));
    return std::nullopt;
  }
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
  for (size_t i = 0; i < remotes_.size(); ++i) {
    std::string blob;
    auto e = fetch_from(i, key, can_write() && i > 0 ? &blob : nullptr);
    if (!e) continue;
    // Found further down the list: the stores before it get it too (the writer's signed
    // bytes, unchanged), so the next reader finds it in the nearest one.
    for (size_t j = 0; j < i && !blob.empty(); ++j) {
      Remote& near = remotes_[j];
      if (!available(near, "copy")) continue;
      try {
        if (near.store->put_new(key, blob)) {
          ++near.counters.uploads;
          near.counters.bytes_out += blob.size();
        }
      } catch (const ShardError& err) {
        shard_fault(near, err.what());
      } catch (const RemoteError& err) {
        fault(near, err.what());
      }
    }
    return e;
  }
  return std::nullopt;
}

bool RemoteTier::upload(const EntryMeta& local, const std::filesystem::path& dir) {
  if (!can_write()) return false;  // readers never write
  std::lock_guard lock(mutex_);
  EntryMeta meta = local;
  meta.signatures = {sign_entry(meta, *signatures_.signer, config_.ns)};
  std::vector<std::string> bytes;
  for (const auto& f : meta.files) {
    std::string b = read_file(dir / f.name);
    if (b.size() != f.size || sha256_hex(b) != f.sha256) return false;  // changed under us
    bytes.push_back(std::move(b));
  }
  const std::string packed = pack_entry(meta, bytes);
  if (packed.size() > config_.max_entry_bytes) {
    warn("remote cache: not uploading " + meta.key + ": " + std::to_string(packed.size()) +
         " bytes, more than KILN_REMOTE_MAX_ENTRY (" + std::to_string(config_.max_entry_bytes) +
         ")");
    return false;
  }
  const std::string blob = encode_blob(packed, config_.compress_level);
  bool held = false, compared = false;
  for (auto& rem : remotes_) {
    if (!available(rem, "set")) continue;
    try {
      if (rem.store->put_new(meta.key, blob)) {
        ++rem.counters.uploads;
        rem.counters.bytes_out += blob.size();
        held = true;
        continue;
      }
      held = true;
      if (compared) continue;
      compared = true;
      // Someone uploaded this key first: the same bytes, or a build that is not reproducible.
      auto existing =
          rem.store->get(meta.key, config_.max_entry_bytes + config_.max_entry_bytes / 128 + 4096);
      if (!existing) continue;
      try {
        RemoteEntry theirs =
            unpack_entry(decode_blob(*existing, config_.max_entry_bytes), meta.key);
        for (size_t i = 0; i < meta.files.size() && i < theirs.meta.files.size(); ++i) {
          if (theirs.meta.files[i].sha256 != meta.files[i].sha256) {
            warn("remote cache: key " + meta.key + " is not reproducible: its " +
                 meta.files[i].name +
                 " differs from the one another machine uploaded (kept theirs)");
            break;
          }
        }
      } catch (const CacheEntryError&) {
        // a bad entry there is rejected by every reader
      }
    } catch (const ShardError& e) {
      shard_fault(rem, e.what());
    } catch (const RemoteError& e) {
      fault(rem, e.what());
    }
  }
  return held;
}

RemoteLease::RemoteLease(const RemoteConfig& config,
                         std::function<std::unique_ptr<RedisLink>()> link, std::string redis_key,
                         std::string failed_key, std::string token)
    : config_(config),
      link_(std::move(link)),
      key_(std::move(redis_key)),
      failed_key_(std::move(failed_key)),
      token_(std::move(token)) {
  renewer_ = std::thread([this] { renew_loop(); });
}

void RemoteLease::renew_loop() {
  // Its own connection: one socket serves one thread.
  std::unique_ptr<RedisLink> client = link_();
  std::unique_lock lock(mutex_);
  while (!stop_cv_.wait_for(lock, std::chrono::milliseconds(config_.lease_ms / 3),
                            [this] { return stop_; })) {
    try {
      client->command({"EVAL", kRenewScript, "1", key_, token_, std::to_string(config_.lease_ms),
                       std::to_string(unix_ms() + config_.lease_ms)});
    } catch (const RemoteError&) {
      // The lease lapses; another machine may then compile too. Only time is lost.
    }
  }
  try {
    if (!uploaded_) {
      // Waiters compile now, side by side, instead of claiming the key one after another.
      client->command(
          {"SET", failed_key_, "1", "PX", std::to_string(std::min(config_.lease_ms, 10000))});
    }
    client->command({"EVAL", kReleaseScript, "1", key_, token_});
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

RemoteTier::Remote* RemoteTier::lease_remote() {
  for (auto& r : remotes_) {
    if (r.store->link_factory()) return &r;
  }
  return nullptr;
}

std::pair<std::unique_ptr<RemoteLease>, std::optional<RemoteEntry>> RemoteTier::claim_or_wait(
    const std::string& key) {
  std::unique_lock lock(mutex_);
  if (abandoned_.count(key)) return {};  // this process waited once already, in vain
  Remote* rem = lease_remote();
  if (!rem) return {};  // no store with atomic claims: single flight is off
  const std::string lease_key = redis_lease_key(config_.ns, key);
  const std::string failed_key = redis_failed_key(config_.ns, key);
  const double deadline = now_s() + config_.wait_ms / 1000.0;
  bool waited = false;
  int retries = 0;  // immediate re-claims after a dead or vanished lease, bounded
  for (;;) {
    if (!available(*rem, "lease")) return {};
    RedisLink& link = *rem->store->lease_link();
    try {
      // A holder whose compile failed just now: compile here at once, no lease, no turns.
      RedisReply failed = link.command({"GET", failed_key});
      if (failed.kind == RedisReply::Kind::kString) {
        if (debug_level() >= 2) log_line("remote cache: another compile of " + key + " failed");
        if (waited) {
          if (auto e = fetch_locked(key)) return {nullptr, std::move(e)};
        }
        return {};
      }
      if (can_write()) {
        const std::string token = random_token();
        RedisReply r = link.command({"SET", lease_key, lease_value(token, config_.lease_ms), "NX",
                                     "PX", std::to_string(config_.lease_ms)});
        if (r.is_error()) {
          fault(*rem, "SET (lease) refused: " + r.str.substr(0, 200));
          return {};
        }
        if (r.kind == RedisReply::Kind::kStatus) {
          // Taken: but another holder may have uploaded just before releasing it.
          if (waited) {
            if (auto e = fetch_locked(key)) return {nullptr, std::move(e)};
          }
          return {std::make_unique<RemoteLease>(config_, rem->store->link_factory(), lease_key,
                                                failed_key, token),
                  std::nullopt};
        }
        // Held. A lease without a believable deadline (planted without an expiry, or
        // abandoned by a writer with a broken clock) is dropped, then claimed again.
        RedisReply held = link.command({"GET", lease_key});
        if (held.kind == RedisReply::Kind::kString && !lease_is_live(held.str, config_.lease_ms)) {
          warn("remote cache: dropping a lease on " + key + " that has no believable expiry");
          link.command({"EVAL", kDropDeadScript, "1", lease_key, held.str});
          if (++retries <= 3) continue;
        } else if (held.kind == RedisReply::Kind::kNil && ++retries <= 3) {
          continue;  // released just now: claim it
        }
      } else {
        RedisReply r = link.command({"GET", lease_key});
        if (r.is_error()) {
          fault(*rem, "GET (lease) refused: " + r.str.substr(0, 200));
          return {};
        }
        if (r.kind == RedisReply::Kind::kNil ||
            (r.kind == RedisReply::Kind::kString && !lease_is_live(r.str, config_.lease_ms))) {
          if (waited) {
            if (auto e = fetch_locked(key)) return {nullptr, std::move(e)};
          }
          return {};  // nobody (believably) compiles it: compile here, without a lease
        }
      }
    } catch (const ShardError& e) {
      shard_fault(*rem, e.what());
      return {};
    } catch (const RemoteError& e) {
      fault(*rem, e.what());
      return {};
    }
    // Another process compiles this key: poll for its entry.
    if (!waited && debug_level() >= 2)
      log_line("remote cache: waiting for another compile of " + key);
    waited = true;
    if (now_s() > deadline) {
      abandoned_.insert(key);
      warn("remote cache: gave up waiting " + format_seconds_text(config_.wait_ms) +
           " for another machine's compile of " + key + "; compiling here");
      return {};
    }
    lock.unlock();
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    lock.lock();
    if (auto e = fetch_locked(key)) return {nullptr, std::move(e)};
  }
}

std::vector<RemoteStatus> RemoteTier::status(int64_t limit) {
  std::lock_guard lock(mutex_);
  std::vector<RemoteStatus> out;
  for (auto& rem : remotes_) {
    RemoteStatus s;
    s.store = rem.store->describe();
    s.shards = rem.store->status(limit, 5.0 * config_.timeout_ms / 1000.0);
    out.push_back(std::move(s));
  }
  return out;
}

RemoteCounters RemoteTier::counters() const {
  std::lock_guard lock(mutex_);
  RemoteCounters sum;
  for (const auto& r : remotes_) sum += r.counters;
  return sum;
}

StoreCounters RemoteTier::counters_by_store() const {
  std::lock_guard lock(mutex_);
  StoreCounters out;
  for (const auto& r : remotes_) out.emplace_back(r.store->describe(), r.counters);
  return out;
}

}  // namespace kiln
