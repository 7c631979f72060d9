#pragma once
// Device memory as a runtime Storage: a pooled allocation on the process's CUDA device,
// returned to the pool when the last tensor viewing it goes.
#include <cstddef>
#include <memory>

#include "runtime/storage.h"

namespace kiln {

class CudaDevice;

std::shared_ptr<Storage> allocate_device_storage(CudaDevice& device, size_t bytes);

}  // namespace kiln
