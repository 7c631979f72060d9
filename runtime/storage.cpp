#include "runtime/storage.h"

#include <cstdlib>
#include <mutex>
#include <new>
#include <vector>

namespace kiln {
namespace {
constexpr size_t kAlign = 64;
constexpr int kClasses = 48;
// Blocks above this stay out of the pool: caching them would pin too much memory.
constexpr size_t kMaxPooled = size_t(1) << 30;

struct Pool {
  std::mutex mutex;
  std::vector<void*> free_lists[kClasses];
  PoolStats stats;
};

Pool& pool() {
  static Pool* p = new Pool();  // leaked on purpose: storages may die during static teardown
  return *p;
}

int size_class(size_t bytes, size_t* rounded) {
  size_t cap = kAlign;
  int c = 0;
  while (cap < bytes) {
    cap <<= 1;
    ++c;
  }
  *rounded = cap;
  return c;
}
}  // namespace

Storage::~Storage() {
  if (!data_) return;
  if (release_) {
    release_(data_);
    return;
  }
  if (!pooled_) {
    std::free(data_);
    return;
  }
  size_t rounded;
  int c = size_class(bytes_, &rounded);
  auto& p = pool();
  std::lock_guard lock(p.mutex);
  p.free_lists[c].push_back(data_);
  p.stats.cached_bytes += rounded;
}

std::shared_ptr<Storage> allocate_storage(size_t bytes) {
  if (bytes == 0) bytes = 1;
  size_t rounded;
  int c = size_class(bytes, &rounded);
  bool pooled = rounded <= kMaxPooled;
  auto& p = pool();
  if (pooled) {
    std::lock_guard lock(p.mutex);
    if (!p.free_lists[c].empty()) {
      void* data = p.free_lists[c].back();
      p.free_lists[c].pop_back();
      p.stats.cached_bytes -= rounded;
      ++p.stats.reuses;
      return std::make_shared<Storage>(data, bytes, true);
    }
  }
  void* data = std::aligned_alloc(kAlign, pooled ? rounded : (bytes + kAlign - 1) / kAlign * kAlign);
  if (!data) throw std::bad_alloc();
  {
    std::lock_guard lock(p.mutex);
    ++p.stats.allocations;
  }
  return std::make_shared<Storage>(data, bytes, pooled);
}

PoolStats pool_stats() {
  auto& p = pool();
  std::lock_guard lock(p.mutex);
  return p.stats;
}

void pool_trim() {
  auto& p = pool();
  std::lock_guard lock(p.mutex);
  for (auto& list : p.free_lists) {
    for (void* block : list) std::free(block);
    list.clear();
  }
  p.stats.cached_bytes = 0;
}

}  // namespace kiln
