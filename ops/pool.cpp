#include "ops/pool.h"

#include <cmath>
#include <limits>

#include "ops/c/workspace.h"
#include "util/error.h"

namespace kiln {

Pool::Pool(bool is_max, Attrs props)
    : COp(is_max ? "max_pool" : "average_pool", std::move(props)), is_max_(is_max) {
  std::vector<std::string> known{"kernel_shape", "strides",  "dilations",
                                 "pads",         "auto_pad", "ceil_mode"};
  if (!is_max) known.push_back("count_include_pad");
  check_known_attrs(this->props(), known);
  window_ = WindowAttrs::from_props(this->props(), name());
  if (window_.kernel.empty()) throw AttrError("kernel_shape", "is required");
  count_include_pad_ = attr_int(this->props(), "count_include_pad", 0) != 0;
}

std::vector<WindowDims> Pool::geometry(const std::vector<int64_t>& x) const {
  return resolve_window(window_, std::vector<int64_t>(x.begin() + 2, x.end()), window_.kernel,
                        name());
}

std::vector<TensorType> Pool::infer_type(const std::vector<TensorType>& inputs) const {
  if (inputs.size() != 1) throw UserError(name() + " takes 1 input");
  const auto& x = inputs[0];
  const bool bytes = x.dtype == DType::kUInt8 || x.dtype == DType::kInt8;
  if (x.dtype != DType::kFloat32 && x.dtype != DType::kFloat64 && !(is_max_ && bytes)) {
    throw UnsupportedError(
        name() + ": " + x.to_string() + " input (float32 and float64 are " +
        (is_max_ ? "supported, and uint8 and int8 for the maximum)" : "supported)"));
  }
  if (x.rank() != 3 && x.rank() != 4) {
    throw UnsupportedError(name() + ": rank-" + std::to_string(x.rank()) +
                           " input (1-D and 2-D pooling are supported)");
  }
  for (int d = 2; d < x.rank(); ++d) {
    if (x.dims[static_cast<size_t>(d)] == kDynamic) {
      throw UnsupportedError(name() + ": spatial dimensions must be static, got " + x.to_string());
    }
  }
  TensorType out{x.dtype, {x.dims[0], x.dims[1]}};
  for (const auto& g : geometry(x.dims)) out.dims.push_back(g.out);
  return {out};
}

std::vector<Shape> Pool::infer_shape(const std::vector<Shape>& inputs) const {
  Shape out{inputs[0][0], inputs[0][1]};
  for (const auto& g : geometry(inputs[0])) out.push_back(g.out);
  return {out};
}

void Pool::perform(const std::vector<Tensor>& inputs, std::vector<Tensor>& outputs) const {
  const Tensor& x = inputs[0];
  Tensor& y = outputs[0];
  auto g = geometry(x.shape());
  if (g.size() == 1) g.insert(g.begin(), WindowDims{1, 1, 1, 1, 0, 0, 1});
  const int64_t planes = x.shape()[0] * x.shape()[1];
  int64_t flat = 0;
  for (int64_t p = 0; p < planes; ++p) {
    for (int64_t oy = 0; oy < g[0].out; ++oy) {
      for (int64_t ox = 0; ox < g[1].out; ++ox, ++flat) {
        double acc = is_max_ ? -std::numeric_limits<double>::infinity() : 0.0;
        int64_t count = 0, padded = 0;
        for (int64_t i = 0; i < g[0].kernel; ++i) {
          const int64_t yy = oy * g[0].stride - g[0].pad_begin + i * g[0].dilation;
          if (yy >= g[0].in + g[0].pad_end) break;
          for (int64_t j = 0; j < g[1].kernel; ++j) {
            const int64_t xx = ox * g[1].stride - g[1].pad_begin + j * g[1].dilation;
            if (xx >= g[1].in + g[1].pad_end) break;
            ++padded;
            if (yy < 0 || yy >= g[0].in || xx < 0 || xx >= g[1].in) continue;
            const double v = x.load((p * g[0].in + yy) * g[1].in + xx);
            ++count;
            if (!is_max_) {
              acc += v;
            } else if (v > acc || std::isnan(v)) {
              acc = v;
            }
          }
        }
        if (!is_max_)
          acc /= static_cast<double>(count_include_pad_ ? padded : std::max<int64_t>(count, 1));
        else if (count == 0 && !is_float(x.dtype()))
          acc = x.dtype() == DType::kUInt8 ? 0 : -128;  // the type's least value, as c_code's
        y.store(flat, acc);
      }
    }
  }
}

// 2-D max pooling of planes [lo, hi) (c_code sets them) as the direct convolution reads its
// input: each plane copied into stride phases whose padding is -inf (filled once per part),
// every tap then a contiguous run of the flat output positions oy*wq + ox, and the
// overhanging columns dropped at the end. A ceil_mode window past the trailing pad reads
// -inf too, as the reference skips it.
std::string Pool::max_pool_by_phases(const std::vector<WindowDims>& g, const CodeNames& names,
                                     const Sub& sub, const std::string& T,
                                     const std::string& S) const {
  const WindowDims& gy = g[0];
  const WindowDims& gx = g[1];
  auto padded = [](const WindowDims& d) {
    return std::max(d.in + d.pad_begin + d.pad_end,
                    (d.out - 1) * d.stride + (d.kernel - 1) * d.dilation + 1);
  };
  const int64_t hq = (padded(gy) + gy.stride - 1) / gy.stride;
  const int64_t wq = (padded(gx) + gx.stride - 1) / gx.stride;
  const int64_t phases = gy.stride * gx.stride, plane = hq * wq;
  if (phases * plane >= (int64_t(1) << 31)) {
    throw UnsupportedError("max pool: a plane of " + std::to_string(phases * plane) +
                           " padded elements (tap offsets are 32-bit)");
  }
  const std::string& x = names.inputs[0];
  const std::string& y = names.outputs[0];
  auto v = [&](int64_t n, std::string_view name) { return sub.value(n, name); };
  std::string s;
  s += "  if (lo < hi) {\n";
  s += "  const int64_t sh = " + v(gy.stride, "stride_h") + ", sw = " + v(gx.stride, "stride_w") +
       ", dh = " + v(gy.dilation, "dilation_h") + ", dw = " + v(gx.dilation, "dilation_w") + ", kw = " + v(gx.kernel, "kernel_w") + ";\n";
  s += "  const int64_t hq = " + v(hq, "hq") + ", wq = " + v(wq, "wq") + ", oh = " + v(gy.out, "out_h") +
       ", ow = " + v(gx.out, "out_w") + ", taps = " + v(gy.kernel, "kernel_h") + " * kw;\n";
  s += "  const int64_t total = sh * sw * hq * wq;\n";
  s += c_workspace(T, "buf", "total", "max pool's padded plane");
  s += c_workspace(T, "flat", "oh * wq", "max pool's flat rows");
  s += c_workspace("int32_t", "off", "taps", "max pool's tap offsets");
  s += "  for (int64_t i = 0; i < total; ++i) buf[i] = -(" + T + ")__builtin_inf();\n";
  s += "  for (int64_t t = 0; t < taps; ++t) {\n";
  s += "    const int64_t ky = t / kw * dh, kx = t % kw * dw;\n";
  s += "    off[t] = (int32_t)(((ky % sh) * sw + kx % sw) * hq * wq + ky / sh * wq + kx / sw);\n";
  s += "  }\n";
  s += "  for (int64_t p = lo; p < hi; ++p) {\n";
  s += "    kiln_phase_copy_" + S + "((const " + T + " *)" + x + "->data + (p / C) * " + x +
       "->strides[0] + (p % C) * " + x + "->strides[1], 1, 0, " + x + "->strides[2], " + x +
       "->strides[3], " + v(gy.in, "in_h") + ", " + v(gx.in, "in_w") + ", " + v(gy.pad_begin, "pad_top") + ", " +
       v(gx.pad_begin, "pad_left") + ", sh, sw, hq, wq, buf);\n";
  s += "    kiln_maxpool_flat_" + S + "(buf, off, taps, flat, (oh - 1) * wq + ow);\n";
  s += "    " + T + " *yp = (" + T + " *)" + y + "->data + p * oh * ow;\n";
  // The kept columns a vector at a time (the scalar copy was a fifth of a 3x3/2 pool's time).
  s += "    kiln_rows_copy_" + S + "(flat, wq, yp, ow, oh);\n";
  s += "  }\n  }\n";
  return s;
}

// The maximum of bytes (a quantized model's pool: max commutes with the monotonic
// dequantization, so its bytes pool as they are): each window scanned directly from the
// type's least value; padding never wins, and there is no NaN to carry.
std::string Pool::byte_max_pool(const std::vector<WindowDims>& g, const CodeNames& names,
                                const Sub& sub, DType dt) const {
  const std::string T(dtype_c_type(dt));
  const std::string& x = names.inputs[0];
  const std::string& y = names.outputs[0];
  const bool one_d = g.size() == 1;
  std::string s = "  const kiln_window g = " + window_c_init(g, sub) + ";\n";
  s += "  const int64_t sy = " + (one_d ? std::string("0") : x + "->strides[2]") + ", sx = " + x +
       "->strides[" + (one_d ? "2" : "3") + "];\n";
  s += "  for (int64_t p = lo; p < hi; ++p) {\n";
  s += "    const " + T + " *xp = (const " + T + " *)" + x + "->data + (p / C) * " + x +
       "->strides[0] + (p % C) * " + x + "->strides[1];\n";
  s += "    " + T + " *yp = (" + T + " *)" + y + "->data + p * g.oh * g.ow;\n";
  s += "    for (int64_t oy = 0; oy < g.oh; ++oy)\n";
  s += "      for (int64_t ox = 0; ox < g.ow; ++ox) {\n";
  s += "        " + T + " m = " + (dt == DType::kUInt8 ? "0" : "-128") + ";\n";
  s += "        for (int64_t i = 0; i < g.kh; ++i) {\n";
  s += "          const int64_t yy = oy * g.sh - g.ph + i * g.dh;\n";
  s += "          if (yy < 0 || yy >= g.h) continue;\n";
  s += "          for (int64_t j = 0; j < g.kw; ++j) {\n";
  s += "            const int64_t xx = ox * g.sw - g.pw + j * g.dw;\n";
  s += "            if (xx >= 0 && xx < g.w && xp[yy * sy + xx * sx] > m) m = xp[yy * sy + xx * "
       "sx];\n";
  s += "          }\n        }\n";
  s += "        yp[oy * g.ow + ox] = m;\n      }\n  }\n";
  return s;
}

std::string Pool::c_code(const Node& node, const CodeNames& names, const Sub& sub) const {
  const auto& xt = node.inputs[0]->type;
  const bool f32 = xt.dtype == DType::kFloat32;
  const std::string T = f32 ? "float" : "double", S = f32 ? "f32" : "f64";
  auto g = geometry(xt.dims);
  const bool one_d = g.size() == 1;
  int64_t ohw = 1;
  for (const auto& d : g) ohw *= d.out;
  const std::string& x = names.inputs[0];
  const std::string& y = names.outputs[0];
  const std::string mode = is_max_ ? "0" : (count_include_pad_ ? "2" : "1");
  const std::string sy = one_d ? "0" : x + "->strides[2]";
  const std::string sx = x + "->strides[" + std::string(one_d ? "2" : "3") + "]";
  // Each part pools a contiguous range of (n, c) planes.
  std::string s = "{\n";
  s += "  const int64_t C = " + x + "->shape[1], planes = " + x + "->shape[0] * C;\n";
  s += "  const int64_t lo = planes * " + sub.ctx + "->part / " + sub.ctx + "->n_parts;\n";
  s += "  const int64_t hi = planes * (" + sub.ctx + "->part + 1) / " + sub.ctx + "->n_parts;\n";
  if (!is_float(xt.dtype)) return s + byte_max_pool(g, names, sub, xt.dtype) + "}\n";
  if (is_max_ && g.size() == 2) {
    s += max_pool_by_phases(g, names, sub, T, S);
    return s + "}\n";
  }
  s += "  const kiln_window g = " + window_c_init(g, sub) + ";\n";
  s += "  for (int64_t p = lo; p < hi; ++p) {\n";
  s += "    const " + T + " *xp = (const " + T + " *)" + x + "->data + (p / C) * " + x +
       "->strides[0] + (p % C) * " + x + "->strides[1];\n";
  s += "    kiln_pool_" + S + "(xp, " + sy + ", " + sx + ", &g, " + mode + ", (" + T + " *)" + y +
       "->data + p * " + sub.value(ohw, "out_hw") + ");\n";
  s += "  }\n}\n";
  return s;
}

}  // namespace kiln
