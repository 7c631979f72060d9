#pragma once
// Memory of the device and page-locked host staging memory, each from a pool: a block
// freed by its last user goes to a free list of its size class and serves the next request
// of that class, so a function run again allocates nothing.
//
// Device blocks are reused in stream order: the executor frees a run's device buffers only
// after every step that used them has completed (the events of their streams fired), so a
// block handed out again is never still read or written by queued work. Staging blocks are
// held by a step's completion in the same way.
#include <cstddef>
#include <memory>

#include "runtime/storage.h"

namespace kiln {

class Device;

std::shared_ptr<Storage> allocate_device_storage(Device& device, size_t bytes);
// Host memory an async copy may use as its source or destination.
std::shared_ptr<Storage> allocate_pinned_storage(Device& device, size_t bytes);

struct DevicePoolStats {
  size_t allocations = 0;   // served by the device's allocator
  size_t reuses = 0;        // served from a free list
  size_t cached_bytes = 0;  // held in free lists now
};
DevicePoolStats device_pool_stats();
DevicePoolStats pinned_pool_stats();
// Gives every cached block back (also done once when an allocation fails).
void device_pool_trim();

}  // namespace kiln
