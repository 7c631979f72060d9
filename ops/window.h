#pragma once
// Sliding-window geometry shared by Conv and the pools: ONNX's kernel_shape, strides,
// dilations, pads, auto_pad and ceil_mode resolved to output sizes and explicit pads.
#include <cstdint>
#include <string>
#include <vector>

#include "graph/attrs.h"
#include "ops/cop.h"

namespace kiln {

struct WindowAttrs {
  std::vector<int64_t> kernel, strides, dilations, pads;  // empty: defaults
  std::string auto_pad = "NOTSET";                        // NOTSET, SAME_UPPER, SAME_LOWER, VALID
  bool ceil_mode = false;

  // Reads the ONNX attributes from props; `what` names the op in errors.
  static WindowAttrs from_props(const Attrs& props, const std::string& what);
};

struct WindowDims {
  int64_t in = 0, kernel = 1, stride = 1, dilation = 1, pad_begin = 0, pad_end = 0, out = 0;
};

// One entry per spatial dimension; throws UserError naming `what` for a window that does
// not fit or attributes of the wrong length.
std::vector<WindowDims> resolve_window(const WindowAttrs& a, const std::vector<int64_t>& in_spatial,
                                       const std::vector<int64_t>& kernel, const std::string& what);

// The kiln_window initializer for generated code (1-D windows get H = 1).
std::string window_c_init(const std::vector<WindowDims>& dims);
// The same with every field through sub.value() (an initializer for a local, not a static).
std::string window_c_init(const std::vector<WindowDims>& dims, const Sub& sub);

}  // namespace kiln
