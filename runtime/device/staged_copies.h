#pragma once
// A device step's copies through pinned staging memory. A copy to the device fills a
// staging block on the host and enqueues the DMA from it; a copy to the host enqueues the
// DMA into a staging block and moves the bytes to their destination once the stream has
// reached that point (finish(), after the step's event). The blocks are held until then.
#include <cstddef>
#include <memory>
#include <vector>

#include "runtime/storage.h"

namespace kiln {

class Device;
class DeviceStream;

class StagedCopies {
 public:
  void to_device(Device& device, DeviceStream& stream, void* dst, const void* src, size_t bytes);
  // The destination holds the bytes after finish().
  void to_host_later(Device& device, DeviceStream& stream, void* dst, const void* src,
                     size_t bytes);
  // The destination holds the bytes when it returns (waits for the stream).
  void to_host_now(Device& device, DeviceStream& stream, void* dst, const void* src, size_t bytes);
  // Call once the stream passed every copy enqueued here (its event completed).
  void finish();
  // Call instead of finish() when that work failed: releases the blocks, copies nothing.
  void abandon();
  bool empty() const { return staging_.empty(); }

 private:
  struct Pending {
    void* dst;
    const void* src;
    size_t bytes;
  };
  std::vector<std::shared_ptr<Storage>> staging_;
  std::vector<Pending> pending_;
};

}  // namespace kiln
