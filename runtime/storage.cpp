#include "runtime/storage.h"

#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <new>
#include <string>
#include <vector>

#include "util/error.h"

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
std::string cannot_allocate(size_t bytes) {
  char buf[96];
  std::snprintf(buf, sizeof buf, "cannot allocate %zu bytes (%.3g GiB): out of memory", bytes,
                static_cast<double>(bytes) / (1u << 30));
  return buf;
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
  // Past 2^62 no machine has the memory, and rounding up to a size class would overflow.
  if (bytes > (size_t{1} << 62)) throw OutOfMemoryError(cannot_allocate(bytes));
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
  void* data =
      std::aligned_alloc(kAlign, pooled ? rounded : (bytes + kAlign - 1) / kAlign * kAlign);
  if (!data) throw OutOfMemoryError(cannot_allocate(bytes));
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
