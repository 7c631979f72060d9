#include "runtime/cuda/device_memory.h"

#include "runtime/cuda/cuda_device.h"

namespace kiln {

std::shared_ptr<Storage> allocate_device_storage(CudaDevice& device, size_t bytes) {
  void* p = device.allocate(bytes);
  return std::make_shared<Storage>(p, bytes, [&device](void* ptr) { device.release(ptr); });
}

}  // namespace kiln
