#include "ops/conv.h"
#include "ops/cuda_window.h"
#include "ops/cuda_kernels.h"

#include "util/error.h"
#include "util/strings.h"

namespace kiln {
namespace {
// The tile kernel reads up to KILN_CONV_SLACK (module_abi.h) elements past its buffer; the
// generated code names the macro, and this bound only sizes the 32-bit offset check.
constexpr int64_t kConvSlackBound = 1024;
}  // namespace

Conv::Conv(Attrs props) : COp("conv", std::move(props)) {
  check_known_attrs(this->props(),
                    {"group", "kernel_shape", "strides", "dilations", "pads", "auto_pad"});
  window_ = WindowAttrs::from_props(this->props(), "conv");
  group_ = attr_int(this->props(), "group", 1);
  if (group_ < 1) throw AttrError("group", "must be >= 1");
}

std::vector<WindowDims> Conv::geometry(const std::vector<int64_t>& x,
                                       const std::vector<int64_t>& w) const {
  std::vector<int64_t> spatial(x.begin() + 2, x.end());
  std::vector<int64_t> kernel(w.begin() + 2, w.end());
  if (!window_.kernel.empty() && window_.kernel != kernel) {
    throw UserError("conv: kernel_shape " + dims_to_string(window_.kernel) +
                    " differs from the weight's " + dims_to_string(kernel));
  }
  return resolve_window(window_, spatial, kernel, "conv");
}

std::vector<TensorType> Conv::infer_type(const std::vector<TensorType>& inputs) const {
  if (inputs.size() != 2 && inputs.size() != 3)
    throw UserError("conv takes 2 or 3 inputs (X, W[, B])");
  const auto& x = inputs[0];
  const auto& w = inputs[1];
  if (x.dtype != DType::kFloat32 && x.dtype != DType::kFloat64) {
    throw UnsupportedError("conv: " + x.to_string() + " input (float32 and float64 are supported)");
  }
  if (x.rank() != 3 && x.rank() != 4) {
    throw UnsupportedError("conv: rank-" + std::to_string(x.rank()) +
                           " input (1-D and 2-D convolutions are supported)");
  }
  if (w.dtype != x.dtype || w.rank() != x.rank()) {
    throw UserError("conv: weight " + w.to_string() + " does not match input " + x.to_string());
  }
  for (int d = 1; d < x.rank(); ++d) {
    if (x.dims[static_cast<size_t>(d)] == kDynamic || w.dims[static_cast<size_t>(d)] == kDynamic ||
        w.dims[0] == kDynamic) {
      throw UnsupportedError("conv: channel and spatial dimensions must be static, got input " +
                             x.to_string() + " and weight " + w.to_string());
    }
  }
  const int64_t c = x.dims[1], m = w.dims[0];
  if (c % group_ != 0 || m % group_ != 0 || w.dims[1] != c / group_) {
    throw UserError("conv: input " + x.to_string() + " and weight " + w.to_string() +
                    " do not fit group " + std::to_string(group_) +
                    " (weight dim 1 must be channels / group)");
  }
  if (inputs.size() == 3) {
    const auto& b = inputs[2];
    if (b.dtype != x.dtype || b.rank() != 1 || (b.dims[0] != kDynamic && b.dims[0] != m)) {
      throw UserError("conv: bias " + b.to_string() + " must be " +
                      std::string(dtype_name(x.dtype)) + " (" + std::to_string(m) + ")");
    }
  }
  TensorType out{x.dtype, {x.dims[0], m}};
  for (const auto& g : geometry(x.dims, w.dims)) out.dims.push_back(g.out);
  return {out};
}

std::vector<Shape> Conv::infer_shape(const std::vector<Shape>& inputs) const {
  if (inputs.size() == 3 && inputs[2][0] != inputs[1][0]) {
    throw UserError("conv: bias has " + std::to_string(inputs[2][0]) + " entries for " +
                    std::to_string(inputs[1][0]) + " output channels");
  }
  Shape out{inputs[0][0], inputs[1][0]};
  for (const auto& g : geometry(inputs[0], inputs[1])) out.push_back(g.out);
  return {out};
}

void Conv::perform(const std::vector<Tensor>& inputs, std::vector<Tensor>& outputs) const {
  const Tensor& x = inputs[0];
  const Tensor& w = inputs[1];
  Tensor& y = outputs[0];
  auto g = geometry(x.shape(), w.shape());
  if (g.size() == 1) g.insert(g.begin(), WindowDims{1, 1, 1, 1, 0, 0, 1});
  const int64_t n_batch = x.shape()[0], c = x.shape()[1], m = w.shape()[0];
  const int64_t cg = c / group_, mg = m / group_;
  const int64_t h = g[0].in, wd = g[1].in, oh = g[0].out, ow = g[1].out;
  const int64_t kh = g[0].kernel, kw = g[1].kernel;
  int64_t flat = 0;
  for (int64_t n = 0; n < n_batch; ++n) {
    for (int64_t oc = 0; oc < m; ++oc) {
      const int64_t grp = oc / mg;
      for (int64_t oy = 0; oy < oh; ++oy) {
        for (int64_t ox = 0; ox < ow; ++ox, ++flat) {
          double acc = inputs.size() == 3 ? inputs[2].load(oc) : 0.0;
          for (int64_t ic = 0; ic < cg; ++ic) {
            for (int64_t i = 0; i < kh; ++i) {
              const int64_t yy = oy * g[0].stride - g[0].pad_begin + i * g[0].dilation;
              if (yy < 0 || yy >= h) continue;
              for (int64_t j = 0; j < kw; ++j) {
                const int64_t xx = ox * g[1].stride - g[1].pad_begin + j * g[1].dilation;
                if (xx < 0 || xx >= wd) continue;
                const int64_t xi = ((n * c + grp * cg + ic) * h + yy) * wd + xx;
                const int64_t wi = ((oc * cg + ic) * kh + i) * kw + j;
                acc += x.load(xi) * w.load(wi);
              }
            }
          }
          y.store(flat, acc);
        }
      }
    }
  }
}

int64_t Conv::c_split_unit(const Node& node) const {
  int64_t unit = 1;
  const auto& dims = node.outputs[0]->type.dims;
  for (size_t d = 2; d < dims.size(); ++d) unit *= dims[d];
  return unit;
}

// Direct convolution through kiln_support.conv_tile (a register-blocked kernel over taps).
// A stride-1 window reads the zero-padded image itself: output position (oy, ox) is flat
// position oy*Wp + ox of the padded rows, and tap (c, i, j) is the fixed offset
// c*Hp*Wp + i*dh*Wp + j*dw, so no unfolded matrix is built; the few positions that overhang
// a row (ox >= OW) are computed and dropped. Strided windows are unfolded (im2col) first.
// Each part of a split call computes whole output planes (image, channel).
std::string Conv::c_code(const Node& node, const CodeNames& names, const Sub& sub) const {
  const auto& xt = node.inputs[0]->type;
  const auto& wt = node.inputs[1]->type;
  const bool f32 = xt.dtype == DType::kFloat32;
  const std::string T = f32 ? "float" : "double", S = f32 ? "f32" : "f64";
  auto g = geometry(xt.dims, wt.dims);
  const bool one_d = g.size() == 1;
  auto g2 = g;
  if (one_d) g2.insert(g2.begin(), WindowDims{1, 1, 1, 1, 0, 0, 1});
  const WindowDims& gy = g2[0];
  const WindowDims& gx = g2[1];
  const bool flat = gy.stride == 1 && gx.stride == 1;
  const int64_t c = xt.dims[1], m = wt.dims[0];
  const int64_t cg = c / group_, mg = m / group_;
  const int64_t khw = gy.kernel * gx.kernel, ohw = gy.out * gx.out, ckk = cg * khw;
  const int64_t hp = gy.in + gy.pad_begin + gy.pad_end, wp = gx.in + gx.pad_begin + gx.pad_end;
  // Elements of the per-part buffer before the slack: the padded image group, or the
  // unfolded matrix.
  const int64_t buf = flat ? cg * hp * wp : ckk * ohw;
  if (buf + kConvSlackBound >= (int64_t(1) << 31)) {
    throw UnsupportedError("conv: an image group of " + std::to_string(buf) +
                           " elements (tap offsets are 32-bit)");
  }
  const std::string& x = names.inputs[0];
  const std::string& w = names.inputs[1];
  const std::string& y = names.outputs[0];
  const std::string& ctx = sub.ctx;
  auto s64 = [&](int64_t v) { return sub.value(v); };
  auto lit = [](int64_t v) { return std::to_string(v); };
  const std::string sy = one_d ? "0" : x + "->strides[2]";
  const std::string sx = x + "->strides[" + (one_d ? "2" : "3") + "]";
  const bool has_bias = node.inputs.size() == 3;
  std::string s = "{\n";
  s += "  const kiln_window g = " + window_c_init(g, sub) + ";\n";
  s += "  (void)g;\n";
  s += "  int64_t lo, hi;\n";
  s += "  kiln_part_range(" + x + "->shape[0] * " + s64(m) + ", " + ctx + "->part, " + ctx +
       "->n_parts, 1, &lo, &hi);\n";
  s += "  if (lo < hi) {\n";
  s += "  const " + T + " *W = (const " + T + " *)" + w + "->data;\n";
  s += "  int w_contig = 1;\n  {\n    int64_t c = 1;\n";
  s += "    for (int d = " + lit(wt.rank() - 1) + "; d >= 0; --d) {\n";
  s += "      if (" + w + "->shape[d] != 1 && " + w + "->strides[d] != c) w_contig = 0;\n";
  s += "      c *= " + w + "->shape[d];\n    }\n  }\n";
  s += "  if (!w_contig) {\n";
  s += "    " + T + " *packed = (" + T + " *)" + ctx + "->workspace(" + ctx + ", (size_t)" +
       s64(m * ckk) + " * sizeof(" + T + "));\n";
  s += "    if (!packed) " + sub.fail + "(\"conv: out of memory for the packed weight\");\n";
  s += "    kiln_copy_strided(packed, " + w + "->data, " + lit(wt.rank()) + ", " + w + "->shape, " +
       w + "->strides, sizeof(" + T + "));\n    W = packed;\n  }\n";
  s += "  const " + T + " *bias = " +
       (has_bias ? "(const " + T + " *)" + names.inputs[2] + "->data" : std::string("0")) + ";\n";
  s += "  const int64_t bs = " + (has_bias ? names.inputs[2] + "->strides[0]" : std::string("0")) +
       ";\n";
  s += "  " + T + " *buf = (" + T + " *)" + ctx + "->workspace(" + ctx + ", (size_t)(" + s64(buf) +
       " + KILN_CONV_SLACK) * sizeof(" + T + "));\n";
  s += "  int32_t *off = (int32_t *)" + ctx + "->workspace(" + ctx + ", (size_t)" + s64(ckk) +
       " * sizeof(int32_t));\n";
  s += "  if (!buf || !off) " + sub.fail + "(\"conv: out of memory for the " +
       (flat ? "padded image" : "im2col buffer") + " (%lld bytes)\", (long long)" +
       s64(buf * (f32 ? 4 : 8)) + ");\n";
  // The padding (flat) and the slack are zero once; each image group rewrites the rest.
  s += "  for (int64_t i = " + s64(flat ? 0 : buf) + "; i < " + s64(buf) +
       " + KILN_CONV_SLACK; ++i) buf[i] = 0;\n";
  s += "  for (int64_t c = 0, t = 0; c < " + s64(cg) + "; ++c)\n";
  s += "    for (int64_t i = 0; i < " + s64(gy.kernel) + "; ++i)\n";
  s += "      for (int64_t j = 0; j < " + s64(gx.kernel) + "; ++j, ++t)\n";
  if (flat) {
    s += "        off[t] = (int32_t)(c * " + s64(hp * wp) + " + i * " + s64(gy.dilation * wp) +
         " + j * " + s64(gx.dilation) + ");\n";
  } else {
    s += "        off[t] = (int32_t)(t * " + s64(ohw) + ");\n";
  }
  s += "  for (int64_t u = lo; u < hi;) {\n";
  s += "    const int64_t n = u / " + s64(m) + ", oc = u % " + s64(m) + ", grp = oc / " + s64(mg) +
       ";\n";
  s += "    const int64_t group_end = (grp + 1) * " + s64(mg) + ";\n";
  s += "    const int64_t oc_end = oc + (hi - u) < group_end ? oc + (hi - u) : group_end;\n";
  s += "    const " + T + " *xg = (const " + T + " *)" + x + "->data + n * " + x +
       "->strides[0] + grp * " + s64(cg) + " * " + x + "->strides[1];\n";
  if (flat) {
    s += "    for (int64_t c = 0; c < " + s64(cg) + "; ++c)\n";
    s += "      for (int64_t yy = 0; yy < " + s64(gy.in) + "; ++yy) {\n";
    s += "        const " + T + " *src = xg + c * " + x + "->strides[1] + yy * " + sy + ";\n";
    s += "        " + T + " *restrict dst = buf + c * " + s64(hp * wp) + " + (yy + " +
         s64(gy.pad_begin) + ") * " + s64(wp) + " + " + s64(gx.pad_begin) + ";\n";
    s += "        if (" + sx + " == 1) for (int64_t xx = 0; xx < " + s64(gx.in) +
         "; ++xx) dst[xx] = src[xx];\n";
    s += "        else for (int64_t xx = 0; xx < " + s64(gx.in) + "; ++xx) dst[xx] = src[xx * " +
         sx + "];\n";
    s += "      }\n";
  } else {
    s += "    kiln_im2col_" + S + "(xg, " + s64(cg) + ", " + x + "->strides[1], " + sy + ", " + sx +
         ", &g, buf, " + s64(ohw) + ");\n";
  }
  const int64_t npos = flat ? (gy.out - 1) * wp + gx.out : ohw;
  s += "    kiln_conv_tile_" + S + "(oc_end - oc, " + s64(npos) + ", " + s64(ckk) +
       ", buf, off, W + oc * " + s64(ckk) + ", " + s64(ckk) + ", bias ? bias + oc * bs : 0, bs, (" +
       T + " *)" + y + "->data + u * " + s64(ohw) + ", " + s64(ohw) + ", " +
       s64(flat ? wp : gx.out) + ", " + s64(gx.out) + ");\n";
  s += "    u += oc_end - oc;\n";
  s += "  }\n  }\n}\n";
  return s;
}

namespace {
// The static dimensions of v with a dynamic batch read as 1 (the geometry ignores it).
std::vector<int64_t> with_batch(const Variable* v) {
  std::vector<int64_t> d = v->type.dims;
  if (!d.empty() && d[0] == kDynamic) d[0] = 1;
  return d;
}
}  // namespace

bool Conv::has_cuda_code(const Node& node) const {
  return cuda_dtypes_ok(node) && is_float(node.outputs[0]->type.dtype) && window_dims_static(node);
}

CudaCode Conv::cuda_code(const Node& node, const CodeNames& names, const Sub& sub) const {
  return cuda_conv(node, names, sub,
                   window_c_init(geometry(with_batch(node.inputs[0]), node.inputs[1]->type.dims)),
                   group_, nullptr);
}

CudaCode Conv::cuda_code_with(const Node& node, const CodeNames& names, const Sub& sub,
                              const CudaEpilogue& epi) const {
  return cuda_conv(node, names, sub,
                   window_c_init(geometry(with_batch(node.inputs[0]), node.inputs[1]->type.dims)),
                   group_, &epi);
}

}  // namespace kiln
