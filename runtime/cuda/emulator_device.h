#pragma once
// The CUDA emulator: device memory is host memory, a kernel image is a shared object built
// by clang++ from the module's kernels.cu with kiln_cuda_emu.h, and a launch runs every
// block's threads as fibers on the calling thread. It checks kernel logic (indexing, tails,
// barriers, shuffles), never speed, and always says it is an emulator.
#include <memory>

#include "runtime/cuda/cuda_device.h"

namespace kiln {

std::unique_ptr<Device> make_emulator_device();

}  // namespace kiln
