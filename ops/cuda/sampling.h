#pragma once
// The CUDA backend's sampling kernels, one thread per output element, each running the CPU's
// own rule compiled as device functions: GridSample (ops/grid_sample.cpp's sampling rule),
// Pad in every mode (its source index rule, ops/pad.cpp) and RoIAlign (its box and sample
// rules; the boxes are first read on the host and checked, so a bad box fails the run naming
// it, as on the CPU).
#include "ops/device_code.h"
#include "ops/grid_sample.h"
#include "ops/pad.h"
#include "ops/roi_align.h"

namespace kiln {

DeviceCode cuda_grid_sample(const GridSample& op, const Node& node, const CodeNames& names,
                            const Sub& sub);

DeviceCode cuda_pad(const Pad& op, const Node& node, const CodeNames& names, const Sub& sub);

DeviceCode cuda_roi_align(const RoiAlign& op, const Node& node, const CodeNames& names,
                          const Sub& sub);

}  // namespace kiln
