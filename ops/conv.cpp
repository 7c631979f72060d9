#include "ops/conv.h"

#include "ops/gemm_support.h"

#include "util/error.h"
#include "util/strings.h"

namespace kiln {
namespace {
// Largest im2col matrix (bytes) built at once: images beyond it go to the next chunk.
constexpr int64_t kColBytes = 8 << 20;
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

std::string Conv::c_code(const Node& node, const CodeNames& names, const Sub& sub) const {
  const auto& xt = node.inputs[0]->type;
  const auto& wt = node.inputs[1]->type;
  const bool f32 = xt.dtype == DType::kFloat32;
  const std::string T = f32 ? "float" : "double", S = f32 ? "f32" : "f64",
                    gemm = gemm_fn_name(xt.dtype);
  auto g = geometry(xt.dims, wt.dims);
  const bool one_d = g.size() == 1;
  const WindowDims& gx = g.back();
  const bool pointwise =
      gx.kernel == 1 && gx.stride == 1 && gx.pad_begin == 0 && gx.pad_end == 0 &&
      (one_d || (g[0].kernel == 1 && g[0].stride == 1 && g[0].pad_begin == 0 && g[0].pad_end == 0));
  const int64_t c = xt.dims[1], m = wt.dims[0];
  const int64_t cg = c / group_, mg = m / group_;
  int64_t khw = 1, ohw = 1;
  for (const auto& d : g) {
    khw *= d.kernel;
    ohw *= d.out;
  }
  const std::string& x = names.inputs[0];
  const std::string& w = names.inputs[1];
  const std::string& y = names.outputs[0];
  const std::string& ctx = sub.ctx;
  auto s64 = [](int64_t v) { return std::to_string(v); };
  // Strides of X: batch, channel, row (0 for 1-D), column.
  const std::string sy = one_d ? "0" : x + "->strides[2]";
  const std::string sx = x + "->strides[" + (one_d ? "2" : "3") + "]";
  std::string s = "{\n";
  s += "  static const kiln_window g = " + window_c_init(g) + ";\n";
  s += "  const int64_t N = " + x + "->shape[0], CKK = " + s64(cg * khw) + ", OHW = " + s64(ohw) +
       ";\n";
  s += "  const " + T + " *W = (const " + T + " *)" + w + "->data;\n";
  s += "  int w_contig = 1;\n  {\n    int64_t c = 1;\n";
  s += "    for (int d = " + s64(wt.rank() - 1) + "; d >= 0; --d) {\n";
  s += "      if (" + w + "->shape[d] != 1 && " + w + "->strides[d] != c) w_contig = 0;\n";
  s += "      c *= " + w + "->shape[d];\n    }\n  }\n";
  s += "  if (!w_contig) {\n";
  s += "    " + T + " *packed = (" + T + " *)" + ctx + "->workspace(" + ctx + ", (size_t)" +
       s64(m * cg * khw) + " * sizeof(" + T + "));\n";
  s += "    if (!packed) " + sub.fail + "(\"conv: out of memory for the packed weight\");\n";
  s += "    kiln_copy_strided(packed, " + w + "->data, " + s64(wt.rank()) + ", " + w + "->shape, " +
       w + "->strides, sizeof(" + T + "));\n    W = packed;\n  }\n";
  if (pointwise) {
    s += "  const int direct = " + sx + " == 1 && (" + s64(one_d ? 1 : 0) + " || " + sy +
         " == " + s64(gx.in) + ") && " + x + "->strides[1] == OHW;\n";
  } else {
    s += "  const int direct = 0;\n";
  }
  // Without the direct path, images are unfolded side by side into one col matrix (up to
  // kColBytes), so each group needs one large GEMM per chunk instead of one per image.
  s += "  int64_t chunk = direct ? 1 : (int64_t)(" + std::to_string(kColBytes) + " / (CKK * OHW * sizeof(" + T + ")));\n";
  s += "  if (chunk < 1) chunk = 1;\n  if (chunk > N) chunk = N;\n";
  s += "  " + T + " *col = 0, *tmp = 0;\n";
  s += "  if (!direct && N > 0) {\n";
  s += "    col = (" + T + " *)" + ctx + "->workspace(" + ctx + ", (size_t)(CKK * OHW * chunk) * sizeof(" + T + "));\n";
  s += "    if (chunk > 1) tmp = (" + T + " *)" + ctx + "->workspace(" + ctx + ", (size_t)(" + s64(mg) +
       " * OHW * chunk) * sizeof(" + T + "));\n";
  s += "    if (!col || (chunk > 1 && !tmp)) " + sub.fail +
       "(\"conv: out of memory for the im2col buffer (%lld bytes)\", (long long)(CKK * OHW * chunk * sizeof(" + T + ")));\n";
  s += "  }\n";
  const bool has_bias = node.inputs.size() == 3;
  const std::string bias_at =
      has_bias ? "((const " + T + " *)" + names.inputs[2] + "->data)[(grp * " + s64(mg) + " + oc) * " + names.inputs[2] + "->strides[0]]"
               : "(" + T + ")0";
  s += "  for (int64_t n0 = 0; n0 < N; n0 += chunk) {\n";
  s += "    const int64_t nb = N - n0 < chunk ? N - n0 : chunk;\n";
  s += "    for (int64_t grp = 0; grp < " + s64(group_) + "; ++grp) {\n";
  s += "      const " + T + " *B = col;\n";
  s += "      for (int64_t i = 0; i < nb; ++i) {\n";
  s += "        const " + T + " *xg = (const " + T + " *)" + x + "->data + (n0 + i) * " + x + "->strides[0] + grp * " +
       s64(cg) + " * " + x + "->strides[1];\n";
  s += "        if (direct) B = xg;\n";
  s += "        else kiln_im2col_" + S + "(xg, " + s64(cg) + ", " + x + "->strides[1], " + sy + ", " + sx +
       ", &g, col + i * OHW, nb * OHW);\n";
  s += "      }\n";
  s += "      " + T + " *Y = (" + T + " *)" + y + "->data + (n0 * " + s64(m) + " + grp * " + s64(mg) + ") * OHW;\n";
  s += "      if (nb == 1) {\n";
  if (has_bias) {
    s += "        for (int64_t oc = 0; oc < " + s64(mg) + "; ++oc) {\n";
    s += "          const " + T + " bv = " + bias_at + ";\n";
    s += "          for (int64_t j = 0; j < OHW; ++j) Y[oc * OHW + j] = bv;\n        }\n";
  }
  s += "        if (" + gemm + "(" + ctx + ", " + s64(mg) + ", OHW, CKK, 1, W + grp * " + s64(mg) +
       " * CKK, CKK, 1, B, OHW, 1, " + (has_bias ? "1" : "0") + ", Y, OHW)) " + sub.fail +
       "(\"conv: gemm failed\");\n";
  s += "        continue;\n      }\n";
  s += "      if (" + gemm + "(" + ctx + ", " + s64(mg) + ", nb * OHW, CKK, 1, W + grp * " + s64(mg) +
       " * CKK, CKK, 1, col, nb * OHW, 1, 0, tmp, nb * OHW)) " + sub.fail + "(\"conv: gemm failed\");\n";
  s += "      for (int64_t i = 0; i < nb; ++i)\n";
  s += "        for (int64_t oc = 0; oc < " + s64(mg) + "; ++oc) {\n";
  s += "          const " + T + " bv = " + bias_at + ";\n";
  s += "          const " + T + " *src = tmp + oc * nb * OHW + i * OHW;\n";
  s += "          " + T + " *dst = Y + (i * " + s64(m) + " + oc) * OHW;\n";
  s += "          for (int64_t j = 0; j < OHW; ++j) dst[j] = src[j] + bv;\n";
  s += "        }\n";
  s += "    }\n  }\n}\n";
  return s;
}

std::string Conv::c_support_code_apply(const Node& node, const std::string&) const {
  return gemm_support_code(node.inputs[0]->type.dtype);
}

}  // namespace kiln
