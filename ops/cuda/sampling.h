#pragma once
// The CUDA backend's sampling kernels: GridSample, one thread per output element running the
// CPU's own sampling rule (ops/grid_sample.cpp's C text, compiled as device functions).
#include "ops/device_code.h"
#include "ops/grid_sample.h"

namespace kiln {

DeviceCode cuda_grid_sample(const GridSample& op, const Node& node, const CodeNames& names,
                            const Sub& sub);

}  // namespace kiln
