#pragma once
// CUDA code for data movement: one copy kernel through two index maps (a source and a
// destination stride per dimension) serves transpose, slice (any steps), concat (one
// launch per input) and expand (zero strides); gather picks slices by an index tensor.
// Copies move elements as unsigned integers of the dtype's size, so one kernel text
// serves every dtype of that size.
#include <string>

#include "ops/device_code.h"

namespace kiln {

// The copy kernel of a node for elements of `dt`.
DeviceKernel cuda_copy_kernel(const Sub& sub, DType dt);

// Host fragment: copies `shape` (rank `rank`, a C int64_t array) from `src` (a C
// expression of a device address) walking `src_strides` into `dst` walking `dst_strides`.
std::string cuda_copy_launch(const std::string& kernel, int rank, const std::string& shape,
                             const std::string& src, const std::string& src_strides,
                             const std::string& dst, const std::string& dst_strides);

// Gather along `axis`: indices are checked on the host first (one small device-to-host
// copy), so an out-of-range index fails the run naming its value as on the CPU.
DeviceCode cuda_gather(const Node& node, const CodeNames& names, const Sub& sub, int axis);

}  // namespace kiln
