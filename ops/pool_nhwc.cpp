#include "ops/pool_nhwc.h"

#include <algorithm>

#include "util/error.h"

namespace kiln {

MaxPoolNhwc::MaxPoolNhwc(Attrs props) : COp("max_pool_nhwc", std::move(props)) {
  check_known_attrs(this->props(),
                    {"kernel_shape", "strides", "dilations", "pads", "auto_pad", "ceil_mode"});
  window_ = WindowAttrs::from_props(this->props(), name());
  if (window_.kernel.size() != 2) throw AttrError("kernel_shape", "must have 2 entries");
}

std::vector<WindowDims> MaxPoolNhwc::geometry(const std::vector<int64_t>& x) const {
  return resolve_window(window_, {x[1], x[2]}, window_.kernel, name());
}

std::vector<TensorType> MaxPoolNhwc::infer_type(const std::vector<TensorType>& inputs) const {
  if (inputs.size() != 1) throw UserError(name() + " takes 1 input");
  const TensorType& x = inputs[0];
  if (x.dtype != DType::kUInt8 && x.dtype != DType::kInt8)
    throw UnsupportedError(name() + ": " + x.to_string() + " input (uint8 and int8 are supported)");
  if (x.rank() != 4) throw UserError(name() + ": expects (N, H, W, C), got " + x.to_string());
  for (size_t d = 1; d < 4; ++d) {
    if (x.dims[d] == kDynamic)
      throw UnsupportedError(name() + ": H, W and C must be static, got " + x.to_string());
  }
  const auto g = geometry(x.dims);
  return {TensorType{x.dtype, {x.dims[0], g[0].out, g[1].out, x.dims[3]}}};
}

std::vector<Shape> MaxPoolNhwc::infer_shape(const std::vector<Shape>& inputs) const {
  const Shape& x = inputs[0];
  const auto g = geometry(x);
  return {Shape{x[0], g[0].out, g[1].out, x[3]}};
}

void MaxPoolNhwc::perform(const std::vector<Tensor>& inputs, std::vector<Tensor>& outputs) const {
  const Tensor& x = inputs[0];
  Tensor& y = outputs[0];
  const auto g = geometry(x.shape());
  const int64_t N = x.shape()[0], H = x.shape()[1], W = x.shape()[2], C = x.shape()[3];
  const int64_t least = x.dtype() == DType::kUInt8 ? 0 : -128;
  for (int64_t n = 0; n < N; ++n) {
    for (int64_t oy = 0; oy < g[0].out; ++oy) {
      for (int64_t ox = 0; ox < g[1].out; ++ox) {
        for (int64_t c = 0; c < C; ++c) {
          int64_t m = least;
          for (int64_t i = 0; i < g[0].kernel; ++i) {
            const int64_t yy = oy * g[0].stride - g[0].pad_begin + i * g[0].dilation;
            for (int64_t j = 0; j < g[1].kernel; ++j) {
              const int64_t xx = ox * g[1].stride - g[1].pad_begin + j * g[1].dilation;
              if (yy < 0 || yy >= H || xx < 0 || xx >= W) continue;
              m = std::max(m, x.load_int(((n * H + yy) * W + xx) * C + c));
            }
          }
          y.store_int(((n * g[0].out + oy) * g[1].out + ox) * C + c, m);
        }
      }
    }
  }
}

std::string MaxPoolNhwc::c_code(const Node& node, const CodeNames& names, const Sub& sub) const {
  const TensorType& xt = node.inputs[0]->type;
  const std::string T(dtype_c_type(xt.dtype));
  const std::string least = xt.dtype == DType::kUInt8 ? "0" : "-128";
  const std::string& X = names.inputs[0];
  const std::string& Y = names.outputs[0];
  const std::string& ctx = sub.ctx;
  // An output row starts at the type's least value; each tap then folds in the run of
  // positions whose window it lies inside (a range, no test per position), a row of
  // channels at a time (unit channel stride: one vector instruction per 32 or 64 channels).
  std::string s = "{\n";
  s += "  const kiln_window g = " + window_c_init(geometry(xt.dims), sub) + ";\n";
  s += "  const int64_t C = " + sub.value(xt.dims[3], "channels") + ", rows = " + X +
       "->shape[0] * g.oh;\n";
  s += "  const int64_t xs0 = " + X + "->strides[0], xs1 = " + X + "->strides[1], xs2 = " + X +
       "->strides[2], xs3 = " + X + "->strides[3];\n";
  s += "  const int64_t r0 = rows * " + ctx + "->part / " + ctx + "->n_parts;\n";
  s += "  const int64_t r1 = rows * (" + ctx + "->part + 1) / " + ctx + "->n_parts;\n";
  s += "  for (int64_t r = r0; r < r1; ++r) {\n";
  s += "    const int64_t n = r / g.oh, oy = r % g.oh;\n";
  s += "    " + T + " *restrict orow = (" + T + " *)" + Y + "->data + r * g.ow * C;\n";
  s += "    for (int64_t e = 0; e < g.ow * C; ++e) orow[e] = " + least + ";\n";
  s += "    for (int64_t i = 0; i < g.kh; ++i) {\n";
  s += "      const int64_t yy = oy * g.sh - g.ph + i * g.dh;\n";
  s += "      if (yy < 0 || yy >= g.h) continue;\n";
  s += "      const " + T + " *restrict xr = (const " + T + " *)" + X +
       "->data + n * xs0 + yy * xs1;\n";
  s += "      for (int64_t j = 0; j < g.kw; ++j) {\n";
  s += "        const int64_t lo = g.pw - j * g.dw, hi = g.w - 1 + g.pw - j * g.dw;\n";
  s += "        if (hi < 0) continue;\n";
  s += "        const int64_t ox0 = lo <= 0 ? 0 : (lo + g.sw - 1) / g.sw;\n";
  s += "        const int64_t ox1 = hi / g.sw + 1 < g.ow ? hi / g.sw + 1 : g.ow;\n";
  s += "        for (int64_t ox = ox0; ox < ox1; ++ox) {\n";
  s += "          const " + T + " *restrict xp = xr + (ox * g.sw - lo) * xs2;\n";
  s += "          " + T + " *restrict o = orow + ox * C;\n";
  s += "          if (xs3 == 1)\n";
  s += "            for (int64_t c = 0; c < C; ++c) o[c] = xp[c] > o[c] ? xp[c] : o[c];\n";
  s += "          else\n";
  s += "            for (int64_t c = 0; c < C; ++c)\n";
  s += "              o[c] = xp[c * xs3] > o[c] ? xp[c * xs3] : o[c];\n";
  s += "        }\n      }\n    }\n  }\n}\n";
  return s;
}

}  // namespace kiln
