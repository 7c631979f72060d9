#include "ops/conv_transpose.h"

#include "util/error.h"
#include "util/strings.h"

namespace kiln {

TransposedWindow TransposedWindow::from_props(const Attrs& props, const std::string& what) {
  TransposedWindow w;
  w.strides = attr_ints(props, "strides", std::vector<int64_t>{});
  w.dilations = attr_ints(props, "dilations", std::vector<int64_t>{});
  w.pads = attr_ints(props, "pads", std::vector<int64_t>{});
  w.output_padding = attr_ints(props, "output_padding", std::vector<int64_t>{});
  for (int64_t s : w.strides)
    if (s < 1) throw AttrError("strides", "must be >= 1 (" + what + ")");
  for (int64_t d : w.dilations)
    if (d < 1) throw AttrError("dilations", "must be >= 1 (" + what + ")");
  for (int64_t p : w.output_padding)
    if (p < 0) throw AttrError("output_padding", "must be >= 0 (" + what + ")");
  return w;
}

std::vector<TransposedDim> TransposedWindow::resolve(const std::vector<int64_t>& in,
                                                     const std::vector<int64_t>& kernel,
                                                     const std::string& what) const {
  const size_t n = in.size();
  auto check_len = [&](const std::vector<int64_t>& v, size_t want, const char* name) {
    if (!v.empty() && v.size() != want) {
      throw UserError(what + ": " + name + " has " + std::to_string(v.size()) +
                      " entries, expected " + std::to_string(want) + " for " + std::to_string(n) +
                      " spatial dimensions");
    }
  };
  check_len(kernel, n, "the kernel");
  check_len(strides, n, "strides");
  check_len(dilations, n, "dilations");
  check_len(pads, 2 * n, "pads");
  check_len(output_padding, n, "output_padding");
  std::vector<TransposedDim> out(n);
  for (size_t d = 0; d < n; ++d) {
    TransposedDim& t = out[d];
    t.in = in[d];
    t.kernel = kernel[d];
    t.stride = strides.empty() ? 1 : strides[d];
    t.dilation = dilations.empty() ? 1 : dilations[d];
    t.pad_begin = pads.empty() ? 0 : pads[d];
    if (t.kernel < 1) throw UserError(what + ": the kernel must be >= 1 in every dimension");
    if (t.in == kDynamic) {
      t.out = kDynamic;
      continue;
    }
    const int64_t op = output_padding.empty() ? 0 : output_padding[d];
    t.out = (t.in - 1) * t.stride + (t.kernel - 1) * t.dilation + 1 - t.pad_begin - pad_end(d) + op;
    if (t.in < 1 || t.out < 1) {
      throw UserError(what + ": spatial dimension " + std::to_string(d) + " of size " +
                      std::to_string(t.in) + " gives an output of " + std::to_string(t.out) +
                      " (the pads crop more than the windows reach)");
    }
  }
  return out;
}

std::string transposed_window_c(const std::vector<TransposedDim>& geo, const Sub& sub) {
  const int k = static_cast<int>(geo.size());
  std::string st, dl, pb;
  for (int d = 0; d < 3; ++d) {
    const int src = d - (3 - k);
    const bool real = src >= 0;
    const auto& g = real ? geo[static_cast<size_t>(src)] : TransposedDim{};
    const std::string ds = std::to_string(d);
    st += (d ? ", " : "") + (real ? sub.value(g.stride, "stride" + ds) : "1");
    dl += (d ? ", " : "") + (real ? sub.value(g.dilation, "dilation" + ds) : "1");
    pb += (d ? ", " : "") + (real ? sub.value(g.pad_begin, "pad" + ds) : "0");
  }
  return "  const int64_t t_st[3] = {" + st + "}, t_dl[3] = {" + dl + "}, t_pb[3] = {" + pb +
         "};\n";
}

ConvTranspose::ConvTranspose(Attrs props) : COp("conv_transpose", std::move(props)) {
  check_known_attrs(this->props(), {"group", "strides", "dilations", "pads", "output_padding"});
  window_ = TransposedWindow::from_props(this->props(), "conv_transpose");
  group_ = attr_int(this->props(), "group", 1);
  if (group_ < 1) throw AttrError("group", "must be >= 1");
}

std::vector<TransposedDim> ConvTranspose::geometry(const std::vector<int64_t>& x,
                                                   const std::vector<int64_t>& w) const {
  return window_.resolve(std::vector<int64_t>(x.begin() + 2, x.end()),
                         std::vector<int64_t>(w.begin() + 2, w.end()), "conv_transpose");
}

std::vector<TensorType> ConvTranspose::infer_type(const std::vector<TensorType>& inputs) const {
  if (inputs.size() != 2 && inputs.size() != 3)
    throw UserError("conv_transpose takes 2 or 3 inputs (X, W[, B])");
  const TensorType& x = inputs[0];
  const TensorType& w = inputs[1];
  if (x.dtype != DType::kFloat32 && x.dtype != DType::kFloat64) {
    throw UnsupportedError("conv_transpose: " + x.to_string() +
                           " input (float32 and float64 are supported)");
  }
  if (x.rank() < 3 || x.rank() > 5) {
    throw UnsupportedError("conv_transpose: rank-" + std::to_string(x.rank()) +
                           " input (1-D, 2-D and 3-D are supported)");
  }
  if (w.dtype != x.dtype || w.rank() != x.rank()) {
    throw UserError("conv_transpose: weight " + w.to_string() + " does not match input " +
                    x.to_string());
  }
  for (size_t d = 0; d < w.dims.size(); ++d) {
    if (w.dims[d] == kDynamic || (d == 1 && x.dims[1] == kDynamic)) {
      throw UnsupportedError("conv_transpose: channels and kernel must be static, got input " +
                             x.to_string() + " and weight " + w.to_string());
    }
  }
  const int64_t c = x.dims[1], m = w.dims[1] * group_;
  if (w.dims[0] != c || c % group_ != 0) {
    throw UserError("conv_transpose: weight " + w.to_string() + " does not fit input " +
                    x.to_string() + " with group " + std::to_string(group_) +
                    " (weight dim 0 must be the input's channels, a multiple of group)");
  }
  if (inputs.size() == 3) {
    const TensorType& b = inputs[2];
    if (b.dtype != x.dtype || b.rank() != 1 || (b.dims[0] != kDynamic && b.dims[0] != m)) {
      throw UserError("conv_transpose: bias " + b.to_string() + " must be " +
                      std::string(dtype_name(x.dtype)) + " (" + std::to_string(m) + ")");
    }
  }
  TensorType out{x.dtype, {x.dims[0], m}};
  for (const auto& g : geometry(x.dims, w.dims)) out.dims.push_back(g.out);
  return {out};
}

std::vector<Shape> ConvTranspose::infer_shape(const std::vector<Shape>& inputs) const {
  const int64_t m = inputs[1][1] * group_;
  if (inputs.size() == 3 && inputs[2][0] != m) {
    throw UserError("conv_transpose: bias has " + std::to_string(inputs[2][0]) + " entries for " +
                    std::to_string(m) + " output channels");
  }
  Shape out{inputs[0][0], m};
  for (const auto& g : geometry(inputs[0], inputs[1])) out.push_back(g.out);
  return {out};
}

double ConvTranspose::flops(const std::vector<Shape>& inputs, const std::vector<Shape>&) const {
  // Each input element meets every tap of its group's output channels.
  return 2.0 * static_cast<double>(shape_numel(inputs[0])) *
         (static_cast<double>(shape_numel(inputs[1])) / static_cast<double>(inputs[1][0]));
}

void ConvTranspose::perform(const std::vector<Tensor>& inputs, std::vector<Tensor>& outputs) const {
  const Tensor& x = inputs[0];
  const Tensor& w = inputs[1];
  Tensor& y = outputs[0];
  auto geo = geometry(x.shape(), w.shape());
  while (geo.size() < 3) geo.insert(geo.begin(), TransposedDim{1, 1, 1, 1, 0, 1});
  const int64_t N = x.shape()[0], C = x.shape()[1], mg = w.shape()[1], cg = C / group_;
  const int64_t M = mg * group_;
  const int64_t ik = geo[0].in * geo[1].in * geo[2].in, ok = geo[0].out * geo[1].out * geo[2].out;
  const int64_t kk = geo[0].kernel * geo[1].kernel * geo[2].kernel;
  std::vector<double> acc(static_cast<size_t>(N * M * ok), 0.0);
  for (int64_t n = 0; n < N; ++n) {
    for (int64_t c = 0; c < C; ++c) {
      const int64_t g = c / cg;
      for (int64_t i = 0; i < ik; ++i) {
        const int64_t iz = i / (geo[1].in * geo[2].in), iy = i / geo[2].in % geo[1].in,
                      ix = i % geo[2].in;
        const double xv = x.load((n * C + c) * ik + i);
        for (int64_t j = 0; j < mg; ++j) {
          for (int64_t t = 0; t < kk; ++t) {
            const int64_t kz = t / (geo[1].kernel * geo[2].kernel),
                          ky = t / geo[2].kernel % geo[1].kernel, kx = t % geo[2].kernel;
            const int64_t oz = iz * geo[0].stride - geo[0].pad_begin + kz * geo[0].dilation;
            const int64_t oy = iy * geo[1].stride - geo[1].pad_begin + ky * geo[1].dilation;
            const int64_t ox = ix * geo[2].stride - geo[2].pad_begin + kx * geo[2].dilation;
            if (oz < 0 || oz >= geo[0].out || oy < 0 || oy >= geo[1].out || ox < 0 ||
                ox >= geo[2].out)
              continue;
            const int64_t o = (n * M + g * mg + j) * ok + (oz * geo[1].out + oy) * geo[2].out + ox;
            acc[static_cast<size_t>(o)] += xv * w.load((c * mg + j) * kk + t);
          }
        }
      }
    }
  }
  for (int64_t o = 0; o < N * M * ok; ++o) {
    const double b = inputs.size() == 3 ? inputs[2].load(o / ok % M) : 0.0;
    y.store(o, acc[static_cast<size_t>(o)] + b);
  }
}

std::string ConvTranspose::c_code(const Node& node, const CodeNames& names, const Sub& sub) const {
  const TensorType& xt = node.inputs[0]->type;
  const std::string T(dtype_c_type(xt.dtype));
  const int k = xt.rank() - 2;
  const std::string& X = names.inputs[0];
  const std::string& W = names.inputs[1];
  const std::string& Y = names.outputs[0];
  auto geo = geometry(xt.dims, node.inputs[1]->type.dims);
  // The geometry padded to three dimensions at the front; sizes come from the tensors.
  std::string s = "{\n";
  s += transposed_window_c(geo, sub);
  s += "  int64_t t_in[3] = {1, 1, 1}, t_ker[3] = {1, 1, 1}, t_od[3] = {1, 1, 1};\n";
  s += "  int64_t t_xs[5] = {0, 0, 0, 0, 0}, t_ws[5] = {0, 0, 0, 0, 0};\n";
  s += "  for (int d = 0; d < 2; ++d) { t_xs[d] = " + X + "->strides[d]; t_ws[d] = " + W +
       "->strides[d]; }\n";
  s += "  for (int d = 0; d < " + std::to_string(k) + "; ++d) {\n";
  s += "    const int e = 3 - " + std::to_string(k) + " + d;\n";
  s += "    t_in[e] = " + X + "->shape[2 + d]; t_ker[e] = " + W + "->shape[2 + d]; t_od[e] = " + Y +
       "->shape[2 + d];\n";
  s += "    t_xs[2 + e] = " + X + "->strides[2 + d]; t_ws[2 + e] = " + W + "->strides[2 + d];\n";
  s += "  }\n";
  s += "  const int64_t N = " + X + "->shape[0], C = " + X + "->shape[1], mg = " + W +
       "->shape[1], G = " + sub.value(group_, "group") + ", cg = C / G, M = mg * G;\n";
  s += "  const int64_t ok = t_od[0] * t_od[1] * t_od[2];\n";
  s += "  " + T + " *y = (" + T + " *)" + Y + "->data;\n";
  s += "  for (int64_t o = 0; o < N * M * ok; ++o) y[o] = ";
  s += node.inputs.size() == 3
           ? "((const " + T + " *)" + names.inputs[2] + "->data)[(o / ok % M) * " +
                 names.inputs[2] + "->strides[0]];\n"
           : "0;\n";
  s += "  for (int64_t n = 0; n < N; ++n)\n";
  s += "  for (int64_t c = 0; c < C; ++c)\n";
  s += "  for (int64_t iz = 0; iz < t_in[0]; ++iz)\n";
  s += "  for (int64_t iy = 0; iy < t_in[1]; ++iy)\n";
  s += "  for (int64_t ix = 0; ix < t_in[2]; ++ix) {\n";
  s += "    const " + T + " xv = ((const " + T + " *)" + X +
       "->data)[n * t_xs[0] + c * t_xs[1] + iz * t_xs[2] + iy * t_xs[3] + ix * t_xs[4]];\n";
  s += "    for (int64_t j = 0; j < mg; ++j) {\n";
  s += "      " + T + " *yc = y + (n * M + c / cg * mg + j) * ok;\n";
  s += "      const " + T + " *wc = (const " + T + " *)" + W +
       "->data + c * t_ws[0] + j * t_ws[1];\n";
  s += "      for (int64_t kz = 0; kz < t_ker[0]; ++kz) {\n";
  s += "        const int64_t oz = iz * t_st[0] - t_pb[0] + kz * t_dl[0];\n";
  s += "        if (oz < 0 || oz >= t_od[0]) continue;\n";
  s += "        for (int64_t ky = 0; ky < t_ker[1]; ++ky) {\n";
  s += "          const int64_t oy = iy * t_st[1] - t_pb[1] + ky * t_dl[1];\n";
  s += "          if (oy < 0 || oy >= t_od[1]) continue;\n";
  s += "          for (int64_t kx = 0; kx < t_ker[2]; ++kx) {\n";
  s += "            const int64_t ox = ix * t_st[2] - t_pb[2] + kx * t_dl[2];\n";
  s += "            if (ox < 0 || ox >= t_od[2]) continue;\n";
  s += "            yc[(oz * t_od[1] + oy) * t_od[2] + ox] += xv * wc[kz * t_ws[2] + ky * t_ws[3] "
       "+ kx * "
       "t_ws[4]];\n";
  s += "          }\n        }\n      }\n    }\n  }\n}\n";
  return s;
}

}  // namespace kiln
