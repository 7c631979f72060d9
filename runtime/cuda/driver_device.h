#pragma once
// The GPU through the CUDA driver API, loaded with dlopen("libcuda.so.1"): kiln builds and
// runs without it, and only a process asking for a CUDA device needs a driver.
#include <memory>
#include <string>

#include "runtime/cuda/cuda_device.h"

namespace kiln {

// nullptr with `why` set when there is no driver or no GPU.
std::unique_ptr<Device> make_driver_device(std::string* why);

}  // namespace kiln
