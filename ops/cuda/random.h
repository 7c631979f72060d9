#pragma once
// The CUDA backend's random draws: every element's number from the same Philox rules the CPU
// runs (ops/random.cpp's C text, compiled as device functions), keyed by (seed, stream, run,
// element), so a seed draws the same numbers on the CPU and the device. The run counter lives
// in the module's state, read by the host thunk, as on the CPU.
#include "ops/device_code.h"
#include "ops/random.h"

namespace kiln {

// False for a dropout whose ratio is a tensor input (read on the host): it stays on the CPU.
bool cuda_random_supported(const RandomOp& op, const Node& node);
DeviceCode cuda_random(const RandomOp& op, const Node& node, const CodeNames& names,
                       const Sub& sub);

}  // namespace kiln
