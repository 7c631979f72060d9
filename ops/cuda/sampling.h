#pragma once
// The CUDA backend's sampling kernels, one thread per output element, each running the CPU's
// own rule compiled as device functions: GridSample (ops/grid_sample.cpp's sampling rule) and
// Pad in every mode (its source index rule, ops/pad.cpp).
#include "ops/device_code.h"
#include "ops/grid_sample.h"
#include "ops/pad.h"

namespace kiln {

DeviceCode cuda_grid_sample(const GridSample& op, const Node& node, const CodeNames& names,
                            const Sub& sub);

DeviceCode cuda_pad(const Pad& op, const Node& node, const CodeNames& names, const Sub& sub);

}  // namespace kiln
