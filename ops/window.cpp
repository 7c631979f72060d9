#include "ops/window.h"

#include <algorithm>

#include "util/error.h"

namespace kiln {

WindowAttrs WindowAttrs::from_props(const Attrs& props, const std::string& what) {
  WindowAttrs a;
  a.kernel = attr_ints(props, "kernel_shape", std::vector<int64_t>{});
  a.strides = attr_ints(props, "strides", std::vector<int64_t>{});
  a.dilations = attr_ints(props, "dilations", std::vector<int64_t>{});
  a.pads = attr_ints(props, "pads", std::vector<int64_t>{});
  a.auto_pad = attr_string(props, "auto_pad", std::string("NOTSET"));
  a.ceil_mode = attr_int(props, "ceil_mode", 0) != 0;
  if (a.auto_pad != "NOTSET" && a.auto_pad != "SAME_UPPER" && a.auto_pad != "SAME_LOWER" &&
      a.auto_pad != "VALID") {
    throw AttrError(
        "auto_pad",
        "'" + a.auto_pad + "' is not NOTSET, SAME_UPPER, SAME_LOWER or VALID (" + what + ")");
  }
  return a;
}

std::vector<WindowDims> resolve_window(const WindowAttrs& a, const std::vector<int64_t>& in_spatial,
                                       const std::vector<int64_t>& kernel,
                                       const std::string& what) {
  const size_t n = in_spatial.size();
  auto check_len = [&](const std::vector<int64_t>& v, size_t want, const char* name) {
    if (!v.empty() && v.size() != want) {
      throw UserError(what + ": " + name + " has " + std::to_string(v.size()) +
                      " entries, expected " + std::to_string(want) + " for " + std::to_string(n) +
                      " spatial dimensions");
    }
  };
  check_len(kernel, n, "kernel_shape");
  check_len(a.strides, n, "strides");
  check_len(a.dilations, n, "dilations");
  check_len(a.pads, 2 * n, "pads");
  std::vector<WindowDims> out(n);
  for (size_t d = 0; d < n; ++d) {
    WindowDims& w = out[d];
    w.in = in_spatial[d];
    w.kernel = kernel[d];
    w.stride = a.strides.empty() ? 1 : a.strides[d];
    w.dilation = a.dilations.empty() ? 1 : a.dilations[d];
    if (w.kernel < 1 || w.stride < 1 || w.dilation < 1) {
      throw UserError(what + ": kernel, strides and dilations must be >= 1");
    }
    const int64_t extent = (w.kernel - 1) * w.dilation + 1;
    if (a.auto_pad == "SAME_UPPER" || a.auto_pad == "SAME_LOWER") {
      w.out = (w.in + w.stride - 1) / w.stride;
      const int64_t total = std::max<int64_t>(0, (w.out - 1) * w.stride + extent - w.in);
      w.pad_begin = a.auto_pad == "SAME_UPPER" ? total / 2 : total - total / 2;
      w.pad_end = total - w.pad_begin;
      continue;
    }
    if (a.auto_pad == "NOTSET" && !a.pads.empty()) {
      w.pad_begin = a.pads[d];
      w.pad_end = a.pads[d + n];
      if (w.pad_begin < 0 || w.pad_end < 0) throw UserError(what + ": pads must be >= 0");
    }
    const int64_t span = w.in + w.pad_begin + w.pad_end - extent;
    if (span < 0) {
      throw UserError(what + ": the window (extent " + std::to_string(extent) +
                      ") is larger than the padded input (" +
                      std::to_string(w.in + w.pad_begin + w.pad_end) + ") in spatial dimension " +
                      std::to_string(d));
    }
    w.out = (a.ceil_mode ? (span + w.stride - 1) / w.stride : span / w.stride) + 1;
    // A last window that would start inside the trailing padding is dropped.
    if (a.ceil_mode && (w.out - 1) * w.stride >= w.in + w.pad_begin) --w.out;
  }
  return out;
}

namespace {
template <class Format>
std::string window_init(const std::vector<WindowDims>& dims, Format s) {
  WindowDims h;  // 1-D windows run as 2-D with a unit height
  h.in = h.out = 1;
  const WindowDims& y = dims.size() == 2 ? dims[0] : h;
  const WindowDims& x = dims.back();
  return "{" + s(y.in, "in_h") + ", " + s(x.in, "in_w") + ", " + s(y.kernel, "kernel_h") + ", " +
         s(x.kernel, "kernel_w") + ", " + s(y.stride, "stride_h") + ", " + s(x.stride, "stride_w") +
         ", " + s(y.dilation, "dilation_h") + ", " + s(x.dilation, "dilation_w") + ", " +
         s(y.pad_begin, "pad_top") + ", " + s(x.pad_begin, "pad_left") + ", " +
         s(y.pad_end, "pad_bottom") + ", " + s(x.pad_end, "pad_right") + ", " + s(y.out, "out_h") +
         ", " + s(x.out, "out_w") + "}";
}
}  // namespace

std::string window_c_init(const std::vector<WindowDims>& dims) {
  return window_init(dims, [](int64_t v, std::string_view) { return std::to_string(v); });
}

std::string window_c_init(const std::vector<WindowDims>& dims, const Sub& sub) {
  return window_init(dims, [&](int64_t v, std::string_view name) { return sub.value(v, name); });
}

}  // namespace kiln
