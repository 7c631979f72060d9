#include "runtime/device/staged_copies.h"

#include <cstring>

#include "runtime/device/device.h"
#include "runtime/device/device_memory.h"

namespace kiln {

void StagedCopies::to_device(Device& device, DeviceStream& stream, void* dst, const void* src,
                             size_t bytes) {
  // The source may be reused the moment the step returns (an arena buffer): copy it now.
  std::shared_ptr<Storage> stage = allocate_pinned_storage(device, bytes);
  std::memcpy(stage->data(), src, bytes);
  stream.copy_to_device_async(dst, stage->data(), bytes);
  staging_.push_back(std::move(stage));
}

void StagedCopies::to_host_later(Device& device, DeviceStream& stream, void* dst, const void* src,
                                 size_t bytes) {
  std::shared_ptr<Storage> stage = allocate_pinned_storage(device, bytes);
  stream.copy_to_host_async(stage->data(), src, bytes);
  pending_.push_back({dst, stage->data(), bytes});
  staging_.push_back(std::move(stage));
}

void StagedCopies::to_host_now(Device& device, DeviceStream& stream, void* dst, const void* src,
                               size_t bytes) {
  std::shared_ptr<Storage> stage = allocate_pinned_storage(device, bytes);
  stream.copy_to_host_async(stage->data(), src, bytes);
  stream.synchronize();
  std::memcpy(dst, stage->data(), bytes);
}

void StagedCopies::finish() {
  for (const Pending& p : pending_) std::memcpy(p.dst, p.src, p.bytes);
  abandon();
}

void StagedCopies::abandon() {
  pending_.clear();
  staging_.clear();
}

}  // namespace kiln
