#pragma once
// Moving tensors between host memory and the device (accelerator()), for callers of functions
// compiled with device inputs and outputs (CompileOptions::device_io).
#include "runtime/tensor.h"

namespace kiln {

// A contiguous copy of `host` in device memory (from the device pool).
Tensor to_device(const Tensor& host);
// A contiguous host copy of `device`; waits for nothing but the copy: call it once the run
// that wrote the tensor has finished (run(), or get() of run_async()).
Tensor to_host(const Tensor& device);

}  // namespace kiln
