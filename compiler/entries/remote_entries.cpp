#include "compiler/entries/remote_entries.h"

#include "util/fs.h"
#include "util/log.h"

namespace kiln {

void record_remote(CacheStore& store, const RemoteCounters& a, const RemoteCounters& b) {
  const std::pair<const char*, double> deltas[] = {
      {"remote_hits", static_cast<double>(b.hits - a.hits)},
      {"remote_misses", static_cast<double>(b.misses - a.misses)},
      {"remote_rejects", static_cast<double>(b.rejects - a.rejects)},
      {"remote_errors", static_cast<double>(b.errors - a.errors)},
      {"remote_uploads", static_cast<double>(b.uploads - a.uploads)},
      {"remote_bytes",
       static_cast<double>((b.bytes_in + b.bytes_out) - (a.bytes_in + a.bytes_out))}};
  for (const auto& [name, by] : deltas) {
    if (by != 0) store.count(name, by);
  }
}

std::optional<CacheEntry> fetch_from_remote(CacheStore& store, const std::string& key) {
  RemoteTier* remote = RemoteTier::process_default();
  if (!remote || !store.publish_blocker().empty()) return std::nullopt;
  const RemoteCounters before = remote->counters();
  std::optional<RemoteEntry> fetched = remote->fetch(key);
  record_remote(store, before, remote->counters());
  if (!fetched) return std::nullopt;
  try {
    WorkFolder staging = store.new_staging(key);
    for (const auto& [name, bytes] : fetched->files)
      write_file_atomic(staging.path() / name, bytes, store.access().file_mode(), true);
    store.publish(std::move(staging), std::move(fetched->meta));
    if (debug_level() >= 2) log_line("cache: remote hit for " + key);
    return store.lookup(key, true).entry;
  } catch (const Error& e) {
    warn("could not store the remote entry " + key + " locally: " + e.what());
    return std::nullopt;
  }
}

void upload_to_remote(CacheStore& store, const CacheEntry& entry) {
  RemoteTier* remote = RemoteTier::process_default();
  if (!remote || !remote->can_write()) return;
  const RemoteCounters before = remote->counters();
  const bool stored = remote->upload(entry.meta, entry.dir);
  record_remote(store, before, remote->counters());
  if (debug_level() >= 2)
    log_line("remote cache: " + entry.meta.key + (stored ? " is on the remote" : " not uploaded"));
}

}  // namespace kiln
