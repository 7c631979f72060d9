#include "runtime/device/device_memory.h"

#include <map>
#include <mutex>
#include <vector>

#include "runtime/device/device.h"
#include "util/error.h"

namespace kiln {
namespace {

// Blocks above this many cached bytes go straight back to the device.
constexpr size_t kMaxCachedBytes = size_t{1} << 30;

// Size classes: powers of two from 512 bytes, so a block serves requests down to half its
// size and a run with the same shapes finds its blocks again.
size_t size_class(size_t bytes) {
  size_t c = 512;
  while (c < bytes) c <<= 1;
  return c;
}

// One pool per kind of memory; the device's allocate/release (or their pinned twins).
struct Pool {
  bool pinned = false;
  std::mutex mutex;
  Device* device = nullptr;
  std::map<size_t, std::vector<void*>> free;  // size class -> blocks
  DevicePoolStats stats;

  void release(void* p) { pinned ? device->release_pinned(p) : device->release(p); }
  // From the device handed in, not `device`: that member is written under the lock.
  void* allocate(Device& dev, size_t bytes) {
    return pinned ? dev.allocate_pinned(bytes) : dev.allocate(bytes);
  }
  void trim_locked() {
    for (auto& [size, blocks] : free) {
      for (void* p : blocks) release(p);
    }
    free.clear();
    stats.cached_bytes = 0;
  }
  void give_back(size_t cls, void* ptr) {
    std::lock_guard lock(mutex);
    if (stats.cached_bytes + cls > kMaxCachedBytes) {
      release(ptr);
      return;
    }
    free[cls].push_back(ptr);
    stats.cached_bytes += cls;
  }
  void trim() {
    std::lock_guard lock(mutex);
    if (device) trim_locked();
  }
  std::shared_ptr<Storage> take(Device& dev, size_t bytes) {
    const size_t cls = size_class(bytes);
    void* ptr = nullptr;
    {
      std::lock_guard lock(mutex);
      check_internal(!device || device == &dev, "device pool: a second device");
      device = &dev;
      auto it = free.find(cls);
      if (it != free.end() && !it->second.empty()) {
        ptr = it->second.back();
        it->second.pop_back();
        stats.cached_bytes -= cls;
        ++stats.reuses;
      }
    }
    if (!ptr) {
      try {
        ptr = allocate(dev, cls);
      } catch (const Error&) {
        trim();  // cached blocks of other sizes may be what the device lacks
        ptr = allocate(dev, cls);
      }
      std::lock_guard lock(mutex);
      ++stats.allocations;
    }
    auto release = [this, cls](void* q) { give_back(cls, q); };
    return std::make_shared<Storage>(ptr, bytes, release, /*on_device=*/!pinned);
  }
};

Pool& pool(bool pinned) {
  // Never destroyed: they outlive every Storage, even at exit.
  static Pool* device_pool = new Pool;
  static Pool* pinned_pool = [] {
    auto* p = new Pool;
    p->pinned = true;
    return p;
  }();
  return pinned ? *pinned_pool : *device_pool;
}

DevicePoolStats stats_of(Pool& p) {
  std::lock_guard lock(p.mutex);
  return p.stats;
}

}  // namespace

std::shared_ptr<Storage> allocate_device_storage(Device& device, size_t bytes) {
  return pool(false).take(device, bytes);
}

std::shared_ptr<Storage> allocate_pinned_storage(Device& device, size_t bytes) {
  return pool(true).take(device, bytes);
}

DevicePoolStats device_pool_stats() { return stats_of(pool(false)); }
DevicePoolStats pinned_pool_stats() { return stats_of(pool(true)); }

void device_pool_trim() {
  pool(false).trim();
  pool(true).trim();
}

}  // namespace kiln
