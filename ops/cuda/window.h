#pragma once
// CUDA code for sliding windows: a direct convolution (groups, strides, dilations, pads;
// one thread per output element, the bias and an epilogue applied before the store) and
// max / average pooling with ONNX's padding rules. `window` is the kiln_cuda_window
// initializer of the resolved geometry (window_c_init); the batch is read at run time.
#include <string>

#include "ops/device_code.h"

namespace kiln {

struct CudaEpilogue;

DeviceCode cuda_conv(const Node& node, const CodeNames& names, const Sub& sub,
                     const std::string& window, int64_t group, const CudaEpilogue* epi);

DeviceCode cuda_pool(const Node& node, const CodeNames& names, const Sub& sub,
                     const std::string& window, bool is_max, bool count_include_pad);

// True when the dimensions a window's geometry depends on (all but the batch) are static.
bool window_dims_static(const Node& node);

}  // namespace kiln
