#include "ops/grad/window_ops.h"

#include <algorithm>

#include "ops/c/workspace.h"
#include "util/error.h"
#include "util/strings.h"

namespace kiln {
namespace {

// Elements of the per-part buffer that holds a chunk of dY rows and im2col columns: about
// half a core's L2, so the dot products re-read both from cache.
constexpr int64_t kWgradChunk = 32768;
// The least depth (positions) of a chunk's product; see ConvWeightGrad::c_code.
constexpr int64_t kWgradDepth = 256;

void require_float_window(const TensorType& x, const std::string& op, const std::string& what) {
  if (x.dtype != DType::kFloat32 && x.dtype != DType::kFloat64) {
    throw UnsupportedError(op + ": " + what + " " + x.to_string() +
                           " (float32 and float64 are supported)");
  }
  if (x.rank() != 3 && x.rank() != 4) {
    throw UnsupportedError(op + ": rank-" + std::to_string(x.rank()) + " " + what +
                           " (1-D and 2-D windows are supported)");
  }
  for (int d = 1; d < x.rank(); ++d) {
    if (x.dims[static_cast<size_t>(d)] == kDynamic) {
      throw UnsupportedError(op + ": channel and spatial dimensions must be static, got " + what +
                             " " + x.to_string());
    }
  }
}

// The C expressions of a tensor's element strides over (n, c, y, x); 1-D has no y.
struct PlaneStrides {
  std::string n, c, y, x;
};
PlaneStrides plane_strides(const std::string& t, bool one_d) {
  return {t + "->strides[0]", t + "->strides[1]", one_d ? "0" : t + "->strides[2]",
          t + "->strides[" + std::string(one_d ? "2" : "3") + "]"};
}

std::vector<WindowDims> as_2d(std::vector<WindowDims> g) {
  if (g.size() == 1) g.insert(g.begin(), WindowDims{1, 1, 1, 1, 0, 0, 1});
  return g;
}

}  // namespace

// ---- max_pool_grad ------------------------------------------------------------------------

MaxPoolGrad::MaxPoolGrad(Attrs props) : COp("max_pool_grad", std::move(props)) {
  check_known_attrs(this->props(),
                    {"kernel_shape", "strides", "dilations", "pads", "auto_pad", "ceil_mode"});
  window_ = WindowAttrs::from_props(this->props(), name());
  if (window_.kernel.empty()) throw AttrError("kernel_shape", "is required");
}

std::vector<WindowDims> MaxPoolGrad::geometry(const std::vector<int64_t>& x) const {
  return resolve_window(window_, std::vector<int64_t>(x.begin() + 2, x.end()), window_.kernel,
                        name());
}

std::vector<TensorType> MaxPoolGrad::infer_type(const std::vector<TensorType>& inputs) const {
  if (inputs.size() != 3) throw UserError(name() + " takes 3 inputs (X, Y, dY)");
  const TensorType& x = inputs[0];
  require_float_window(x, name(), "input");
  std::vector<int64_t> pooled{x.dims[0], x.dims[1]};
  for (const auto& g : geometry(x.dims)) pooled.push_back(g.out);
  for (size_t k = 1; k < 3; ++k) {
    const TensorType& t = inputs[k];
    bool fits = t.dtype == x.dtype && t.rank() == x.rank();
    for (size_t d = 0; fits && d < pooled.size(); ++d) {
      fits = t.dims[d] == pooled[d] || t.dims[d] == kDynamic || pooled[d] == kDynamic;
    }
    if (!fits) {
      throw UserError(name() + ": " + std::string(k == 1 ? "pooled output" : "output gradient") +
                      " " + t.to_string() + " does not match the pooling of " + x.to_string());
    }
  }
  return {x};
}

std::vector<Shape> MaxPoolGrad::infer_shape(const std::vector<Shape>& inputs) const {
  Shape pooled{inputs[0][0], inputs[0][1]};
  for (const auto& g : geometry(inputs[0])) pooled.push_back(g.out);
  for (size_t k = 1; k < 3; ++k) {
    if (inputs[k] != pooled) {
      throw UserError(name() + ": input " + std::to_string(k) + " has shape " +
                      dims_to_string(inputs[k]) + ", the pooling of " + dims_to_string(inputs[0]) +
                      " gives " + dims_to_string(pooled));
    }
  }
  return {inputs[0]};
}

void MaxPoolGrad::perform(const std::vector<Tensor>& inputs, std::vector<Tensor>& outputs) const {
  const Tensor &x = inputs[0], &y = inputs[1], &dy = inputs[2];
  Tensor& dx = outputs[0];
  const auto g = as_2d(geometry(x.shape()));
  const int64_t planes = x.shape()[0] * x.shape()[1], h = g[0].in, w = g[1].in;
  for (int64_t i = 0; i < dx.numel(); ++i) dx.store(i, 0.0);
  for (int64_t p = 0, flat = 0; p < planes; ++p) {
    for (int64_t oy = 0; oy < g[0].out; ++oy) {
      for (int64_t ox = 0; ox < g[1].out; ++ox, ++flat) {
        const double target = y.load(flat);
        bool found = false;
        for (int64_t i = 0; i < g[0].kernel && !found; ++i) {
          const int64_t yy = oy * g[0].stride - g[0].pad_begin + i * g[0].dilation;
          if (yy < 0 || yy >= h) continue;
          for (int64_t j = 0; j < g[1].kernel && !found; ++j) {
            const int64_t xx = ox * g[1].stride - g[1].pad_begin + j * g[1].dilation;
            if (xx < 0 || xx >= w) continue;
            const int64_t at = (p * h + yy) * w + xx;
            if (x.load(at) == target) {
              dx.store(at, dx.load(at) + dy.load(flat));
              found = true;
            }
          }
        }
      }
    }
  }
}

std::string MaxPoolGrad::c_code(const Node& node, const CodeNames& names, const Sub& sub) const {
  const auto& xt = node.inputs[0]->type;
  const std::string T = xt.dtype == DType::kFloat32 ? "float" : "double";
  const auto geo = geometry(xt.dims);
  const bool one_d = geo.size() == 1;
  const std::string& ctx = sub.ctx;
  const PlaneStrides xs = plane_strides(names.inputs[0], one_d),
                     ys = plane_strides(names.inputs[1], one_d),
                     gs = plane_strides(names.inputs[2], one_d);
  auto at = [](const std::string& t, const PlaneStrides& s, const std::string& yy,
               const std::string& xx) {
    return t + "[" + yy + " * " + s.y + " + " + xx + " * " + s.x + "]";
  };
  // Each part zeroes and fills a contiguous range of (n, c) planes of dX.
  std::string s = "{\n";
  s += "  const kiln_window g = " + window_c_init(geo, sub) + ";\n";
  s += "  const int64_t C = " + names.inputs[0] + "->shape[1], planes = " + names.inputs[0] +
       "->shape[0] * C, hw = g.h * g.w;\n";
  s += "  const int64_t lo = planes * " + ctx + "->part / " + ctx + "->n_parts;\n";
  s += "  const int64_t hi = planes * (" + ctx + "->part + 1) / " + ctx + "->n_parts;\n";
  s += "  for (int64_t p = lo; p < hi; ++p) {\n";
  s += "    const int64_t n = p / C, c = p % C;\n";
  s += "    const " + T + " *xp = (const " + T + " *)" + names.inputs[0] + "->data + n * " + xs.n +
       " + c * " + xs.c + ";\n";
  s += "    const " + T + " *yp = (const " + T + " *)" + names.inputs[1] + "->data + n * " + ys.n +
       " + c * " + ys.c + ";\n";
  s += "    const " + T + " *gp = (const " + T + " *)" + names.inputs[2] + "->data + n * " + gs.n +
       " + c * " + gs.c + ";\n";
  s += "    " + T + " *dp = (" + T + " *)" + names.outputs[0] + "->data + p * hw;\n";
  s += "    for (int64_t i = 0; i < hw; ++i) dp[i] = 0;\n";
  s += "    for (int64_t oy = 0; oy < g.oh; ++oy) {\n";
  s += "      for (int64_t ox = 0; ox < g.ow; ++ox) {\n";
  // The taps run backwards and keep the last match: the first maximum, without the
  // data-dependent branch that mispredicts on every other window.
  s += "        const " + T + " target = " + at("yp", ys, "oy", "ox") + ";\n";
  s += "        int64_t best = -1;\n";
  s += "        for (int64_t i = g.kh - 1; i >= 0; --i) {\n";
  s += "          const int64_t yy = oy * g.sh - g.ph + i * g.dh;\n";
  s += "          if (yy < 0 || yy >= g.h) continue;\n";
  s += "          for (int64_t j = g.kw - 1; j >= 0; --j) {\n";
  s += "            const int64_t xx = ox * g.sw - g.pw + j * g.dw;\n";
  s += "            if (xx < 0 || xx >= g.w) continue;\n";
  s += "            best = " + at("xp", xs, "yy", "xx") + " == target ? yy * g.w + xx : best;\n";
  s += "          }\n";
  s += "        }\n";
  s += "        if (best >= 0) dp[best] += " + at("gp", gs, "oy", "ox") + ";\n";
  s += "      }\n";
  s += "    }\n";
  s += "  }\n";
  s += "}\n";
  return s;
}

// ---- conv_weight_grad ---------------------------------------------------------------------

ConvWeightGrad::ConvWeightGrad(Attrs props) : COp("conv_weight_grad", std::move(props)) {
  check_known_attrs(this->props(), {"group", "kernel_shape", "strides", "dilations", "pads",
                                    "auto_pad", "slices", "sliced"});
  window_ = WindowAttrs::from_props(this->props(), name());
  if (window_.kernel.empty()) throw AttrError("kernel_shape", "is required");
  group_ = attr_int(this->props(), "group", 1);
  if (group_ < 1) throw AttrError("group", "must be >= 1");
  slices_ = attr_int(this->props(), "slices", 1);
  if (slices_ < 1) throw AttrError("slices", "must be >= 1");
  sliced_ = attr_int(this->props(), "sliced", 1) != 0;
  if (!sliced_ && slices_ != 1) throw AttrError("sliced", "0 (dW itself) takes slices 1");
}

std::vector<WindowDims> ConvWeightGrad::geometry(const std::vector<int64_t>& x) const {
  return resolve_window(window_, std::vector<int64_t>(x.begin() + 2, x.end()), window_.kernel,
                        name());
}

std::vector<TensorType> ConvWeightGrad::infer_type(const std::vector<TensorType>& inputs) const {
  if (inputs.size() != 2) throw UserError(name() + " takes 2 inputs (X, dY)");
  const TensorType &x = inputs[0], &dy = inputs[1];
  require_float_window(x, name(), "input");
  require_float_window(dy, name(), "output gradient");
  const auto geo = geometry(x.dims);
  bool fits = dy.dtype == x.dtype && dy.rank() == x.rank() &&
              (dy.dims[0] == x.dims[0] || dy.dims[0] == kDynamic || x.dims[0] == kDynamic);
  for (size_t i = 0; fits && i < geo.size(); ++i) fits = dy.dims[i + 2] == geo[i].out;
  if (!fits) {
    throw UserError(name() + ": output gradient " + dy.to_string() +
                    " does not match the convolution of " + x.to_string());
  }
  const int64_t c = x.dims[1], m = dy.dims[1];
  if (c % group_ != 0 || m % group_ != 0) {
    throw UserError(name() + ": " + std::to_string(c) + " input and " + std::to_string(m) +
                    " output channels do not divide into group " + std::to_string(group_));
  }
  TensorType out{x.dtype, {slices_, m, c / group_}};
  for (const auto& g : geo) out.dims.push_back(g.kernel);
  if (!sliced_) out.dims.erase(out.dims.begin());
  return {out};
}

std::vector<Shape> ConvWeightGrad::infer_shape(const std::vector<Shape>& inputs) const {
  if (inputs[1][0] != inputs[0][0]) {
    throw UserError(name() + ": output gradient " + dims_to_string(inputs[1]) + " and input " +
                    dims_to_string(inputs[0]) + " differ in batch");
  }
  Shape out{slices_, inputs[1][1], inputs[0][1] / group_};
  for (const auto& g : geometry(inputs[0])) out.push_back(g.kernel);
  if (!sliced_) out.erase(out.begin());
  return {out};
}

double ConvWeightGrad::flops(const std::vector<Shape>& inputs,
                             const std::vector<Shape>& outputs) const {
  // A multiply-add per weight element, image and output position.
  double positions = static_cast<double>(inputs[1][0]);
  for (size_t d = 2; d < inputs[1].size(); ++d) positions *= static_cast<double>(inputs[1][d]);
  return 2.0 * positions * static_cast<double>(shape_numel(outputs.at(0))) /
         static_cast<double>(slices_);
}

void ConvWeightGrad::perform(const std::vector<Tensor>& inputs,
                             std::vector<Tensor>& outputs) const {
  const Tensor &x = inputs[0], &dy = inputs[1];
  Tensor& dw = outputs[0];
  const auto g = as_2d(geometry(x.shape()));
  const int64_t batch = x.shape()[0], c = x.shape()[1], m = dy.shape()[1];
  const int64_t cg = c / group_, mg = m / group_;
  const int64_t h = g[0].in, w = g[1].in, oh = g[0].out, ow = g[1].out, rows = batch * oh;
  int64_t flat = 0;
  for (int64_t sl = 0; sl < slices_; ++sl) {
    // Slice sl sums the output rows (n, oy) of [rows * sl / S, rows * (sl + 1) / S).
    const int64_t r_lo = rows * sl / slices_, r_hi = rows * (sl + 1) / slices_;
    for (int64_t oc = 0; oc < m; ++oc) {
      for (int64_t ci = 0; ci < cg; ++ci) {
        const int64_t ch = oc / mg * cg + ci;
        for (int64_t i = 0; i < g[0].kernel; ++i) {
          for (int64_t j = 0; j < g[1].kernel; ++j, ++flat) {
            double acc = 0;
            for (int64_t r = r_lo; r < r_hi; ++r) {
              const int64_t n = r / oh, oy = r % oh;
              const int64_t yy = oy * g[0].stride - g[0].pad_begin + i * g[0].dilation;
              if (yy < 0 || yy >= h) continue;
              for (int64_t ox = 0; ox < ow; ++ox) {
                const int64_t xx = ox * g[1].stride - g[1].pad_begin + j * g[1].dilation;
                if (xx < 0 || xx >= w) continue;
                acc += dy.load(((n * m + oc) * oh + oy) * ow + ox) *
                       x.load(((n * c + ch) * h + yy) * w + xx);
              }
            }
            dw.store(flat, acc);
          }
        }
      }
    }
  }
}

std::string ConvWeightGrad::c_support_code() const {
  // A unit's rows of dW gain A B^T (A: dY rows, m x len; B: the im2col'd input, n x len) as
  // one GEMM on kiln's packed kernel, B^T written into its panels, in this part's thread.
  // (A kernel of dot products was load-bound, 4.3x Inductor's time on a ResNet-18 training
  // step; OpenBLAS, called from each split part, started threads of its own beside the
  // engine's: four on two cores, 37 GF/s on ResNet-18's 3x3 512-channel layers.)
  std::string s =
      "#define kiln_gemm_packed_f32 (KILN_SUPPORT->gemm_packed_f32)\n"
      "#define kiln_gemm_packed_f64 (KILN_SUPPORT->gemm_packed_f64)\n";
  // The im2col'd input written straight into the packed kernel's panels: tap row r (channel
  // c, tap t) is panel r / P's lane r % P, a position a row of the panel. A table of each
  // tap's input offset at each position (-1: the padding), the same for every channel, makes
  // a small image's rows (2 positions in ResNet-18's last stage at 64x64) a gather without
  // the bounds arithmetic of a row at a time, and no B matrix is written and read again.
  for (const char* t : {"float", "double"}) {
    const std::string T = t, S = T == "float" ? "f32" : "f64";
    s += "__attribute__((unused)) static void kiln_wgrad_cols_" + S + "(const " + T +
         " *x, int64_t cg, int64_t sc, int64_t sy, int64_t sx, const kiln_window *g, " + T +
         " *bp, int64_t len, int64_t P, int64_t at, int64_t *tab) {\n";
    s += "  const int64_t taps = g->kh * g->kw, npos = g->oh * g->ow;\n";
    s += "  kiln_window_offsets(g, sy, sx, tab);\n";
    s += "  for (int64_t c = 0; c < cg; ++c) {\n";
    s += "    const " + T + " *xc = x + c * sc;\n";
    s += "    for (int64_t t = 0; t < taps; ++t) {\n";
    s += "      const int64_t r = c * taps + t;\n";
    s += "      " + T + " *dst = bp + r / P * len * P + r % P + at * P;\n";
    s += "      const int64_t *tt = tab + t * npos;\n";
    s += "      for (int64_t q = 0; q < npos; ++q) dst[q * P] = tt[q] >= 0 ? xc[tt[q]] : (" + T +
         ")0;\n";
    s += "    }\n";
    s += "  }\n";
    s += "}\n";
  }
  return s;
}

// Parts take units of (slice, block of each group's output channels). A unit walks its
// slice's output rows in chunks (spanning images): per group, the block's dY rows side by
// side (A, rows x len) and the group's channels im2col'd (B, cg*taps x len), and its rows of
// dW gain A B^T. Slices need no im2col twice; blocks (when there are few slices, for a big
// dW) re-im2col per block, a small cost beside the many output channels that make dW big.
std::string ConvWeightGrad::c_code(const Node& node, const CodeNames& names, const Sub& sub) const {
  const auto& xt = node.inputs[0]->type;
  const bool f32 = xt.dtype == DType::kFloat32;
  const std::string T = f32 ? "float" : "double", S = f32 ? "f32" : "f64";
  const auto geo = geometry(xt.dims);
  const bool one_d = geo.size() == 1;
  const int64_t c = xt.dims[1], m = node.inputs[1]->type.dims[1];
  const int64_t cg = c / group_, mg = m / group_;
  int64_t taps = 1;
  for (const auto& d : geo) taps *= d.kernel;
  const int64_t blocks = slices_ >= 8 ? 1 : std::clamp<int64_t>((8 + slices_ - 1) / slices_, 1, mg);
  const int64_t rows_max = (mg + blocks - 1) / blocks;
  const std::string& X = names.inputs[0];
  const std::string& D = names.inputs[1];
  const std::string& ctx = sub.ctx;
  const PlaneStrides xs = plane_strides(X, one_d), ds = plane_strides(D, one_d);
  auto v = [&](int64_t n, std::string_view name) { return sub.value(n, name); };
  std::string s = "{\n";
  s += "  const kiln_window g = " + window_c_init(geo, sub) + ";\n";
  s += "  const int64_t cg = " + v(cg, "cg") + ", mg = " + v(mg, "mg") + ", groups = " + v(group_, "groups") +
       ", taps = " + v(taps, "taps") + ", ck = cg * taps;\n";
  s += "  const int64_t slices = " + v(slices_, "slices") + ", blocks = " + v(blocks, "blocks") +
       ", rows_max = " + v(rows_max, "rows_max") + ";\n";
  s += "  const int64_t nrows = " + X + "->shape[0] * g.oh, units = slices * blocks;\n";
  s += "  const int64_t u0 = units * " + ctx + "->part / " + ctx + "->n_parts;\n";
  s += "  const int64_t u1 = units * (" + ctx + "->part + 1) / " + ctx + "->n_parts;\n";
  // Output rows per chunk: the chunk's A and B fill the budget, but the product's depth (the
  // chunk's positions) stays at least kWgradDepth: each chunk reads and writes the unit's rows
  // of dW, so a shallow one (6 positions of a 3x3 512-channel layer) moved all of dW 6 times.
  s += "  int64_t rb = " + v(kWgradChunk, "chunk") + " / ((rows_max + ck) * g.ow);\n";
  s += "  const int64_t rb_min = (" + v(kWgradDepth, "depth") + " + g.ow - 1) / g.ow;\n";
  s += "  if (rb < rb_min) rb = rb_min;\n";
  s += "  if (rb > nrows) rb = nrows;\n";
  s += "  if (rb < 1) rb = 1;\n";
  s += "  const int64_t P = KILN_GEMM_PANEL_BYTES / (int64_t)sizeof(" + T + ");\n";
  s += "  const int64_t npanels = (ck + P - 1) / P;\n";
  s += "  " + T + " *dw = (" + T + " *)" + names.outputs[0] + "->data;\n";
  s += "  " + T + " *A = NULL, *bp = NULL;\n";
  s += "  int64_t *tab = NULL;\n";
  // The offsets table first (int64 aligned), then A, then the panels.
  s += "  const int64_t tab_elems = (taps * rb * g.ow * 8 + sizeof(" + T + ") - 1) / sizeof(" + T +
       ");\n";
  s += "  if (u0 < u1 && nrows > 0) {\n";
  s += "    " + T + " *ws = NULL;\n";
  s += "KILN_WORKSPACE(ws, tab_elems + (rows_max + npanels * P) * rb * g.ow, \"the conv weight "
       "gradient's chunk\");\n";
  s += "    tab = (int64_t *)ws;\n";
  s += "    A = ws + tab_elems;\n";
  s += "    bp = A + rows_max * rb * g.ow;\n";
  s += "  }\n";
  s += "  for (int64_t u = u0; u < u1; ++u) {\n";
  s += "    const int64_t sl = u / blocks, b = u % blocks;\n";
  s += "    const int64_t r_lo = nrows * sl / slices, r_hi = nrows * (sl + 1) / slices;\n";
  s += "    " + T + " *dws = dw + sl * groups * mg * ck;\n";
  s += "    for (int64_t gi = 0; gi < groups; ++gi) {\n";
  s +=
      "      const int64_t m0 = gi * mg + b * mg / blocks, m1 = gi * mg + (b + 1) * mg / blocks;\n";
  // The first chunk's product writes the unit's rows of dW (beta 0), later ones add to them.
  s += "      if (r_lo == r_hi)\n";
  s += "        for (int64_t j = m0 * ck; j < m1 * ck; ++j) dws[j] = 0;\n";
  s += "      if (m0 == m1) continue;\n";
  s += "      for (int64_t r0 = r_lo; r0 < r_hi; r0 += rb) {\n";
  s += "        const int64_t r1 = r0 + rb < r_hi ? r0 + rb : r_hi, len = (r1 - r0) * g.ow;\n";
  s += "        int64_t at = 0;\n";
  s += "        for (int64_t r = r0; r < r1;) {\n";
  s += "          const int64_t n = r / g.oh, oy0 = r % g.oh;\n";
  s += "          const int64_t oy1 = oy0 + (r1 - r) < g.oh ? oy0 + (r1 - r) : g.oh;\n";
  // The columns of output rows [oy0, oy1): the same window with its rows shifted by oy0.
  s += "          kiln_window gs = g;\n";
  s += "          gs.ph = g.ph - oy0 * g.sh;\n";
  s += "          gs.oh = oy1 - oy0;\n";
  s += "          kiln_wgrad_cols_" + S + "((const " + T + " *)" + X + "->data + n * " + xs.n +
       " + gi * cg * " + xs.c + ", cg, " + xs.c + ", " + xs.y + ", " + xs.x +
       ", &gs, bp, len, P, at, tab);\n";
  s += "          for (int64_t mo = m0; mo < m1; ++mo) {\n";
  s += "            const " + T + " *src = (const " + T + " *)" + D + "->data + n * " + ds.n +
       " + mo * " + ds.c + ";\n";
  s += "            " + T + " *dst = A + (mo - m0) * len + at;\n";
  s += "            for (int64_t oy = oy0; oy < oy1; ++oy)\n";
  s += "              for (int64_t ox = 0; ox < g.ow; ++ox)\n";
  s +=
      "                dst[(oy - oy0) * g.ow + ox] = src[oy * " + ds.y + " + ox * " + ds.x + "];\n";
  s += "          }\n";
  s += "          at += (oy1 - oy0) * g.ow;\n";
  s += "          r += oy1 - oy0;\n";
  s += "        }\n";
  // The last panel's lanes past the taps multiply as zeros.
  s += "        for (int64_t r = ck; r < npanels * P; ++r)\n";
  s += "          for (int64_t q = 0; q < len; ++q) bp[(npanels - 1) * len * P + q * P + r % P] = "
       "0;\n";
  s += "        kiln_gemm_packed_" + S +
       "(m1 - m0, ck, len, 1, A, len, 1, bp, r0 == r_lo ? 0 : 1, dws + m0 * ck, ck, "
       "NULL, 0, 0, -(" +
       T + ")__builtin_inf(), (" + T + ")__builtin_inf());\n";
  s += "      }\n";
  s += "    }\n";
  s += "  }\n";
  s += "}\n";
  return s;
}

// ---- conv_input_grad ----------------------------------------------------------------------

ConvInputGrad::ConvInputGrad(Attrs props) : COp("conv_input_grad", std::move(props)) {
  check_known_attrs(this->props(), {"group", "kernel_shape", "strides", "dilations", "pads",
                                    "auto_pad", "input_shape"});
  window_ = WindowAttrs::from_props(this->props(), name());
  group_ = attr_int(this->props(), "group", 1);
  if (group_ < 1) throw AttrError("group", "must be >= 1");
  input_ = attr_ints(this->props(), "input_shape", std::vector<int64_t>{});
  if (input_.empty() || input_.size() > 2) {
    throw AttrError("input_shape", "must give 1 or 2 spatial sizes (1-D and 2-D windows)");
  }
  for (int64_t d : input_) {
    if (d < 1) throw AttrError("input_shape", "sizes must be >= 1");
  }
}

std::vector<WindowDims> ConvInputGrad::geometry(const std::vector<int64_t>& w) const {
  return resolve_window(window_, input_, std::vector<int64_t>(w.begin() + 2, w.end()), name());
}

std::vector<TensorType> ConvInputGrad::infer_type(const std::vector<TensorType>& inputs) const {
  if (inputs.size() != 2) throw UserError(name() + " takes 2 inputs (dY, W)");
  const TensorType &dy = inputs[0], &w = inputs[1];
  require_float_window(dy, name(), "output gradient");
  require_float_window(w, name(), "weight");
  if (w.dtype != dy.dtype || w.rank() != dy.rank() ||
      w.rank() != static_cast<int>(input_.size()) + 2) {
    throw UserError(name() + ": weight " + w.to_string() + " does not fit output gradient " +
                    dy.to_string() + " and input_shape of " + std::to_string(input_.size()) +
                    " sizes");
  }
  const auto geo = geometry(w.dims);
  bool fits = dy.dims[1] == w.dims[0] && w.dims[0] % group_ == 0;
  for (size_t i = 0; fits && i < geo.size(); ++i) fits = dy.dims[i + 2] == geo[i].out;
  if (!fits) {
    throw UserError(name() + ": output gradient " + dy.to_string() + " is not the convolution by " +
                    w.to_string() + " (group " + std::to_string(group_) +
                    ") of an input of spatial sizes " + dims_to_string(input_));
  }
  TensorType out{dy.dtype, {dy.dims[0], w.dims[1] * group_}};
  out.dims.insert(out.dims.end(), input_.begin(), input_.end());
  return {out};
}

std::vector<Shape> ConvInputGrad::infer_shape(const std::vector<Shape>& inputs) const {
  Shape out{inputs[0][0], inputs[1][1] * group_};
  out.insert(out.end(), input_.begin(), input_.end());
  return {out};
}

double ConvInputGrad::flops(const std::vector<Shape>& inputs,
                            const std::vector<Shape>& outputs) const {
  // A multiply-add per weight element and output position.
  double positions = static_cast<double>(inputs[0][0]);
  for (size_t d = 2; d < inputs[0].size(); ++d) positions *= static_cast<double>(inputs[0][d]);
  return 2.0 * positions * static_cast<double>(shape_numel(inputs[1]));
}

void ConvInputGrad::perform(const std::vector<Tensor>& inputs, std::vector<Tensor>& outputs) const {
  const Tensor &dy = inputs[0], &w = inputs[1];
  Tensor& dx = outputs[0];
  const auto g = as_2d(geometry(w.shape()));
  const int64_t batch = dy.shape()[0], m = dy.shape()[1], cg = w.shape()[1], mg = m / group_;
  const int64_t c = cg * group_, h = g[0].in, wd = g[1].in, oh = g[0].out, ow = g[1].out;
  const int64_t kh = g[0].kernel, kw = g[1].kernel;
  std::vector<double> acc(static_cast<size_t>(dx.numel()), 0.0);
  for (int64_t n = 0; n < batch; ++n)
    for (int64_t oc = 0; oc < m; ++oc)
      for (int64_t ci = 0; ci < cg; ++ci) {
        const int64_t ch = oc / mg * cg + ci;
        for (int64_t i = 0; i < kh; ++i)
          for (int64_t j = 0; j < kw; ++j) {
            const double wv = w.load(((oc * cg + ci) * kh + i) * kw + j);
            for (int64_t oy = 0; oy < oh; ++oy) {
              const int64_t yy = oy * g[0].stride - g[0].pad_begin + i * g[0].dilation;
              if (yy < 0 || yy >= h) continue;
              for (int64_t ox = 0; ox < ow; ++ox) {
                const int64_t xx = ox * g[1].stride - g[1].pad_begin + j * g[1].dilation;
                if (xx < 0 || xx >= wd) continue;
                acc[static_cast<size_t>(((n * c + ch) * h + yy) * wd + xx)] +=
                    wv * dy.load(((n * m + oc) * oh + oy) * ow + ox);
              }
            }
          }
      }
  for (int64_t i = 0; i < dx.numel(); ++i) dx.store(i, acc[static_cast<size_t>(i)]);
}

std::string ConvInputGrad::c_support_code() const {
  return "#define kiln_gemm_packed_f32 (KILN_SUPPORT->gemm_packed_f32)\n"
         "#define kiln_gemm_packed_f64 (KILN_SUPPORT->gemm_packed_f64)\n";
}

// A part takes a run of input channels and all images, in chunks of images: per group it
// touches, the group's dY rows as the packed kernel's panels (B: mg x the chunk's
// positions), the product W^T B for its channels' taps (A = W read with strides (1, ck):
// row (c, t) of W^T is column c * taps + t of W) into a scratch matrix, then each row added
// onto dX at its tap's input positions through a table of offsets (-1: the padding).
std::string ConvInputGrad::c_code(const Node& node, const CodeNames& names, const Sub& sub) const {
  const auto& dyt = node.inputs[0]->type;
  const auto& wt = node.inputs[1]->type;
  const bool f32 = dyt.dtype == DType::kFloat32;
  const std::string T = f32 ? "float" : "double", S = f32 ? "f32" : "f64";
  const auto geo = geometry(wt.dims);
  const bool one_d = geo.size() == 1;
  const int64_t m = wt.dims[0], cg = wt.dims[1], mg = m / group_;
  int64_t taps = 1;
  for (const auto& d : geo) taps *= d.kernel;
  const std::string &D = names.inputs[0], &Wt = names.inputs[1], &X = names.outputs[0];
  const PlaneStrides ds = plane_strides(D, one_d), xs = plane_strides(X, one_d);
  const std::string& ctx = sub.ctx;
  auto v = [&](int64_t n, std::string_view name) { return sub.value(n, name); };
  std::string s = "{\n";
  s += "  const kiln_window g = " + window_c_init(geo, sub) + ";\n";
  s += "  const int64_t cg = " + v(cg, "cg") + ", mg = " + v(mg, "mg") +
       ", taps = " + v(taps, "taps") + ", ck = cg * taps, C = cg * " + v(group_, "groups") + ";\n";
  s += "  const int64_t batch = " + D + "->shape[0], ohw = g.oh * g.ow;\n";
  s += "  const int64_t c0 = C * " + ctx + "->part / " + ctx + "->n_parts;\n";
  s += "  const int64_t c1 = C * (" + ctx + "->part + 1) / " + ctx + "->n_parts;\n";
  s += "  if (c0 < c1 && batch > 0) {\n";
  s += "    const int64_t P = KILN_GEMM_PANEL_BYTES / (int64_t)sizeof(" + T + ");\n";
  // Images per chunk: the panels and the product about 512 KB, at least a panel's worth.
  s += "    int64_t per = (524288 / (int64_t)sizeof(" + T +
       ")) / ((mg + (c1 - c0) * taps) * ohw);\n";
  s += "    if (per * ohw < P) per = (P + ohw - 1) / ohw;\n";
  s += "    if (per > batch) per = batch;\n";
  s += "    const int64_t cols = (per * ohw + P - 1) / P * P;\n";
  s += "    const int64_t span = (c1 - c0 < cg ? c1 - c0 : cg) * taps;\n";
  s += "    " + T + " *bp = NULL, *ct = NULL;\n";
  s += "    int64_t *tab = NULL;\n";
  s += c_workspace("int64_t", "tab_", "taps * ohw", "conv_input_grad's tap offsets");
  s += c_workspace(T, "bp_", "cols * mg + span * cols", "conv_input_grad's panels and product");
  s += "    tab = tab_;\n    bp = bp_;\n    ct = bp + cols * mg;\n";
  // W as one dense block (row (c, t) of W^T at stride 1, column m at stride ck): itself, or
  // a copy.
  s += "    const " + T + " *wd = (const " + T + " *)" + Wt + "->data;\n";
  s += "    int w_contig = 1;\n";
  s += "    {\n      int64_t cs = 1;\n";
  s += "      for (int d = " + std::to_string(wt.rank() - 1) + "; d >= 0; --d) {\n";
  s += "        if (" + Wt + "->shape[d] != 1 && " + Wt + "->strides[d] != cs) w_contig = 0;\n";
  s += "        cs *= " + Wt + "->shape[d];\n      }\n    }\n";
  s += "    if (!w_contig) {\n";
  s += c_workspace(T, "wcopy", v(m * cg * taps, "w_elems"), "conv_input_grad's weight");
  s += "      kiln_copy_strided(wcopy, " + Wt + "->data, " + std::to_string(wt.rank()) + ", " + Wt +
       "->shape, " + Wt + "->strides, sizeof(" + T + "));\n";
  s += "      wd = wcopy;\n";
  s += "    }\n";
  s += "    kiln_window_offsets(&g, " + xs.y + ", " + xs.x + ", tab);\n";
  s += "    for (int64_t n = 0; n < batch; ++n)\n";
  s += "      for (int64_t c = c0; c < c1; ++c) {\n";
  s += "        " + T + " *xp = (" + T + " *)" + X + "->data + n * " + xs.n + " + c * " + xs.c +
       ";\n";
  s += "        for (int64_t yy = 0; yy < g.h; ++yy)\n";
  s += "          for (int64_t xx = 0; xx < g.w; ++xx) xp[yy * " + xs.y + " + xx * " + xs.x +
       "] = 0;\n";
  s += "      }\n";
  s += "    for (int64_t n0 = 0; n0 < batch; n0 += per) {\n";
  s += "      const int64_t nn = batch - n0 < per ? batch - n0 : per, npos = nn * ohw;\n";
  s += "      for (int64_t ca = c0; ca < c1;) {\n";
  s += "        const int64_t grp = ca / cg;\n";
  s += "        const int64_t cb = (grp + 1) * cg < c1 ? (grp + 1) * cg : c1;\n";
  // B[mm][jc]: dY row grp * mg + mm at column jc = image i's position q.
  s += "        for (int64_t mm = 0; mm < mg; ++mm)\n";
  s += "          for (int64_t i = 0; i < nn; ++i) {\n";
  s += "            const " + T + " *src = (const " + T + " *)" + D + "->data + (n0 + i) * " +
       ds.n + " + (grp * mg + mm) * " + ds.c + ";\n";
  s += "            for (int64_t q = 0, jc = i * ohw; q < ohw; ++q, ++jc)\n";
  s += "              bp[jc / P * mg * P + mm * P + jc % P] = src[q / g.ow * " + ds.y +
       " + q % g.ow * " + ds.x + "];\n";
  s += "          }\n";
  s += "        for (int64_t jc = npos; jc % P; ++jc)\n";
  s += "          for (int64_t mm = 0; mm < mg; ++mm) bp[jc / P * mg * P + mm * P + jc % P] = 0;\n";
  s += "        const " + T + " *a = wd + grp * mg * ck + (ca - grp * cg) * taps;\n";
  s += "        kiln_gemm_packed_" + S + "((cb - ca) * taps, npos, mg, (" + T +
       ")1, a, 1, ck, bp, (" + T + ")0, ct, npos, NULL, 0, 0, -(" + T + ")__builtin_inf(), (" + T +
       ")__builtin_inf());\n";
  s += "        for (int64_t c = ca; c < cb; ++c)\n";
  s += "          for (int64_t i = 0; i < nn; ++i) {\n";
  s += "            " + T + " *xp = (" + T + " *)" + X + "->data + (n0 + i) * " + xs.n + " + c * " +
       xs.c + ";\n";
  s += "            for (int64_t t = 0; t < taps; ++t) {\n";
  s += "              const " + T + " *row = ct + ((c - ca) * taps + t) * npos + i * ohw;\n";
  s += "              const int64_t *tt = tab + t * ohw;\n";
  s += "              for (int64_t q = 0; q < ohw; ++q)\n";
  s += "                if (tt[q] >= 0) xp[tt[q]] += row[q];\n";
  s += "            }\n";
  s += "          }\n";
  s += "        ca = cb;\n";
  s += "      }\n";
  s += "    }\n";
  s += "  }\n";
  s += "}\n";
  return s;
}

}  // namespace kiln
