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

int remote_status(RemoteTier& remote, const std::vector<std::string>& args) {
  if (args.size() != 2 || args[1] != "status") {
    throw UsageError{"kiln cache remote: expected 'status'"};
  }
  std::string why;
  auto entries = remote.status(1000000, &why);
  const auto& c = remote.config();
  std::printf("remote     redis://%s\nnamespace  %s\nreachable  %s\n", c.url.describe().c_str(),
              c.ns.c_str(), entries ? "yes" : ("no (" + why + ")").c_str());
  if (entries) std::printf("entries    %lld\n", static_cast<long long>(*entries));
  auto policy = SignaturePolicy::from_env();
  std::string names;
  for (const auto& k : policy.trusted) names += (names.empty() ? "" : ", ") + k.name;
  const std::string trusted = !names.empty()     ? names
                              : c.trust_unsigned ? "unsigned entries (KILN_REMOTE_CACHE_TRUST)"
                                                 : "none: reads are refused";
  const std::string writes = remote.can_write() ? "yes, signed by " + policy.signer->name
                                                : "no (no KILN_CACHE_SIGNING_KEY)";
  std::printf("trusted    %s\nwrites     %s\n", trusted.c_str(), writes.c_str());
  return entries ? 0 : 1;
}

int push(RemoteTier& remote, CacheStore& store, std::vector<std::string> keys) {
  if (!remote.can_write()) {
    throw UserError("kiln cache push: no KILN_CACHE_SIGNING_KEY: only key holders may upload");
  }
  if (keys.empty()) {
    // Modules: the remote tier serves whole modules; kernel objects and prepared weights
    // stay local.
    for (const auto& r : store.list()) {
      if (r.family != kKernelFamily && r.family != kPreparedFamily) keys.push_back(r.key);
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
  std::printf("pushed %d entries to %s\n", done, remote.config().url.describe().c_str());
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
    WorkFolder staging = store.new_staging(k);
    for (const auto& [name, bytes] : fetched->files) {
      write_file_atomic(staging.path() / name, bytes, store.access().file_mode(), true);
    }
    store.publish(std::move(staging), std::move(fetched->meta));
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
