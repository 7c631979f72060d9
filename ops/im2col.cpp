#include "ops/im2col.h"

#include "util/error.h"

namespace kiln {

Im2Col::Im2Col(Attrs props) : COp("im2col", std::move(props)) {
  check_known_attrs(this->props(), {"kernel_shape", "strides", "dilations", "pads", "auto_pad"});
  window_ = WindowAttrs::from_props(this->props(), name());
  if (window_.kernel.size() != 2) throw AttrError("kernel_shape", "must have 2 entries");
}

std::vector<WindowDims> Im2Col::geometry(const std::vector<int64_t>& x) const {
  return resolve_window(window_, {x[1], x[2]}, window_.kernel, name());
}

std::vector<TensorType> Im2Col::infer_type(const std::vector<TensorType>& inputs) const {
  if (inputs.size() != 1) throw UserError(name() + " takes 1 input");
  const TensorType& x = inputs[0];
  if (x.dtype != DType::kFloat32 && x.dtype != DType::kFloat64)
    throw UnsupportedError(name() + ": " + x.to_string() + " input (float32 and float64)");
  if (x.rank() != 4) throw UserError(name() + ": expects (N, H, W, C), got " + x.to_string());
  for (size_t d = 1; d < 4; ++d) {
    if (x.dims[d] == kDynamic)
      throw UnsupportedError(name() + ": H, W and C must be static, got " + x.to_string());
  }
  const auto g = geometry(x.dims);
  return {
      TensorType{x.dtype, {x.dims[0], g[0].out, g[1].out, x.dims[3] * g[0].kernel * g[1].kernel}}};
}

std::vector<Shape> Im2Col::infer_shape(const std::vector<Shape>& inputs) const {
  const Shape& x = inputs[0];
  const auto g = geometry(x);
  return {Shape{x[0], g[0].out, g[1].out, x[3] * g[0].kernel * g[1].kernel}};
}

void Im2Col::perform(const std::vector<Tensor>& inputs, std::vector<Tensor>& outputs) const {
  const Tensor& x = inputs[0];
  Tensor& y = outputs[0];
  const auto g = geometry(x.shape());
  const int64_t N = x.shape()[0], H = x.shape()[1], W = x.shape()[2], C = x.shape()[3];
  int64_t o = 0;
  for (int64_t n = 0; n < N; ++n)
    for (int64_t oy = 0; oy < g[0].out; ++oy)
      for (int64_t ox = 0; ox < g[1].out; ++ox)
        for (int64_t ky = 0; ky < g[0].kernel; ++ky)
          for (int64_t kx = 0; kx < g[1].kernel; ++kx)
            for (int64_t c = 0; c < C; ++c, ++o) {
              const int64_t yy = oy * g[0].stride - g[0].pad_begin + ky * g[0].dilation;
              const int64_t xx = ox * g[1].stride - g[1].pad_begin + kx * g[1].dilation;
              const bool in = yy >= 0 && yy < H && xx >= 0 && xx < W;
              y.store(o, in ? x.load(((n * H + yy) * W + xx) * C + c) : 0.0);
            }
}

std::string Im2Col::c_code(const Node& node, const CodeNames& names, const Sub& sub) const {
  const TensorType& xt = node.inputs[0]->type;
  const std::string T(dtype_c_type(xt.dtype));
  const std::string& X = names.inputs[0];
  const std::string& Y = names.outputs[0];
  const std::string& ctx = sub.ctx;
  std::string s = "{\n";
  s += "  const kiln_window g = " + window_c_init(geometry(xt.dims), sub) + ";\n";
  s += "  const int64_t C = " + sub.value(xt.dims[3], "channels") + ", K = g.kh * g.kw * C;\n";
  s += "  const int64_t rows = " + X + "->shape[0] * g.oh;\n";
  s += "  const int64_t xs0 = " + X + "->strides[0], xs1 = " + X + "->strides[1], xs2 = " + X +
       "->strides[2], xs3 = " + X + "->strides[3];\n";
  s += "  const int64_t r0 = rows * " + ctx + "->part / " + ctx + "->n_parts;\n";
  s += "  const int64_t r1 = rows * (" + ctx + "->part + 1) / " + ctx + "->n_parts;\n";
  s += "  const " + T + " *x = (const " + T + " *)" + X + "->data;\n";
  s += "  for (int64_t r = r0; r < r1; ++r) {\n";
  s += "    const int64_t n = r / g.oh, oy = r % g.oh;\n";
  s += "    " + T + " *restrict p = (" + T + " *)" + Y + "->data + r * g.ow * K;\n";
  s += "    for (int64_t ox = 0; ox < g.ow; ++ox)\n";
  s += "      for (int64_t ky = 0; ky < g.kh; ++ky) {\n";
  s += "        const int64_t yy = oy * g.sh - g.ph + ky * g.dh;\n";
  s += "        for (int64_t kx = 0; kx < g.kw; ++kx, p += C) {\n";
  s += "          const int64_t xx = ox * g.sw - g.pw + kx * g.dw;\n";
  s += "          if (yy < 0 || yy >= g.h || xx < 0 || xx >= g.w) {\n";
  s += "            for (int64_t c = 0; c < C; ++c) p[c] = 0;\n";
  s += "            continue;\n";
  s += "          }\n";
  s += "          const " + T + " *restrict xp = x + n * xs0 + yy * xs1 + xx * xs2;\n";
  s += "          if (xs3 == 1)\n";
  s += "            for (int64_t c = 0; c < C; ++c) p[c] = xp[c];\n";
  s += "          else\n";
  s += "            for (int64_t c = 0; c < C; ++c) p[c] = xp[c * xs3];\n";
  s += "        }\n      }\n  }\n}\n";
  return s;
}

}  // namespace kiln
