#include "ops/conv.h"

#include <algorithm>
#include <limits>

#include "ops/c/conv_pack.h"
#include "ops/c/gemm_pack.h"

#include "ops/c/workspace.h"
#include "util/error.h"
#include "util/strings.h"

namespace kiln {
namespace {
// The tile kernel reads up to KILN_CONV_SLACK (module_abi.h) elements past its buffer; the
// generated code names the macro, and this bound only sizes the 32-bit offset check.
constexpr int64_t kConvSlackBound = 1024;
}  // namespace

Conv::Conv(Attrs props) : COp("conv", std::move(props)) {
  check_known_attrs(this->props(), {"group", "kernel_shape", "strides", "dilations", "pads",
                                    "auto_pad", "packed_m"});
  window_ = WindowAttrs::from_props(this->props(), "conv");
  group_ = attr_int(this->props(), "group", 1);
  if (group_ < 1) throw AttrError("group", "must be >= 1");
  packed_m_ = attr_int(this->props(), "packed_m", 0);
  if (packed_m_ < 0) throw AttrError("packed_m", "must be >= 0");
  if (packed_m_ > 0 && (group_ != 1 || window_.kernel.empty())) {
    throw AttrError("packed_m", "takes group 1 and a kernel_shape");
  }
}

std::vector<int64_t> Conv::weight_dims(const std::vector<int64_t>& x,
                                       const std::vector<int64_t>& w) const {
  if (packed_m_ == 0) return w;
  int64_t taps = x.size() > 1 ? x[1] : 0;
  for (int64_t k : window_.kernel) taps *= k;
  const Shape want = conv_blocks_shape(packed_m_, taps);
  if (w != std::vector<int64_t>(want.begin(), want.end())) {
    throw UserError("conv: with packed_m=" + std::to_string(packed_m_) + ", W must be " +
                    dims_to_string(want) + " (blocks of " + std::to_string(kConvBlock) +
                    " output channels by " + std::to_string(taps) + " taps), got " +
                    dims_to_string(w));
  }
  std::vector<int64_t> d{packed_m_, x[1]};
  d.insert(d.end(), window_.kernel.begin(), window_.kernel.end());
  return d;
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
  if (x.dtype != DType::kFloat32 && x.dtype != DType::kFloat64) {
    throw UnsupportedError("conv: " + x.to_string() + " input (float32 and float64 are supported)");
  }
  if (x.rank() != 3 && x.rank() != 4) {
    throw UnsupportedError("conv: rank-" + std::to_string(x.rank()) +
                           " input (1-D and 2-D convolutions are supported)");
  }
  if (packed_m_ > 0 && (x.dims[1] == kDynamic || inputs[1].dtype != x.dtype)) {
    throw UserError("conv: a packed weight " + inputs[1].to_string() + " needs input " +
                    x.to_string() + " of static channels and its dtype");
  }
  const TensorType w{inputs[1].dtype, weight_dims(x.dims, inputs[1].dims)};
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
  const std::vector<int64_t> w = weight_dims(inputs[0], inputs[1]);
  if (inputs.size() == 3 && inputs[2][0] != w[0]) {
    throw UserError("conv: bias has " + std::to_string(inputs[2][0]) + " entries for " +
                    std::to_string(w[0]) + " output channels");
  }
  Shape out{inputs[0][0], w[0]};
  for (const auto& g : geometry(inputs[0], w)) out.push_back(g.out);
  return {out};
}

double Conv::flops(const std::vector<Shape>& inputs, const std::vector<Shape>& outputs) const {
  // Each output element: a multiply-add per input channel of its group and kernel tap.
  double taps = static_cast<double>(inputs[0][1] / group_);
  for (const auto& g : geometry(inputs[0], weight_dims(inputs[0], inputs[1]))) {
    taps *= static_cast<double>(g.kernel);
  }
  return 2.0 * taps * static_cast<double>(shape_numel(outputs.at(0)));
}

void Conv::perform(const std::vector<Tensor>& inputs, std::vector<Tensor>& outputs) const {
  const Tensor& x = inputs[0];
  const Tensor& w = inputs[1];
  Tensor& y = outputs[0];
  const std::vector<int64_t> wd_all = weight_dims(x.shape(), w.shape());
  auto g = geometry(x.shape(), wd_all);
  if (g.size() == 1) g.insert(g.begin(), WindowDims{1, 1, 1, 1, 0, 0, 1});
  const int64_t n_batch = x.shape()[0], c = x.shape()[1], m = wd_all[0];
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
                const int64_t t = (ic * kh + i) * kw + j;
                const int64_t wi =
                    packed_m_ > 0 ? conv_blocks_index(oc, t, cg * kh * kw) : oc * cg * kh * kw + t;
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

namespace {

// Positions per split unit of a packed 1x1 convolution: two of the AVX2 kernel's groups of
// 6 (conv_blocks.c), which the gather lays out one after another.
constexpr int64_t kGatherGroup = 6;
constexpr int64_t kPackedPositionUnit = 2 * kGatherGroup;

// Output rows per column unit of a split: enough padded-row positions (rows x wq) that the
// tile kernel's vector blocks stay full, in near-equal units over the output's rows. A big
// image takes fine units (at least 48 positions), so parts of many units come out even. A
// small one (under 1536 positions, 38 x 38) with channels for four row blocks takes coarse
// ones (192: four whole vector blocks), so a part is not mostly a partial block and the
// split goes by output channels instead (14 x 14 3x3 convolutions: 290 -> 360 GFLOP/s);
// with fewer channels the positions are all there is to split.

int64_t rows_per_unit(int64_t oh, int64_t wq, int64_t row_blocks) {
  const int64_t grain = oh * wq >= 1536 || row_blocks < 4 ? 48 : 192;
  const int64_t units = std::max<int64_t>(1, oh * wq / grain);
  return (oh + units - 1) / units;
}

}  // namespace

Conv::Plan Conv::plan(const Node& node) const {
  const auto& xt = node.inputs[0]->type;
  const std::vector<int64_t> wd = weight_dims(xt.dims, node.inputs[1]->type.dims);
  Plan p;
  p.g = geometry(xt.dims, wd);
  p.one_d = p.g.size() == 1;
  p.packed = packed_m_ > 0;
  p.window_1x1 = true;
  for (const auto& d : p.g) p.window_1x1 &= d.kernel == 1 && d.pad_begin == 0 && d.pad_end == 0;
  if (p.one_d) p.g.insert(p.g.begin(), WindowDims{1, 1, 1, 1, 0, 0, 1});
  const WindowDims& gy = p.g[0];
  const WindowDims& gx = p.g[1];
  p.m = wd[0];
  p.cg = xt.dims[1] / group_;
  p.mg = p.m / group_;
  p.ohw = gy.out * gx.out;
  p.ckk = p.cg * gy.kernel * gx.kernel;
  const int64_t hp = gy.in + gy.pad_begin + gy.pad_end, wp = gx.in + gx.pad_begin + gx.pad_end;
  p.hq = (hp + gy.stride - 1) / gy.stride;
  p.wq = (wp + gx.stride - 1) / gx.stride;
  // Packed weights come in blocks of output channels: a part takes whole blocks.
  p.row_unit = p.packed ? kConvBlock : p.mg >= 8 ? 8 : 1;
  // Depthwise parts take whole channels when there are enough: each part then copies
  // every input row once.
  const bool many_channels = depthwise(p) && p.m >= 8;
  p.col_unit = many_channels ? p.ohw : rows_per_unit(gy.out, p.wq, p.m / p.row_unit) * gx.out;
  // The packed GEMM of a pointwise convolution takes its columns in panels. Each part packs
  // the input columns it multiplies, so parts split by output channels packed the same
  // columns again: MobileNetV2's project layers (24-64 channels, 144-960 deep) went 4 ways
  // by rows of 8, each part packing the whole input. With 8 panels or more the columns
  // alone go round evenly.
  if (pointwise(p)) {
    p.col_unit = gemm_panel_width(xt.dtype);
    if (p.ohw >= 8 * p.col_unit) p.row_unit = p.m;
  }
  // A packed 1x1 window reads its positions in place: parts need no whole rows.
  if (p.packed && p.window_1x1) p.col_unit = kPackedPositionUnit;
  // Small images go as one GEMM over the batch: parts take output channels only.
  if (small_images(p)) p.col_unit = p.ohw;
  return p;
}

int64_t Conv::c_split_unit(const Node& node) const { return plan(node).col_unit; }

bool Conv::pointwise(const Plan& p) {
  if (p.packed) return false;
  for (const auto& d : p.g) {
    if (d.kernel != 1 || d.stride != 1 || d.pad_begin != 0 || d.pad_end != 0) return false;
  }
  return true;
}

std::string Conv::c_support_code() const {
  return "#define kiln_gemm_packed_f32 (KILN_SUPPORT->gemm_packed_f32)\n"
         "#define kiln_gemm_packed_f64 (KILN_SUPPORT->gemm_packed_f64)\n";
}

std::optional<SplitTiles> Conv::c_split_tiles(const Node& node, const CodeNames&,
                                              const Sub& sub) const {
  const Plan p = plan(node);
  return SplitTiles{sub.value(p.m, "m"), sub.value(p.ohw, "ohw"), sub.value(p.row_unit, "row_unit"),
                    sub.value(p.col_unit, "col_unit")};
}

// Direct convolution through kiln_support.conv_tile (a register-blocked kernel over taps),
// with no unfolded matrix. The zero-padded image group is copied into a buffer split into
// stride phases: padded pixel (py, px) goes to phase (py % sh, px % sw) at (py / sh, px / sw),
// each phase a plane of hq x wq. Output position (oy, ox) is then flat position oy*wq + ox of
// every phase, and tap (c, i, j) the fixed offset of its phase plus (i*dh / sh)*wq + j*dw / sw:
// a strided window reads like a stride-1 one (stride 1 is one phase: the padded image
// itself). The few positions that overhang a row (ox >= OW) are computed and dropped.
// A part of a split call computes a tile of output channels by whole output rows
// (kiln_tile_part), copying only the input rows its output rows read.
std::string Conv::c_code(const Node& node, const CodeNames& names, const Sub& sub) const {
  return code(node, names, sub, "");
}

bool Conv::c_inline_epilogue(const Node& node) const {
  const Plan p = plan(node);
  return pointwise(p) || depthwise(p);
}

std::string Conv::c_code_with_epilogue(const Node& node, const CodeNames& names, const Sub& sub,
                                       const std::string& epilogue) const {
  return code(node, names, sub, epilogue);
}

bool Conv::c_store_clamp(const Node& node) const {
  const DType dt = node.outputs[0]->type.dtype;
  const Plan p = plan(node);
  return (dt == DType::kFloat32 || dt == DType::kFloat64) && !depthwise(p);
}

std::string Conv::c_code_with_clamp(const Node& node, const CodeNames& names, const Sub& sub,
                                    const StoreClamp& clamp) const {
  if (!c_store_clamp(node)) throw InternalError("conv: a store clamp on a convolution without one");
  return code(node, names, sub, "", &clamp);
}

// What every variant's code is written with: one node's plan, names and store bounds.
struct Conv::Emit {
  const Plan& p;
  const Sub& sub;
  std::string T, S;          // the element type and the kernels' suffix (f32, f64)
  std::string x, y, sy, sx;  // the input and output, the input's row and column strides
  std::string lo_hi;         // the kernels' store bounds
  std::string epilogue;      // run on each finished piece, or ""

  const WindowDims& gy() const { return p.g[0]; }
  const WindowDims& gx() const { return p.g[1]; }
  std::string v(int64_t n, std::string_view name) const { return sub.value(n, name); }
};

// A 1x1 convolution is a GEMM. The part's positions go in pieces of whole panels, each about
// 128 KB of output: a piece's positions are packed into kiln's panel layout (the copy the
// phase split would make anyway), its rows start as the bias, the packed kernel adds the
// weight rows times the panels, and an inline epilogue runs on the piece while it is still
// in L2. A whole part's tile of an expand layer (1.2 MB at 112 x 112) went to memory and back
// once for the bias, once for the product and once for the epilogue.
std::string Conv::pointwise_code(const Emit& e) {
  const Plan& p = e.p;
  const std::string& T = e.T;
  const std::string& x = e.x;
  const std::string W_in = e.v(e.gx().in, "in_w");
  std::string s;
  s += "const int64_t P = KILN_GEMM_PANEL_BYTES / sizeof(" + T + ");\n";
  s += "const int64_t cg = " + e.v(p.cg, "cg") + ", wd = " + W_in + ", ohw = " + e.v(p.ohw, "ohw") +
       ";\n";
  s += "const int64_t widest = r1 - r0 > cg ? r1 - r0 : cg;\n";
  s += "int64_t piece = 131072 / sizeof(" + T + ") / widest / P * P;\n";
  s += "if (piece < P) piece = P;\n";
  s += "if (piece > c1 - c0) piece = (c1 - c0 + P - 1) / P * P;\n";
  s += c_workspace(T, "bp", "piece * cg", "conv's packed positions");
  s += "const int rows_contig = " + e.sx + " == 1 && (" +
       (p.one_d ? std::string("1") : e.sy + " == wd") + ");\n";
  s += "for (int64_t e_n = 0; e_n < " + x + "->shape[0]; ++e_n)\n";
  s += "for (int64_t e_c0 = c0; e_c0 < c1; e_c0 += piece) {\n";
  s += "const int64_t e_c1 = c1 - e_c0 < piece ? c1 : e_c0 + piece, npos = e_c1 - e_c0;\n";
  s += "const int64_t panels = (npos + P - 1) / P;\n";
  s += "for (int64_t oc = r0; oc < r1;) {\n";
  const std::string mg = e.v(p.mg, "mg");
  s += "const int64_t grp = oc / " + mg + ";\n";
  s += "const int64_t oc_end = (grp + 1) * " + mg + " < r1 ? (grp + 1) * " + mg + " : r1;\n";
  s += "const " + T + " *xg = (const " + T + " *)" + x + "->data + e_n * " + x +
       "->strides[0] + grp * cg * " + x + "->strides[1];\n";
  s += "for (int64_t pn = 0; pn < panels; ++pn) {\n";
  s += "const int64_t j0 = e_c0 + pn * P, cnt = e_c1 - j0 < P ? e_c1 - j0 : P;\n";
  s += "for (int64_t i = 0; i < cg; ++i) {\n";
  s += T + " *dst = bp + (pn * cg + i) * P;\n";
  s += "const " + T + " *src = xg + i * " + x + "->strides[1];\n";
  s += "if (rows_contig) {\n";
  s += "for (int64_t k = 0; k < cnt; ++k) dst[k] = src[j0 + k];\n";
  s += "} else {\n";
  s += "for (int64_t k = 0; k < cnt; ++k)\n";
  s += "dst[k] = src[(j0 + k) / wd * " + e.sy + " + (j0 + k) % wd * " + e.sx + "];\n";
  s += "}\n";
  s += "for (int64_t k = cnt; k < P; ++k) dst[k] = 0;\n";
  s += "}\n";
  s += "}\n";
  s += T + " *yo = (" + T + " *)" + e.y + "->data + (e_n * " + e.v(p.m, "m") +
       " + oc) * ohw + e_c0;\n";
  // The bias and a clamp go in as the kernel stores: no passes of their own over the piece.
  s += "kiln_gemm_packed_" + e.S + "(oc_end - oc, npos, cg, (" + T + ")1, W + oc * cg, cg, 1, bp, (" +
       T + ")0, yo, ohw, bias ? bias + oc * bs : 0, bs, 0, " + e.lo_hi + ");\n";
  s += "oc = oc_end;\n";
  s += "}\n";
  if (!e.epilogue.empty()) {
    s += "{\nconst int64_t e_r0 = r0, e_r1 = r1;\n" + e.epilogue + "}\n";
  }
  s += "}\n";
  return s;
}

// A packed 1x1 window (any stride) needs no padded or phase copy. The part's positions go in
// chunks of about 128 KB of input, each gathered into groups of kGatherGroup positions whose
// taps (input channels) lie one after another, so the kernel streams each group's input:
// read in place, each tap of a group was a new cache line (a 7 x 7 map's channels are 196
// bytes apart). Every block of output channels then passes over the chunk while it is in L2.
std::string Conv::gathered_code(const Emit& e) {
  if (!e.epilogue.empty()) throw InternalError("conv: an inline epilogue on a packed convolution");
  const Plan& p = e.p;
  const std::string& T = e.T;
  const std::string& x = e.x;
  const std::string G = std::to_string(kGatherGroup);
  std::string s;
  s += "_Static_assert(KILN_CONV_BLOCK == " + std::to_string(kConvBlock) +
       ", \"kiln packed these weights for another block size\");\n";
  s += "const int64_t cg = " + e.v(p.cg, "cg") + ", ow = " + e.v(e.gx().out, "out_w") + ";\n";
  s += "const int64_t sc = " + x + "->strides[1], sy = " + e.sy + " * " +
       e.v(e.gy().stride, "stride_h") + ", sx = " + e.sx + " * " + e.v(e.gx().stride, "stride_w") +
       ";\n";
  s += "int64_t chunk = 131072 / (int64_t)sizeof(" + T + ") / cg / " + G + " * " + G + ";\n";
  s += "if (chunk < 2 * " + G + ") chunk = 2 * " + G + ";\n";
  s += "if (chunk > c1 - c0) chunk = (c1 - c0 + " + G + " - 1) / " + G + " * " + G + ";\n";
  s += c_workspace("int32_t", "pos", "chunk", "conv's gathered positions");
  s += c_workspace("int32_t", "off", "cg", "conv's tap offsets");
  s += c_workspace(T, "gbuf", "chunk * cg", "conv's gathered input");
  s += c_workspace("int64_t", "src", "chunk", "conv's source offsets");
  s += "for (int64_t t = 0; t < cg; ++t) off[t] = (int32_t)(t * " + G + ");\n";
  s += "for (int64_t i = 0; i < chunk; ++i) pos[i] = (int32_t)(i / " + G + " * cg * " + G +
       " + i % " + G + ");\n";
  s += "for (int64_t n = 0; n < " + x + "->shape[0]; ++n) {\n";
  s += "const " + T + " *xn = (const " + T + " *)" + x + "->data + n * " + x + "->strides[0];\n";
  s += T + " *yn = (" + T + " *)" + e.y + "->data + (n * " + e.v(p.m, "m") + " + r0) * " +
       e.v(p.ohw, "ohw") + ";\n";
  s += "for (int64_t j0 = c0; j0 < c1; j0 += chunk) {\n";
  s += "const int64_t cnt = c1 - j0 < chunk ? c1 - j0 : chunk;\n";
  // Channel by channel, so each input row's run of positions is read in order.
  s += "for (int64_t j = 0; j < cnt; ++j) src[j] = (j0 + j) / ow * sy + (j0 + j) % ow * sx;\n";
  s += "for (int64_t t = 0; t < cg; ++t) {\n";
  s += "const " + T + " *row = xn + t * sc;\n";
  s += "for (int64_t j = 0; j < cnt; ++j)\n";
  s += "gbuf[(j / " + G + " * cg + t) * " + G + " + j % " + G + "] = row[src[j]];\n";
  s += "}\n";
  s += "kiln_conv_blocks_" + e.S +
       "(r1 - r0, cnt, cg, gbuf, pos, off, W + r0 * cg, bias ? bias + r0 * bs : 0, bs, yn + j0, " +
       e.v(p.ohw, "ohw") + ", " + e.lo_hi + ");\n";
  s += "}\n";
  s += "}\n";
  return s;
}

// The phase buffer of a windowed convolution: this part's output rows, the phase rows they
// read and the image rows behind those, the padding those rows read zeroed once (each image
// group rewrites the interior), and each tap's offset in the buffer.
std::string Conv::phase_setup(const Emit& e) {
  const Plan& p = e.p;
  const WindowDims& gy = e.gy();
  const WindowDims& gx = e.gx();
  const std::string& T = e.T;
  const int64_t phases = gy.stride * gx.stride, plane = p.hq * p.wq;
  const int64_t buf = p.cg * phases * plane;
  std::string s;
  s += c_workspace(T, "buf", e.v(buf, "buf") + " + KILN_CONV_SLACK", "conv's padded image");
  s += c_workspace("int32_t", "off", e.v(p.ckk, "ckk"), "conv's tap offsets");
  s += "const int64_t ow = " + e.v(gx.out, "out_w") + ", wq = " + e.v(p.wq, "wq") +
       ", plane = " + e.v(plane, "plane") + ";\n";
  s += "const int64_t oy0 = c0 / ow, oy1 = (c1 + ow - 1) / ow;\n";
  s += "const int64_t reach = " + e.v((gy.kernel - 1) * gy.dilation, "reach") + ";\n";
  const std::string stride_h = e.v(gy.stride, "stride_h");
  s += "const int64_t q_hi = (oy1 + reach / " + stride_h + " + 1) * wq;\n";
  const std::string pad_top = e.v(gy.pad_begin, "pad_top");
  s += "int64_t y0 = oy0 * " + stride_h + " - " + pad_top + ", y1 = (oy1 - 1) * " + stride_h +
       " + reach + 1 - " + pad_top + ";\n";
  const std::string in_h = e.v(gy.in, "in_h");
  s += "if (y0 < 0) y0 = 0;\nif (y1 > " + in_h + ") y1 = " + in_h + ";\n";
  s += "for (int64_t q = 0; q < " + e.v(p.cg * phases, "phase_planes") + "; ++q)\n";
  s += "for (int64_t i = oy0 * wq; i < q_hi && i < plane; ++i) buf[q * plane + i] = 0;\n";
  s += "for (int64_t i = 0; i < KILN_CONV_SLACK; ++i) buf[" + e.v(buf, "buf") + " + i] = 0;\n";
  s += "for (int64_t c = 0, t = 0; c < " + e.v(p.cg, "cg") + "; ++c)\n";
  s += "for (int64_t i = 0; i < " + e.v(gy.kernel, "kernel_h") + "; ++i)\n";
  s += "for (int64_t j = 0; j < " + e.v(gx.kernel, "kernel_w") + "; ++j, ++t) {\n";
  s += "const int64_t dy = i * " + e.v(gy.dilation, "dilation_h") + ", dx = j * " +
       e.v(gx.dilation, "dilation_w") + ";\n";
  const std::string stride_w = e.v(gx.stride, "stride_w");
  s += "off[t] = (int32_t)(((c * " + stride_h + " + dy % " + stride_h + ") * " + stride_w +
       " + dx % " + stride_w + ") * plane + dy / " + stride_h + " * wq + dx / " + stride_w +
       ");\n";
  s += "}\n";
  return s;
}

// Depthwise: each channel's phase planes, then its taps as flat runs over whole rows (one
// vector loop however narrow the rows), then the rows without their overhang. The
// fixed-size kernels store whole vectors: room for one past the rows. The epilogue runs on
// runs of whole channels of at least 16 KB, still in L1 or L2.
std::string Conv::depthwise_code(const Emit& e) {
  const Plan& p = e.p;
  const WindowDims& gy = e.gy();
  const WindowDims& gx = e.gx();
  const std::string& T = e.T;
  const std::string& x = e.x;
  const bool epi = !e.epilogue.empty();
  std::string s;
  s += c_workspace(T, "flat", e.v(gy.out * p.wq, "flat_len") + " + KILN_CONV_SLACK",
                   "conv's depthwise rows");
  s += "for (int64_t n = 0; n < " + x + "->shape[0]; ++n)\n";
  s += std::string("for (int64_t oc = r0") + (epi ? ", e_r0 = r0" : "") + "; oc < r1; ++oc) {\n";
  s += "if (y1 > y0)\n";
  s += "kiln_phase_copy_" + e.S + "((const " + T + " *)" + x + "->data + n * " + x +
       "->strides[0] + oc * " + x + "->strides[1] + y0 * " + e.sy + ", 1, " + x + "->strides[1], " +
       e.sy + ", " + e.sx + ", y1 - y0, " + e.v(gx.in, "in_w") + ", " +
       e.v(gy.pad_begin, "pad_top") + " + y0, " + e.v(gx.pad_begin, "pad_left") + ", " +
       e.v(gy.stride, "stride_h") + ", " + e.v(gx.stride, "stride_w") + ", " + e.v(p.hq, "hq") +
       ", wq, buf);\n";
  s += "kiln_depthwise_flat_" + e.S + "(buf + oy0 * wq, off, " + e.v(gy.kernel, "kernel_h") + ", " +
       e.v(gx.kernel, "kernel_w") + ", W + oc * " + e.v(p.ckk, "ckk") + ", bias ? bias[oc * bs] : (" +
       T + ")0, flat, (oy1 - oy0 - 1) * wq + ow);\n";
  s += "kiln_rows_copy_" + e.S + "(flat, wq, (" + T + " *)" + e.y + "->data + (n * " +
       e.v(p.m, "m") + " + oc) * " + e.v(p.ohw, "ohw") + " + oy0 * ow, ow, oy1 - oy0);\n";
  if (epi) {
    s += "if ((oc + 1 - e_r0) * (c1 - c0) * (int64_t)sizeof(" + T +
         ") >= 16384 || oc + 1 == r1) {\n";
    s += "const int64_t e_n = n, e_r1 = oc + 1, e_c0 = c0, e_c1 = c1;\n" + e.epilogue;
    s += "e_r0 = oc + 1;\n}\n";
  }
  s += "}\n";
  return s;
}

bool Conv::small_images(const Plan& p) {
  return !p.packed && !pointwise(p) && !depthwise(p) && p.ohw > 0 && p.ohw <= kSmallImagePositions;
}

// Images of a few positions (the last stages of a small input: ResNet-18's 2x2 at 64x64):
// the batch's positions, image after image, are the columns of one packed GEMM per group,
// its B built straight from the input through a table of each tap's offset at each
// position (-1: the padding). The direct tile ran 6 positions per image in a 16-lane
// vector and streamed the weight once per image (50 GFLOP/s); here the weight streams once
// per chunk of images and the columns fill the kernel. The product goes to a scratch matrix
// (columns of several images), then to each image's rows.
std::string Conv::small_image_code(const Emit& e) {
  if (!e.epilogue.empty()) throw InternalError("conv: an inline epilogue on a small-image conv");
  const Plan& p = e.p;
  const WindowDims& gy = e.gy();
  const WindowDims& gx = e.gx();
  const std::string& T = e.T;
  const std::string& x = e.x;
  const std::string ohw = e.v(p.ohw, "ohw"), ckk = e.v(p.ckk, "ckk"), cg = e.v(p.cg, "cg"),
                    mg = e.v(p.mg, "mg");
  std::string s;
  s += "const int64_t P = KILN_GEMM_PANEL_BYTES / sizeof(" + T + ");\n";
  s += "const int64_t taps = " + e.v(gy.kernel * gx.kernel, "taps") + ", ohw = " + ohw +
       ", ckk = " + ckk + ";\n";
  s += "const int64_t batch = " + x + "->shape[0];\n";
  // Images per chunk: the chunk's columns about 512 KB, at least a panel's worth.
  s += "int64_t per = (524288 / (int64_t)sizeof(" + T + ")) / (ckk * ohw);\n";
  s += "if (per * ohw < P) per = (P + ohw - 1) / ohw;\n";
  s += "if (per > batch) per = batch;\n";
  s += "const int64_t cols = (per * ohw + P - 1) / P * P;\n";
  s += c_workspace("int64_t", "tab", "taps * ohw", "conv's tap offsets");
  s += c_workspace(T, "bp", "cols * ckk", "conv's packed positions");
  s += c_workspace(T, "ct", "(r1 - r0) * cols", "conv's product");
  {
    const std::vector<WindowDims> g2{gy, gx};
    s += "{\nconst kiln_window g = " + window_c_init(g2, e.sub) + ";\n";
    s += "kiln_window_offsets(&g, " + e.sy + ", " + e.sx + ", tab);\n}\n";
  }
  s += "for (int64_t n0 = 0; n0 < batch; n0 += per) {\n";
  s += "const int64_t nn = batch - n0 < per ? batch - n0 : per, npos = nn * ohw;\n";
  s += "for (int64_t oc = r0; oc < r1;) {\n";
  s += "const int64_t grp = oc / " + mg + ";\n";
  s += "const int64_t oc_end = (grp + 1) * " + mg + " < r1 ? (grp + 1) * " + mg + " : r1;\n";
  // B[k][jc] for k = c * taps + t and column jc = image i's position q, in panels of P.
  s += "for (int64_t c = 0; c < " + cg + "; ++c)\n";
  s += "for (int64_t i = 0; i < nn; ++i) {\n";
  s += "const " + T + " *xc = (const " + T + " *)" + x + "->data + (n0 + i) * " + x +
       "->strides[0] + (grp * " + cg + " + c) * " + x + "->strides[1];\n";
  s += "for (int64_t t = 0; t < taps; ++t) {\n";
  s += "const int64_t k = c * taps + t;\n";
  s += "const int64_t *tt = tab + t * ohw;\n";
  s += "for (int64_t q = 0, jc = i * ohw; q < ohw; ++q, ++jc)\n";
  s += "bp[jc / P * ckk * P + k * P + jc % P] = tt[q] >= 0 ? xc[tt[q]] : (" + T + ")0;\n";
  s += "}\n";
  s += "}\n";
  s += "for (int64_t jc = npos; jc % P; ++jc)\n";
  s += "for (int64_t k = 0; k < ckk; ++k) bp[jc / P * ckk * P + k * P + jc % P] = 0;\n";
  s += "kiln_gemm_packed_" + e.S + "(oc_end - oc, npos, ckk, (" + T +
       ")1, W + oc * ckk, ckk, 1, bp, (" + T + ")0, ct, npos, bias ? bias + oc * bs : 0, bs, 0, " +
       e.lo_hi + ");\n";
  s += "for (int64_t r = 0; r < oc_end - oc; ++r)\n";
  s += "for (int64_t i = 0; i < nn; ++i)\n";
  s += "memcpy((" + T + " *)" + e.y + "->data + ((n0 + i) * " + e.v(p.m, "m") +
       " + oc + r) * ohw, ct + r * npos + i * ohw, ohw * sizeof(" + T + "));\n";
  s += "oc = oc_end;\n";
  s += "}\n";
  s += "}\n";
  return s;
}

int64_t Conv::oc_block(const Plan& p, int64_t phases) {
  constexpr int64_t kL2Weights = 128 * 1024;  // elements of a block's weights: 512 KB of f32
  const int64_t all = std::numeric_limits<int32_t>::max();
  if (p.ckk <= 0 || p.m <= 0 || p.m * p.ckk <= 2 * kL2Weights) return all;
  const int64_t block = std::max<int64_t>(kL2Weights / p.ckk / p.row_unit, 1) * p.row_unit;
  const int64_t image = p.cg * phases * p.hq * p.wq;  // the phase copy, per image and block
  return image * 4 <= block * p.ckk ? block : all;
}

// Every other convolution, group by group through the phase buffer: conv_tile over the
// phase rows (the few positions that overhang a row computed and dropped), or, with packed
// weights, conv_blocks over the part's own positions (parts start on whole blocks:
// row_unit).
std::string Conv::tiled_code(const Emit& e) {
  // (A packed convolution's epilogue inline, block by block, measured no faster than the
  // separate pass: ResNet's part tiles fit L2.)
  if (!e.epilogue.empty()) throw InternalError("conv: an inline epilogue on a direct convolution");
  const Plan& p = e.p;
  const WindowDims& gy = e.gy();
  const WindowDims& gx = e.gx();
  const std::string& T = e.T;
  const std::string& x = e.x;
  std::string s;
  if (p.packed) {
    s += "_Static_assert(KILN_CONV_BLOCK == " + std::to_string(kConvBlock) +
         ", \"kiln packed these weights for another block size\");\n";
    s += c_workspace("int32_t", "pos", "c1 - c0", "conv's positions");
    s += "for (int64_t j = c0; j < c1; ++j) pos[j - c0] = (int32_t)((j / ow - oy0) * wq + j % ow);\n";
  }
  const std::string mg = e.v(p.mg, "mg"), cg = e.v(p.cg, "cg");
  // Channels in blocks outside the images: each block's weights are read from memory once
  // and again from cache for every image, where images in the inner loop would stream the
  // whole weight once per image. Worth it where the weight outgrows L2 and an image's copy
  // is small beside a block (deep layers of a small image: ResNet-18's last stage at 64x64
  // re-read 9 MB per image, 30 GFLOP/s; a batch at 224 keeps images outside).
  const int64_t block = oc_block(p, gy.stride * gx.stride);
  s += "for (int64_t ob = r0; ob < r1; ob += " + e.v(block, "oc_block") + ") {\n";
  s += "const int64_t ob_end = r1 - ob > " + e.v(block, "oc_block") + " ? ob + " +
       e.v(block, "oc_block") + " : r1;\n";
  s += "for (int64_t n = 0; n < " + x + "->shape[0]; ++n)\n";
  s += "for (int64_t oc = ob; oc < ob_end;) {\n";
  s += "const int64_t grp = oc / " + mg + ";\n";
  s +=
      "const int64_t oc_end = (grp + 1) * " + mg + " < ob_end ? (grp + 1) * " + mg + " : ob_end;\n";
  s += "const " + T + " *xg = (const " + T + " *)" + x + "->data + n * " + x +
       "->strides[0] + grp * " + cg + " * " + x + "->strides[1];\n";
  s += "if (y1 > y0)\n";
  s += "kiln_phase_copy_" + e.S + "(xg + y0 * " + e.sy + ", " + cg + ", " + x + "->strides[1], " +
       e.sy + ", " + e.sx + ", y1 - y0, " + e.v(gx.in, "in_w") + ", " +
       e.v(gy.pad_begin, "pad_top") + " + y0, " + e.v(gx.pad_begin, "pad_left") + ", " +
       e.v(gy.stride, "stride_h") + ", " + e.v(gx.stride, "stride_w") + ", " + e.v(p.hq, "hq") +
       ", wq, buf);\n";
  const std::string ckk = e.v(p.ckk, "ckk"), m = e.v(p.m, "m"), ohw = e.v(p.ohw, "ohw");
  const std::string y_at = "(" + T + " *)" + e.y + "->data + (n * " + m + " + oc) * " + ohw;
  if (p.packed) {
    s += "kiln_conv_blocks_" + e.S + "(oc_end - oc, c1 - c0, " + ckk +
         ", buf + oy0 * wq, pos, off, W + oc * " + ckk + ", bias ? bias + oc * bs : 0, bs, " +
         y_at + " + c0, " + ohw + ", " + e.lo_hi + ");\n";
  } else {
    s += "kiln_conv_tile_" + e.S + "(oc_end - oc, (oy1 - oy0 - 1) * wq + ow, " + ckk +
         ", buf + oy0 * wq, off, W + oc * " + ckk + ", " + ckk + ", bias ? bias + oc * bs : 0, bs, " +
         y_at + " + oy0 * ow, " + ohw + ", wq, ow, " + e.lo_hi + ");\n";
  }
  s += "oc = oc_end;\n";
  s += "}\n}\n";
  return s;
}

std::string Conv::code(const Node& node, const CodeNames& names, const Sub& sub,
                       const std::string& epilogue, const StoreClamp* clamp) const {
  const auto& xt = node.inputs[0]->type;
  const auto& wt = node.inputs[1]->type;
  const bool f32 = xt.dtype == DType::kFloat32;
  const std::string T = f32 ? "float" : "double";
  const Plan p = plan(node);
  const WindowDims& gy = p.g[0];
  const WindowDims& gx = p.g[1];
  // Elements of the per-part buffer before the slack: the image group's phase planes.
  const int64_t buf = p.cg * gy.stride * gx.stride * p.hq * p.wq;
  if (buf + kConvSlackBound >= (int64_t(1) << 31)) {
    throw UnsupportedError("conv: an image group of " + std::to_string(buf) +
                           " elements (tap offsets are 32-bit)");
  }
  const std::string& x = names.inputs[0];
  const std::string& w = names.inputs[1];
  const Emit e{p,
               sub,
               T,
               f32 ? "f32" : "f64",
               x,
               names.outputs[0],
               p.one_d ? "0" : x + "->strides[2]",
               x + "->strides[" + (p.one_d ? "2" : "3") + "]",
               // The kernels' store bounds: -inf and +inf clamp nothing.
               clamp ? clamp->lo + ", " + clamp->hi
                     : "-(" + T + ")__builtin_inf(), (" + T + ")__builtin_inf()",
               epilogue};
  const bool has_bias = node.inputs.size() == 3;
  const SplitTiles tiles = *c_split_tiles(node, names, sub);
  const std::string& ctx = sub.ctx;
  std::string s = "{\n";
  s += "int64_t r0, r1, c0, c1;\n";
  s += "kiln_tile_part(" + tiles.rows + ", " + tiles.cols + ", " + tiles.row_unit + ", " +
       tiles.col_unit + ", " + ctx + "->part, " + ctx + "->n_parts, &r0, &r1, &c0, &c1);\n";
  s += "if (r0 < r1 && c0 < c1 && " + x + "->shape[0] > 0) {\n";
  // The weight as one dense block: itself, or a copy in the workspace.
  s += "const " + T + " *W = (const " + T + " *)" + w + "->data;\n";
  s += "int w_contig = 1;\n{\nint64_t c = 1;\n";
  s += "for (int d = " + std::to_string(wt.rank() - 1) + "; d >= 0; --d) {\n";
  s += "if (" + w + "->shape[d] != 1 && " + w + "->strides[d] != c) w_contig = 0;\n";
  s += "c *= " + w + "->shape[d];\n}\n}\n";
  s += "if (!w_contig) {\n";
  s += c_workspace(T, "packed", e.v(p.m * p.ckk, "w_elems"), "conv's packed weight");
  s += "kiln_copy_strided(packed, " + w + "->data, " + std::to_string(wt.rank()) + ", " + w +
       "->shape, " + w + "->strides, sizeof(" + T + "));\nW = packed;\n}\n";
  s += "const " + T + " *bias = " +
       (has_bias ? "(const " + T + " *)" + names.inputs[2] + "->data" : std::string("0")) + ";\n";
  s += "const int64_t bs = " + (has_bias ? names.inputs[2] + "->strides[0]" : std::string("0")) +
       ";\n";
  if (pointwise(p)) {
    s += pointwise_code(e);
  } else if (p.packed && p.window_1x1) {
    s += gathered_code(e);
  } else if (small_images(p)) {
    s += small_image_code(e);
  } else {
    s += phase_setup(e);
    s += depthwise(p) ? depthwise_code(e) : tiled_code(e);
  }
  s += "}\n}\n";
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

std::vector<WindowDims> Conv::node_geometry(const Node& node) const {
  return geometry(with_batch(node.inputs[0]), node.inputs[1]->type.dims);
}

}  // namespace kiln
