#pragma once
// Cache stores written behind the caller: an imported model or a prepared weight set is
// checked where it is made, then written, hashed and published on a thread of its own while
// the caller goes on compiling and running (for a ResNet, ~200 MB written and hashed; up to a
// second of a cold start). A lookup of a key whose store is under way waits for it, so this
// process never misses what it is writing; the process finishes every store before it exits,
// so one that exits right after its compile leaves no half-published entry (a killed one
// leaves a staging folder that gc sweeps, as any killed compile does).
#include <functional>
#include <string>

namespace kiln {

// Runs `store` (which publishes cache key `key`) on a thread of its own; it must catch its
// own errors (a failed store costs a warning, never the caller's work).
void store_in_background(const std::string& key, std::function<void()> store);
// Returns once the store of `key`, if one is under way, has finished.
void wait_for_background_store(const std::string& key);
// Returns once every store started so far has finished.
void wait_for_background_stores();

}  // namespace kiln
