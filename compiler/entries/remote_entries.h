#pragma once
// Entries made beside a module — prepared weight sets and imported models — through this
// process's remote tier (cache/remote_tier.h), so a second machine maps what the first one
// prepared and imported instead of doing it again: fetched after a local miss (verified and
// signature-checked by the tier, then published locally like any entry), uploaded by writers
// after a local publish. Without a tier, or for a read-only local cache, nothing happens.
#include <optional>
#include <string>

#include "cache/cache_store.h"
#include "cache/remote_tier.h"

namespace kiln {

// Adds what the tier did between two readings of its counters to the local statistics: the
// totals, and each store's own where there are several.
void record_remote(CacheStore& store, const StoreCounters& before, const StoreCounters& after);
// After a local miss of `key`: the remote entry, published into `store` and looked up, or
// nullopt (no tier, a miss, a rejected entry, a fault: each already reported by the tier).
std::optional<CacheEntry> fetch_from_remote(CacheStore& store, const std::string& key);
// After `entry` was published into `store`: uploads it when this process may write the tier.
void upload_to_remote(CacheStore& store, const CacheEntry& entry);

}  // namespace kiln
