#include "compiler/entries/remote_entries.h"

#include "util/fs.h"
#include "util/log.h"

namespace kiln {

void record_remote(CacheStore& store, const StoreCounters& a, const StoreCounters& b) {
  auto add = [&](const std::string& suffix, const RemoteCounters& x, const RemoteCounters& y) {
    const std::pair<const char*, double> deltas[] = {
        {"remote_hits", static_cast<double>(y.hits - x.hits)},
        {"remote_misses", static_cast<double>(y.misses - x.misses)},
        {"remote_rejects", static_cast<double>(y.rejects - x.rejects)},
        {"remote_errors", static_cast<double>(y.errors - x.errors)},
        {"remote_uploads", static_cast<double>(y.uploads - x.uploads)},
        {"remote_bytes",
         static_cast<double>((y.bytes_in + y.bytes_out) - (x.bytes_in + x.bytes_out))}};
    for (const auto& [name, by] : deltas) {
      if (by != 0) store.count(name + suffix, by);
    }
  };
  RemoteCounters total_a, total_b;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) {
    total_a += a[i].second;
    total_b += b[i].second;
    // Per store only where there are several: one store's counters are the totals.
    if (b.size() > 1) add("@" + b[i].first, a[i].second, b[i].second);
  }
  add("", total_a, total_b);
}

std::optional<CacheEntry> fetch_from_remote(CacheStore& store, const std::string& key) {
  RemoteTier* remote = RemoteTier::process_default();
  if (!remote || !store.publish_blocker().empty()) return std::nullopt;
  const StoreCounters before = remote->counters_by_store();
  std::optional<RemoteEntry> fetched = remote->fetch(key);
  record_remote(store, before, remote->counters_by_store());
  if (!fetched) return std::nullopt;
  try {
    CacheEntry entry = store.publish_fetched(std::move(fetched->meta), fetched->files);
    if (debug_level() >= 2) log_line("cache: remote hit for " + key);
    return entry;
  } catch (const Error& e) {
    warn("could not store the remote entry " + key + " locally: " + e.what());
    return std::nullopt;
  }
}

void upload_to_remote(CacheStore& store, const CacheEntry& entry) {
  RemoteTier* remote = RemoteTier::process_default();
  if (!remote || !remote->can_write()) return;
  const StoreCounters before = remote->counters_by_store();
  const bool stored = remote->upload(entry.meta, entry.dir);
  record_remote(store, before, remote->counters_by_store());
  if (debug_level() >= 2)
    log_line("remote cache: " + entry.meta.key + (stored ? " is on the remote" : " not uploaded"));
}

}  // namespace kiln
