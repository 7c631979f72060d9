#pragma once
// Device memory as a runtime Storage, from a pool: a block freed by its last tensor goes to
// a free list of its size class and serves the next request of that class, so a function
// run again allocates nothing on the device. Reuse is safe in stream order: every launch
// and copy of a process goes to the device's one stream, so work that read a block is
// queued before work that writes it again.
#include <cstddef>
#include <memory>

#include "runtime/storage.h"

namespace kiln {

class CudaDevice;

std::shared_ptr<Storage> allocate_device_storage(CudaDevice& device, size_t bytes);

struct DevicePoolStats {
  size_t allocations = 0;   // served by the device's allocator
  size_t reuses = 0;        // served from a free list
  size_t cached_bytes = 0;  // held in free lists now
};
DevicePoolStats device_pool_stats();
// Gives every cached block back to the device (also done once when an allocation fails).
void device_pool_trim();

}  // namespace kiln
