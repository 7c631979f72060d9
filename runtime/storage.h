#pragma once
// Pooled, 64-byte aligned host memory. Freed blocks go back to a per-size-class free list
// so repeated runs with the same shapes never touch malloc.
#include <cstddef>
#include <functional>
#include <memory>

namespace kiln {

class Storage {
 public:
  Storage(void* data, size_t bytes, bool pooled) : data_(data), bytes_(bytes), pooled_(pooled) {}
  // Memory someone else owns: `release` gives it back. On a device (CUDA) unless
  // `on_device` is false (pinned host memory); the host must not dereference device memory.
  Storage(void* data, size_t bytes, std::function<void(void*)> release, bool on_device = true)
      : data_(data), bytes_(bytes), pooled_(false), on_device_(on_device),
        release_(std::move(release)) {}
  ~Storage();
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;
  void* data() const { return data_; }
  size_t bytes() const { return bytes_; }
  bool on_device() const { return on_device_; }

 private:
  void* data_;
  size_t bytes_;
  bool pooled_;
  bool on_device_ = false;
  std::function<void(void*)> release_;
};

// Contents are unspecified, like malloc.
std::shared_ptr<Storage> allocate_storage(size_t bytes);

struct PoolStats {
  size_t allocations = 0;  // served by the system allocator
  size_t reuses = 0;       // served from a free list
  size_t cached_bytes = 0; // held in free lists now
};
PoolStats pool_stats();
void pool_trim();  // returns every cached block to the system

}  // namespace kiln
