#include "runtime/cuda/device_memory.h"

#include <map>
#include <mutex>
#include <vector>

#include "runtime/cuda/cuda_device.h"
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

struct Pool {
  std::mutex mutex;
  CudaDevice* device = nullptr;
  std::map<size_t, std::vector<void*>> free;  // size class -> blocks
  DevicePoolStats stats;

  void trim_locked() {
    for (auto& [size, blocks] : free) {
      for (void* p : blocks) device->release(p);
    }
    free.clear();
    stats.cached_bytes = 0;
  }
};

Pool& pool() {
  static Pool* p = new Pool;  // outlives every Storage, even at exit
  return *p;
}

void give_back(size_t cls, void* ptr) {
  Pool& p = pool();
  std::lock_guard lock(p.mutex);
  if (p.stats.cached_bytes + cls > kMaxCachedBytes) {
    p.device->release(ptr);
    return;
  }
  p.free[cls].push_back(ptr);
  p.stats.cached_bytes += cls;
}

}  // namespace

std::shared_ptr<Storage> allocate_device_storage(CudaDevice& device, size_t bytes) {
  const size_t cls = size_class(bytes);
  Pool& p = pool();
  void* ptr = nullptr;
  {
    std::lock_guard lock(p.mutex);
    check_internal(!p.device || p.device == &device, "device pool: a second CUDA device");
    p.device = &device;
    auto it = p.free.find(cls);
    if (it != p.free.end() && !it->second.empty()) {
      ptr = it->second.back();
      it->second.pop_back();
      p.stats.cached_bytes -= cls;
      ++p.stats.reuses;
    }
  }
  if (!ptr) {
    try {
      ptr = device.allocate(cls);
    } catch (const Error&) {
      device_pool_trim();  // cached blocks of other sizes may be what the device lacks
      ptr = device.allocate(cls);
    }
    std::lock_guard lock(p.mutex);
    ++p.stats.allocations;
  }
  return std::make_shared<Storage>(ptr, bytes, [cls](void* q) { give_back(cls, q); });
}

DevicePoolStats device_pool_stats() {
  Pool& p = pool();
  std::lock_guard lock(p.mutex);
  return p.stats;
}

void device_pool_trim() {
  Pool& p = pool();
  std::lock_guard lock(p.mutex);
  if (p.device) p.trim_locked();
}

}  // namespace kiln
