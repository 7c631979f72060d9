#include "cli/cache_remote.h"

#include <cstdio>

#include "cache/cache_store.h"
#include "cache/entry_signature.h"
#include "cache/remote_tier.h"
#include "cli/command.h"
#include "util/error.h"
#include "util/fs.h"

namespace kiln::cli {

namespace {

std::string format_ms(double ms) {
  char buf[32];
  std::snprintf(buf, sizeof buf, ms < 10 ? "%.2f ms" : "%.0f ms", ms);
  return buf;
}

int remote_status(RemoteTier& remote, const std::vector<std::string>& args) {
  if (args.size() != 2 || args[1] != "status") {
    throw UsageError{"kiln cache remote: expected 'status'"};
  }
  const auto& c = remote.config();
  bool ok = true;
  int64_t entries = 0;
  for (const RemoteStatus& st : remote.status(1000000)) {
    ok = ok && st.ok();
    std::printf("remote     %s\n", st.store.c_str());
    for (const ShardStatus& s : st.shards) {
      std::string line = s.reachable ? "up, " + format_ms(s.latency_ms) : "down";
      if (s.entries >= 0) {
        line += ", " + std::to_string(s.entries) + " entries";
        entries += s.entries;
      } else if (s.reachable) {
        line += ", entries not listed";
      }
      if (s.bytes >= 0) line += ", " + format_size(static_cast<uint64_t>(s.bytes));
      if (!s.why.empty()) line += " (" + s.why + ")";
      std::printf("  %-24s %s\n", s.name.c_str(), line.c_str());
    }
  }
  std::printf("namespace  %s\nreachable  %s\n", c.ns.c_str(), ok ? "yes" : "no");
  if (ok) std::printf("entries    %lld\n", static_cast<long long>(entries));
  std::printf("compress   %s\n", c.compress_level
                                     ? ("zstd, level " + std::to_string(c.compress_level)).c_str()
                                     : "off");
  auto policy = SignaturePolicy::from_env();
  std::string names;
  for (const auto& k : policy.trusted) names += (names.empty() ? "" : ", ") + k.name;
  const std::string trusted = !names.empty()     ? names
                              : c.trust_unsigned ? "unsigned entries (KILN_REMOTE_CACHE_TRUST)"
                                                 : "none: reads are refused";
  const std::string writes = remote.can_write() ? "yes, signed by " + policy.signer->name
                                                : "no (no KILN_CACHE_SIGNING_KEY)";
  std::printf("trusted    %s\nwrites     %s\n", trusted.c_str(), writes.c_str());
  return ok ? 0 : 1;
}

int push(RemoteTier& remote, CacheStore& store, std::vector<std::string> keys) {
  if (!remote.can_write()) {
    throw UserError("kiln cache push: no KILN_CACHE_SIGNING_KEY: only key holders may upload");
  }
  if (keys.empty()) {
    // Modules and kernel objects (a module another machine lacks links from them); prepared
    // weights are uploaded by the compile that makes them, not in bulk.
    for (const auto& r : store.list()) {
      if (r.family != kPreparedFamily) keys.push_back(r.key);
    }
  }
  int done = 0, missing = 0;
  for (const auto& k : keys) {
    LookupResult r = store.lookup(k, false);  // verified before it is uploaded
    if (!r.entry) {
      std::fprintf(stderr, "kiln: %s: not in the local cache%s\n", k.c_str(),
                   r.problem.empty() ? "" : (" (" + r.problem + ")").c_str());
      ++missing;
      continue;
    }
    auto before = remote.counters();
    remote.upload(r.entry->meta, r.entry->dir);
    if (remote.counters().errors > before.errors) return 1;
    ++done;
  }
  std::string to;
  for (const auto& name : remote.stores()) to += (to.empty() ? "" : ", ") + name;
  std::printf("pushed %d entries to %s\n", done, to.c_str());
  return missing ? 1 : 0;
}

int pull(RemoteTier& remote, CacheStore& store, const std::vector<std::string>& keys) {
  if (keys.empty()) throw UsageError{"kiln cache pull: expected one or more KEYs"};
  int done = 0, missing = 0;
  for (const auto& k : keys) {
    auto fetched = remote.fetch(k);
    if (!fetched) {
      std::fprintf(stderr, "kiln: %s: not pulled (missing, rejected or unreachable)\n", k.c_str());
      ++missing;
      continue;
    }
    store.publish_fetched(std::move(fetched->meta), fetched->files);
    ++done;
  }
  std::printf("pulled %d entries into %s\n", done, store.root().c_str());
  return missing ? 1 : 0;
}

}  // namespace

int run_cache_remote(const std::vector<std::string>& args) {
  const std::string& sub = args[0];
  RemoteTier* remote = RemoteTier::process_default();
  if (!remote) throw UserError("kiln cache " + sub + ": KILN_REMOTE_CACHE is not set");
  if (sub == "remote") return remote_status(*remote, args);
  auto store = CacheStore::open(cache_root());
  store->set_patient(true);
  const std::vector<std::string> keys(args.begin() + 1, args.end());
  for (const auto& k : keys) {
    if (!is_cache_key(k)) throw UserError("'" + k + "' is not a cache key (64 hex digits)");
  }
  return sub == "push" ? push(*remote, *store, keys) : pull(*remote, *store, keys);
}

}  // namespace kiln::cli
