#include "ops/conv_nchwc.h"

#include "ops/c/workspace.h"
#include "util/error.h"
#include "util/strings.h"

namespace kiln {
namespace {

// Positions per column unit of a pointwise split: four of the kernel's runs of 6.
constexpr int64_t kPointwiseUnit = 24;

std::vector<int64_t> ints_of(const Attrs& props, const std::string& name, size_t n) {
  std::vector<int64_t> v = attr_ints(props, name);
  if (v.size() != n) {
    throw AttrError(name,
                    "takes " + std::to_string(n) + " values, got " + std::to_string(v.size()));
  }
  for (int64_t e : v) {
    if (e < (name == "pads" ? 0 : 1)) throw AttrError(name, "has " + std::to_string(e));
  }
  return v;
}

// F(T x T, 3x3)'s G ((T + 2) x 3): F(2x2) at points 0, +-1 and infinity, F(4x4) at 0, +-1,
// +-2 and infinity.
constexpr double kG2[4][3] = {{1, 0, 0}, {0.5, 0.5, 0.5}, {0.5, -0.5, 0.5}, {0, 0, 1}};
constexpr double kG4[6][3] = {{0.25, 0, 0},
                              {-1.0 / 6, -1.0 / 6, -1.0 / 6},
                              {-1.0 / 6, 1.0 / 6, -1.0 / 6},
                              {1.0 / 24, 1.0 / 12, 1.0 / 6},
                              {1.0 / 24, -1.0 / 12, 1.0 / 6},
                              {0, 0, 1}};

double g_at(int tile, int a, int i) { return tile == 2 ? kG2[a][i] : kG4[a][i]; }

// The three taps along one axis from the T + 2 transformed values h: G's first and last rows
// hold the outer taps (F(4x4)'s first scaled by 1/4), the middle tap is a multiple of the
// difference of rows 1 and 2 (the kernel's wg_read_back).
void read_back(int tile, const double* h, double g[3]) {
  if (tile == 2) {
    g[0] = h[0];
    g[1] = h[1] - h[2];
    g[2] = h[3];
  } else {
    g[0] = 4 * h[0];
    g[1] = 3 * (h[2] - h[1]);
    g[2] = h[5];
  }
}

// The direct weights (M/8, C x 9, 8) read back out of F(tile x tile)'s transform U = G g G^T
// ((tile + 2)^2, M/8, C, 8; infer_type checked the shape), in double.
Tensor direct_weights(const Tensor& u, int tile) {
  const int64_t B = kNchwcBlock, mb = u.shape()[1], c = u.shape()[2];
  const int A = tile + 2;
  Tensor w = Tensor::empty(DType::kFloat32, {mb, c * 9, B});
  for (int64_t b = 0; b < mb; ++b) {
    for (int64_t ic = 0; ic < c; ++ic) {
      for (int64_t l = 0; l < B; ++l) {
        double h[3][6];
        for (int e = 0; e < A; ++e) {
          double col[6], rows[3];
          for (int a = 0; a < A; ++a) col[a] = u.load((((a * A + e) * mb + b) * c + ic) * B + l);
          read_back(tile, col, rows);
          for (int i = 0; i < 3; ++i) h[i][e] = rows[i];
        }
        for (int i = 0; i < 3; ++i) {
          double g[3];
          read_back(tile, h[i], g);
          for (int j = 0; j < 3; ++j)
            w.store((b * c * 9 + ((ic / B * 3 + i) * 3 + j) * B + ic % B) * B + l, g[j]);
        }
      }
    }
  }
  return w;
}

}  // namespace

Tensor winograd_weights(const Tensor& w, int tile) {
  if (w.dtype() != DType::kFloat32 || w.ndim() != 3 || w.shape()[2] != kNchwcBlock ||
      w.shape()[1] % (9 * kNchwcBlock) != 0 || (tile != 2 && tile != 4)) {
    throw InternalError(
        "winograd_weights: W must be a float32 (M/8, C x 9, 8) weight and the "
        "tile 2 or 4, got " +
        dims_to_string(w.shape()) + ", tile " + std::to_string(tile));
  }
  const int A = tile + 2;
  const int64_t B = kNchwcBlock, mb = w.shape()[0], c = w.shape()[1] / 9;
  Tensor u = Tensor::empty(DType::kFloat32, {A * A, mb, c, B});
  // Raw pointers into contiguous buffers: the same arithmetic as load/store, without an index
  // division per element (this runs on every weight of every Winograd layer at load time).
  const Tensor wc = w.contiguous();
  const float* wp = static_cast<const float*>(wc.data());
  float* up = static_cast<float*>(u.data());
  for (int64_t b = 0; b < mb; ++b) {
    for (int64_t ic = 0; ic < c; ++ic) {
      for (int64_t l = 0; l < B; ++l) {
        // Tap (ic / 8, i, j), input lane ic % 8, output lane l (the blocked order).
        double g[3][3], t[6][3];
        for (int i = 0; i < 3; ++i) {
          for (int j = 0; j < 3; ++j) {
            g[i][j] = wp[(b * c * 9 + ((ic / B * 3 + i) * 3 + j) * B + ic % B) * B + l];
          }
        }
        // G's rows are sums over the same taps in the same order for rows 1 and 2 (only
        // signs differ), so a zero middle tap reads back (read_back) as an exact zero.
        for (int a = 0; a < A; ++a) {
          for (int j = 0; j < 3; ++j) {
            t[a][j] = g_at(tile, a, 0) * g[0][j] + g_at(tile, a, 1) * g[1][j] +
                      g_at(tile, a, 2) * g[2][j];
          }
        }
        for (int a = 0; a < A; ++a) {
          for (int e = 0; e < A; ++e) {
            const double v = t[a][0] * g_at(tile, e, 0) + t[a][1] * g_at(tile, e, 1) +
                             t[a][2] * g_at(tile, e, 2);
            up[(((a * A + e) * mb + b) * c + ic) * B + l] = static_cast<float>(v);
          }
        }
      }
    }
  }
  return u;
}

ConvNchwc::ConvNchwc(Attrs props) : COp("conv_nchwc", std::move(props)) {
  check_known_attrs(this->props(),
                    {"group", "kernel_shape", "strides", "pads", "winograd", "channel_groups"});
  group_ = attr_int(this->props(), "group", 1);
  channel_groups_ = attr_int(this->props(), "channel_groups", 1);
  if (channel_groups_ < 1) throw AttrError("channel_groups", "must be >= 1");
  if (channel_groups_ > 1 && (group_ != 1 || attr_int(this->props(), "winograd", 0) != 0)) {
    throw AttrError("channel_groups", "takes group 1 and no winograd (a direct convolution)");
  }
  winograd_ = attr_int(this->props(), "winograd", 0);
  kernel_ = ints_of(this->props(), "kernel_shape", 2);
  strides_ = ints_of(this->props(), "strides", 2);
  pads_ = ints_of(this->props(), "pads", 4);
  if (group_ < 1) throw AttrError("group", "must be >= 1");
  if (kernel_[0] > 64 || kernel_[1] > 64) throw AttrError("kernel_shape", "is over 64");
  if (winograd_ != 0 && winograd_ != 2 && winograd_ != 4) {
    throw AttrError("winograd",
                    "is the output tile, 2 or 4 (0: direct), got " + std::to_string(winograd_));
  }
  if (winograd_ &&
      (group_ != 1 || kernel_ != std::vector<int64_t>{3, 3} ||
       strides_ != std::vector<int64_t>{1, 1} || pads_ != std::vector<int64_t>{1, 1, 1, 1})) {
    throw AttrError("winograd",
                    "takes a 3x3 window at stride 1 with pads 1 and group 1, got kernel_shape " +
                        dims_to_string(kernel_) + ", strides " + dims_to_string(strides_) +
                        ", pads " + dims_to_string(pads_) + ", group " + std::to_string(group_));
  }
}

ConvNchwc::Geometry ConvNchwc::geometry(const std::vector<int64_t>& x,
                                        const std::vector<int64_t>& w) const {
  Geometry g;
  g.plain = x.size() == 4;
  g.c = g.plain ? x[1] : x[1] * kNchwcBlock;
  g.h = x[2];
  g.w = x[3];
  g.m = depthwise() ? g.c : (winograd_ ? w[1] : w[0]) * kNchwcBlock;
  g.oh = (g.h + pads_[0] + pads_[2] - kernel_[0]) / strides_[0] + 1;
  g.ow = (g.w + pads_[1] + pads_[3] - kernel_[1]) / strides_[1] + 1;
  return g;
}

std::vector<TensorType> ConvNchwc::infer_type(const std::vector<TensorType>& inputs) const {
  if (inputs.size() != 2 && inputs.size() != 3)
    throw UserError("conv_nchwc takes 2 or 3 inputs (X, W[, B])");
  const TensorType& x = inputs[0];
  const TensorType& w = inputs[1];
  for (const TensorType& t : inputs) {
    if (t.dtype != DType::kFloat32) {
      throw UnsupportedError("conv_nchwc: " + t.to_string() + " (only float32)");
    }
  }
  const bool plain = x.rank() == 4;
  if (winograd_ && plain) {
    throw UserError("conv_nchwc: winograd takes a blocked input (N, C/8, H, W, 8), got " +
                    x.to_string());
  }
  if ((x.rank() != 5 || x.dims[4] != kNchwcBlock) && !(plain && !depthwise())) {
    throw UserError("conv_nchwc: input " + x.to_string() +
                    " is not (N, C/8, H, W, 8) (or, with group 1, (N, C, H, W))");
  }
  for (int d = 1; d < 4; ++d) {
    if (x.dims[static_cast<size_t>(d)] == kDynamic)
      throw UnsupportedError("conv_nchwc: input " + x.to_string() + " needs static C, H and W");
  }
  const int64_t c = plain ? x.dims[1] : x.dims[1] * kNchwcBlock;
  std::vector<int64_t> want;
  if (depthwise()) {
    if (group_ != c) {
      throw UserError("conv_nchwc: group " + std::to_string(group_) + " for " + std::to_string(c) +
                      " channels (1 or the channels)");
    }
    want = {x.dims[1], kernel_[0], kernel_[1], kNchwcBlock};
  } else if (winograd_) {
    const int64_t e = (winograd_ + 2) * (winograd_ + 2);
    if (w.rank() != 4 || w.dims[1] == kDynamic) {
      throw UserError("conv_nchwc: weight " + w.to_string() + " is not the Winograd transform (" +
                      std::to_string(e) + ", M/8, C, 8)");
    }
    want = {e, w.dims[1], c, kNchwcBlock};
  } else {
    if (w.rank() != 3 || w.dims[0] == kDynamic) {
      throw UserError("conv_nchwc: weight " + w.to_string() + " is not (M/8, C x kh x kw, 8)");
    }
    const int64_t groups = channel_groups_;
    if (groups > 1 && (plain || c % (groups * kNchwcBlock) != 0 || w.dims[0] % groups != 0)) {
      throw UserError("conv_nchwc: channel_groups " + std::to_string(groups) + " for input " +
                      x.to_string() + " and weight " + w.to_string() +
                      " (each group's input and output channels whole blocks)");
    }
    want = {w.dims[0], c / groups * kernel_[0] * kernel_[1], kNchwcBlock};
  }
  if (w.dims != want) {
    throw UserError("conv_nchwc: weight " + w.to_string() + " for input " + x.to_string() +
                    " must be " + dims_to_string(want));
  }
  const Geometry g = geometry(x.dims, w.dims);
  if (inputs.size() == 3 && (inputs[2].rank() != 1 || inputs[2].dims[0] != g.m)) {
    throw UserError("conv_nchwc: bias " + inputs[2].to_string() + " must be (" +
                    std::to_string(g.m) + ")");
  }
  if (g.oh < 1 || g.ow < 1) {
    throw UserError("conv_nchwc: a " + dims_to_string(kernel_) + " window does not fit input " +
                    x.to_string());
  }
  return {TensorType{x.dtype, {x.dims[0], g.m / kNchwcBlock, g.oh, g.ow, kNchwcBlock}}};
}

std::vector<Shape> ConvNchwc::infer_shape(const std::vector<Shape>& inputs) const {
  const Geometry g = geometry(inputs[0], inputs[1]);
  return {Shape{inputs[0][0], g.m / kNchwcBlock, g.oh, g.ow, kNchwcBlock}};
}

double ConvNchwc::flops(const std::vector<Shape>& inputs, const std::vector<Shape>& outputs) const {
  const double taps =
      static_cast<double>(kernel_[0] * kernel_[1]) *
      (depthwise() ? 1.0
                   : static_cast<double>(inputs[0][1] * (inputs[0].size() == 4 ? 1 : kNchwcBlock) /
                                         channel_groups_));
  return 2.0 * taps * static_cast<double>(shape_numel(outputs.at(0)));
}

void ConvNchwc::perform(const std::vector<Tensor>& inputs, std::vector<Tensor>& outputs) const {
  // The transformed form means the 3x3 convolution of the weights it holds (the kernel's
  // results differ from it by rounding only, non-finite inputs included).
  std::optional<Tensor> recovered;
  if (winograd_) recovered = direct_weights(inputs[1], static_cast<int>(winograd_));
  const Tensor& x = inputs[0];
  const Tensor& w = winograd_ ? *recovered : inputs[1];
  const Geometry g = geometry(x.shape(), inputs[1].shape());
  const int64_t B = kNchwcBlock, cb = g.c / B;
  // Element (n, c, y, x) of the blocked (or plain) input.
  auto xin = [&](int64_t n, int64_t c, int64_t y, int64_t xx) {
    if (g.plain) return x.load(((n * g.c + c) * g.h + y) * g.w + xx);
    return x.load((((n * cb + c / B) * g.h + y) * g.w + xx) * B + c % B);
  };
  const int64_t kk = kernel_[0] * kernel_[1];
  // W's element for output oc, input channel ic (its own channel when depthwise), tap (i, j):
  //   depthwise (C/8, kh, kw, 8);
  //   group 1 (M/8, taps x 8, 8): tap (ic / 8, i, j), input channel ic % 8, output oc % 8;
  //   from a plain input (M/8, taps, 8): tap (ic, i, j).
  //   channel_groups G (M/8, taps x 8, 8) over the group's C/G channels, ic counted in them.
  const int64_t cg = g.c / channel_groups_, mg = g.m / channel_groups_;
  auto weight = [&](int64_t oc, int64_t ic, int64_t i, int64_t j) {
    if (depthwise()) return w.load(((oc / B * kernel_[0] + i) * kernel_[1] + j) * B + oc % B);
    const int64_t t = g.plain ? ((ic * kernel_[0] + i) * kernel_[1] + j)
                              : ((ic / B * kernel_[0] + i) * kernel_[1] + j) * B + ic % B;
    return w.load((oc / B * cg * kk + t) * B + oc % B);
  };
  for (int64_t n = 0; n < x.shape()[0]; ++n) {
    for (int64_t oc = 0; oc < g.m; ++oc) {
      for (int64_t oy = 0; oy < g.oh; ++oy) {
        for (int64_t ox = 0; ox < g.ow; ++ox) {
          double acc = inputs.size() == 3 ? inputs[2].load(oc) : 0.0;
          const int64_t first = oc / mg * cg;  // the group's first input channel
          const int64_t ic0 = depthwise() ? oc : 0, ic1 = depthwise() ? oc + 1 : cg;
          for (int64_t ic = ic0; ic < ic1; ++ic) {
            for (int64_t i = 0; i < kernel_[0]; ++i) {
              const int64_t iy = oy * strides_[0] - pads_[0] + i;
              if (iy < 0 || iy >= g.h) continue;
              for (int64_t j = 0; j < kernel_[1]; ++j) {
                const int64_t ix = ox * strides_[1] - pads_[1] + j;
                if (ix < 0 || ix >= g.w) continue;
                acc += depthwise() ? xin(n, ic, iy, ix) * weight(oc, ic, i, j)
                                   : xin(n, first + ic, iy, ix) * weight(oc, ic, i, j);
              }
            }
          }
          outputs[0].store((((n * (g.m / B) + oc / B) * g.oh + oy) * g.ow + ox) * B + oc % B, acc);
        }
      }
    }
  }
}

int64_t ConvNchwc::c_split_unit(const Node& node) const {
  const Geometry g = geometry(node.inputs[0]->type.dims, node.inputs[1]->type.dims);
  if (winograd_) return winograd_ * g.ow * kNchwcBlock;  // a row of tiles
  return depthwise() ? g.ow * kNchwcBlock : kPointwiseUnit * kNchwcBlock;
}

std::optional<SplitTiles> ConvNchwc::c_split_tiles(const Node& node, const CodeNames&,
                                                   const Sub& sub) const {
  const Geometry g = geometry(node.inputs[0]->type.dims, node.inputs[1]->type.dims);
  // A direct convolution's part copies the zero-padded input rows its positions read, every
  // channel of them, so parts that split the output channels each copy the whole image.
  // Where the weights are smaller than the image (ResNet's 64-channel layers at 56 x 56: 147
  // KB of weights, 800 KB of image) the parts split the positions only: split 4 ways by
  // channels, each of those layers copied 3.4 MB and ran 9% behind onnxruntime. Deep layers
  // (512 channels at 7 x 7: 9.4 MB of weights) still split the channels, so that each part
  // streams a share of the weights.
  //
  // A pointwise layer copies nothing, but a part that takes a share of the channels still
  // reads the whole image, and a 56 x 56 image outgrows L2. Where its image is four times its
  // weights and more (ResNet-50's 256 -> 64 and 64 -> 256 at 56 x 56), the parts split the
  // positions: those layers ran 1.2-1.7x faster (kiln run --profile, batch 1 and 8). At 128 ->
  // 512 on 28 x 28 (weights 0.65x the image) splitting the positions was 15% slower.
  int64_t row_unit = depthwise() ? 1 : 2;
  const bool direct = !depthwise() && (!pointwise() || g.plain);
  const int64_t ratio = direct ? 1 : pointwise() ? 4 : 0;
  if (ratio > 0 && g.c > 0 && g.m > 0 && g.h > 0 && g.w > 0 &&
      ratio * g.m * (g.c / channel_groups_) * kernel_[0] * kernel_[1] < g.c * g.h * g.w) {
    row_unit = g.m / kNchwcBlock;
  }
  return SplitTiles{sub.value(g.m / kNchwcBlock, "m_blocks"),
                    sub.value(g.oh * g.ow * kNchwcBlock, "out_elems"),
                    sub.value(row_unit, "row_unit"), sub.value(c_split_unit(node), "col_unit")};
}

std::string ConvNchwc::c_code(const Node& node, const CodeNames& names, const Sub& sub) const {
  return code(node, names, sub, "", nullptr);
}

std::string ConvNchwc::c_code_with_clamp(const Node& node, const CodeNames& names, const Sub& sub,
                                         const StoreClamp& clamp) const {
  return code(node, names, sub, "", &clamp);
}

std::string ConvNchwc::c_code_with_epilogue(const Node& node, const CodeNames& names,
                                            const Sub& sub, const std::string& epilogue) const {
  return code(node, names, sub, epilogue, nullptr);
}

// What every variant's code is written with: one node's sizes, names and store bounds.
struct ConvNchwc::Emit {
  Geometry g;
  const Sub& sub;
  const CodeNames& names;
  std::string bias;      // "d2" or "0"
  std::string lo_hi;     // the kernels' store bounds
  std::string epilogue;  // run on each finished piece, or ""
  int64_t kb = 0;        // channels side by side at a padded position: a block, or 1 (plain)

  std::string v(int64_t n, std::string_view name) const { return sub.value(n, name); }
  // `e` times kb, folded where kb is 1.
  std::string by_kb(const std::string& e) const {
    return kb == 1 ? e : e + " * " + std::to_string(kb);
  }
  // The epilogue's block, with the piece's bounds declared first ("" without an epilogue).
  std::string run_epilogue(const std::string& bounds) const {
    return epilogue.empty() ? "" : "{\nconst int64_t " + bounds + ";\n" + epilogue + "}\n";
  }
};

namespace {
// Operand k as a dense pointer `d<k>`: itself, or a packed copy in the workspace (a view the
// executor bound).
std::string dense_operand(const Node& node, const CodeNames& names, const Sub& sub, size_t k) {
  static const char* const what[] = {"input", "weight", "bias"};
  const std::string& t = names.inputs[k];
  const std::string p = "d" + std::to_string(k);
  const int rank = node.inputs[k]->type.rank();
  std::string s;
  s += "const float *" + p + " = (const float *)" + t + "->data;\n";
  s += "{\nint dense = 1;\nint64_t c = 1, n = 1;\n";
  s += "for (int d = " + std::to_string(rank - 1) + "; d >= 0; --d) {\n";
  s += "if (" + t + "->shape[d] != 1 && " + t + "->strides[d] != c) dense = 0;\n";
  s += "c *= " + t + "->shape[d];\nn *= " + t + "->shape[d];\n}\n";
  s += "if (!dense) {\n";
  s += c_workspace("float", "copy", "n", std::string("conv_nchwc's dense copy of the ") + what[k]);
  s += "kiln_copy_strided(copy, " + t + "->data, " + std::to_string(rank) + ", " + t + "->shape, " +
       t + "->strides, sizeof(float));\n";
  s += p + " = copy;\n}\n}\n";
  return s;
}
}  // namespace

// A direct convolution's buffers, made once per part: the input rows its positions read,
// zero-padded, per image, and the offsets of each position and tap in them (32-bit: the
// whole padded image must fit).
std::string ConvNchwc::direct_setup(const Emit& e) const {
  const Geometry& g = e.g;
  const int64_t hp = g.h + pads_[0] + pads_[2], wp = g.w + pads_[1] + pads_[3];
  if (g.c * hp * wp >= (int64_t{1} << 31)) {
    throw UnsupportedError("conv_nchwc: a padded image of " + std::to_string(g.c * hp * wp) +
                           " elements (offsets are 32-bit)");
  }
  std::string s;
  s += "const int64_t pp0 = c0 / 8, pp1 = c1 / 8, ow = " + e.v(g.ow, "out_w") +
       ", sh = " + e.v(strides_[0], "stride_h") + ", sw = " + e.v(strides_[1], "stride_w") + ";\n";
  s += "const int64_t oya = pp0 / ow, wpad = " + e.v(wp, "padded_w") +
       ", kh = " + e.v(kernel_[0], "kernel_h") + ", kw = " + e.v(kernel_[1], "kernel_w") +
       ", cb = " + e.v(g.c / e.kb, "c_blocks") + ";\n";
  // Grouped: each group's taps are its own blocks', at the same offsets from its first.
  s += "const int64_t gcb = " + e.v(g.c / e.kb / channel_groups_, "group_c_blocks") +
       ", gmb = " + e.v(g.m / kNchwcBlock / channel_groups_, "group_m_blocks") + ";\n";
  s += "const int64_t rows = ((pp1 - 1) / ow - oya) * sh + kh, iy0 = oya * sh - " +
       e.v(pads_[0], "pad_top") + ";\n";
  s += c_workspace("float", "buf", e.by_kb("cb * rows * wpad"), "conv_nchwc's padded input rows");
  s += c_workspace("int32_t", "pos", "pp1 - pp0", "conv_nchwc's position offsets");
  const int64_t taps = g.c / e.kb / channel_groups_ * kernel_[0] * kernel_[1];
  s += c_workspace("int32_t", "toff", e.v(taps, "taps"), "conv_nchwc's tap offsets");
  s += "for (int64_t c = 0, t = 0; c < gcb; ++c)\n";
  s += "for (int64_t i = 0; i < kh; ++i)\n";
  s += "for (int64_t j = 0; j < kw; ++j, ++t) toff[t] = (int32_t)(" +
       e.by_kb("((c * rows + i) * wpad + j)") + ");\n";
  s += "for (int64_t p = pp0; p < pp1; ++p)\n";
  s += "pos[p - pp0] = (int32_t)(" + e.by_kb("((p / ow - oya) * sh * wpad + p % ow * sw)") + ");\n";
  return s;
}

// One image of a direct convolution: its rows, padding zeroed, then pieces as for a
// pointwise convolution.
std::string ConvNchwc::direct_image(const Emit& e) const {
  const Geometry& g = e.g;
  const std::string left = e.v(pads_[1] * e.kb, "left"), width = e.v(g.w * e.kb, "row_width");
  const std::string in_h = e.v(g.h, "in_h"), row = e.by_kb("wpad");
  std::string s;
  // Only the input blocks of the groups of output blocks [r0, r1) (all of them in group 1).
  s += "const int64_t g_lo = r0 / gmb, g_hi = (r1 - 1) / gmb + 1;\n";
  s += "for (int64_t c = g_lo * gcb; c < g_hi * gcb; ++c)\n";
  s += "for (int64_t rr = 0; rr < rows; ++rr) {\n";
  s += "float *dst = buf + " + e.by_kb("(c * rows + rr) * wpad") + ";\n";
  s += "const int64_t iy = iy0 + rr;\n";
  s += "if (iy < 0 || iy >= " + in_h + ") {\n";
  s += "for (int64_t k = 0; k < " + row + "; ++k) dst[k] = 0;\n";
  s += "continue;\n}\n";
  s += "const float *src = xi + (c * " + in_h + " + iy) * " + width + ";\n";
  s += "for (int64_t k = 0; k < " + left + "; ++k) dst[k] = 0;\n";
  s += "for (int64_t k = 0; k < " + width + "; ++k) dst[" + left + " + k] = src[k];\n";
  s += "for (int64_t k = " + left + " + " + width + "; k < " + row + "; ++k) dst[k] = 0;\n";
  s += "}\n";
  // Pieces of about 128 KB of output, whole output rows where a row fits (the kernel's
  // register blocks run along rows), each finished and its epilogue run while in L2.
  s += "int64_t piece = 131072 / 4 / ((r1 - r0) * 8) / 6 * 48;\n";
  s += "if (piece < 48) piece = 48;\n";
  s += "int64_t piece_rows = piece / 8 / ow;\n";
  // Pieces of even size: an uneven cut left a last piece of a row or two, which passed
  // every weight again for little work.
  s += "if (piece_rows > 0) {\n";
  s += "const int64_t part_rows = (pp1 - 1) / ow - pp0 / ow + 1;\n";
  s += "const int64_t n = (part_rows + piece_rows / 2) / piece_rows;\n";
  s += "piece_rows = n > 1 ? (part_rows + n - 1) / n : part_rows;\n";
  s += "}\n";
  // A window's positions share their input rows: the chunk whose weights pass once is all
  // output rows whose input rows fit 256 KB, not positions x taps (a 7 x 7 map's 3x3 layer
  // re-read 9 MB of weights per 6 positions).
  s += "const int64_t row_bytes = " + e.by_kb("gcb * wpad") + " * 4 * sh;\n";
  s += "const int64_t chunk_rows = 262144 / (row_bytes > 0 ? row_bytes : 1);\n";
  s += "for (int64_t e_c0 = c0, e_c1; e_c0 < c1; e_c0 = e_c1) {\n";
  s += "e_c1 = piece_rows > 0 ? (e_c0 / 8 / ow + piece_rows) * ow * 8 : e_c0 + piece;\n";
  s += "if (e_c1 > c1) e_c1 = c1;\n";
  // One call per group (one in group 1): its output blocks read its input blocks.
  s += "for (int64_t gi = g_lo; gi < g_hi; ++gi) {\n";
  s += "const int64_t b0 = gi * gmb > r0 ? gi * gmb : r0;\n";
  s += "const int64_t b1 = (gi + 1) * gmb < r1 ? (gi + 1) * gmb : r1;\n";
  s += "kiln_nchwc_direct(buf + " + e.by_kb("gi * gcb * rows * wpad") +
       ", pos + (e_c0 / 8 - pp0), toff, " +
       e.v(g.c / e.kb / channel_groups_ * kernel_[0] * kernel_[1], "taps") + ", " +
       std::to_string(e.kb) + ", d1, " + e.bias + ", yi, " + e.v(g.oh * g.ow, "out_hw") + ", ow, " +
       e.by_kb("sw") + ", b0, b1, e_c0 / 8, e_c1 / 8, chunk_rows, " + e.lo_hi + ");\n";
  s += "}\n";
  s += e.run_epilogue("e_r0 = r0, e_r1 = r1");
  s += "}\n";
  return s;
}

// One image of a Winograd convolution. A part's positions are whole rows of tiles
// (c_split_unit), so its first output row is a multiple of the tile.
std::string ConvNchwc::winograd_image(const Emit& e) const {
  const Geometry& g = e.g;
  const std::string row = e.v(g.ow * kNchwcBlock, "row_elems"), T = e.v(winograd_, "tile");
  std::string s;
  s += "const int64_t oy_end = c1 / " + row + ";\n";
  s += "for (int64_t oy = c0 / " + row + "; oy < oy_end; oy += " + T + ") {\n";
  s += "const int64_t oe = oy + " + T + " < oy_end ? oy + " + T + " : oy_end;\n";
  s += std::string(winograd_ == 2 ? "kiln_nchwc_winograd(" : "kiln_nchwc_winograd4(") + "xi, " +
       e.v(g.c, "c") + ", " + e.v(g.h, "in_h") + ", " + e.v(g.w, "in_w") + ", d1, " +
       e.v(g.m, "m") + ", " + e.bias + ", yi, r0, r1, oy, oe, wk, " + e.lo_hi + ");\n";
  s += e.run_epilogue("e_r0 = r0, e_r1 = r1, e_c0 = oy * " + row + ", e_c1 = oe * " + row);
  s += "}\n";
  return s;
}

// One image of a pointwise convolution: pieces of about 128 KB of output, each finished (and
// its epilogue run) while in L2.
std::string ConvNchwc::pointwise_image(const Emit& e) const {
  const Geometry& g = e.g;
  std::string s;
  s += "int64_t piece = 131072 / 4 / ((r1 - r0) * 8) / 6 * 48;\n";
  s += "if (piece < 48) piece = 48;\n";
  // Pieces of even size: 49 positions went as 48 and then 1, which passed every weight
  // again for one position.
  s += "{\n";
  s += "const int64_t n = (c1 - c0 + piece / 2) / piece;\n";
  s += "piece = n > 1 ? ((c1 - c0) / 8 + n - 1) / n * 8 : c1 - c0;\n";
  s += "}\n";
  s += "for (int64_t e_c0 = c0; e_c0 < c1; e_c0 += piece) {\n";
  s += "const int64_t e_c1 = c1 - e_c0 < piece ? c1 : e_c0 + piece;\n";
  s += "kiln_nchwc_pointwise(xi, " + e.v(g.c, "c") + ", " + e.v(g.h * g.w, "in_hw") + ", d1, " +
       e.bias + ", yi, r0, r1, e_c0 / 8, e_c1 / 8, " + e.lo_hi + ");\n";
  s += e.run_epilogue("e_r0 = r0, e_r1 = r1");
  s += "}\n";
  return s;
}

// One image of a depthwise convolution, block by block; the epilogue on runs of whole
// blocks of at least 16 KB, still in L1 or L2.
std::string ConvNchwc::depthwise_image(const Emit& e) const {
  const Geometry& g = e.g;
  const std::string row = e.v(g.ow * kNchwcBlock, "row_elems");
  const bool epi = !e.epilogue.empty();
  std::string s;
  s += "const int64_t oy0 = c0 / " + row + ", oy1 = c1 / " + row + ";\n";
  s += std::string("for (int64_t cb = r0") + (epi ? ", e_r0 = r0" : "") + "; cb < r1; ++cb) {\n";
  s += "kiln_nchwc_depthwise(xi, " + e.v(g.h, "in_h") + ", " + e.v(g.w, "in_w") + ", d1, " +
       e.bias + ", yi, " + e.v(g.oh, "out_h") + ", " + e.v(g.ow, "out_w") + ", " +
       e.v(kernel_[0], "kernel_h") + ", " + e.v(kernel_[1], "kernel_w") + ", " +
       e.v(strides_[0], "stride_h") + ", " + e.v(strides_[1], "stride_w") + ", " +
       e.v(pads_[0], "pad_top") + ", " + e.v(pads_[1], "pad_left") + ", cb, cb + 1, oy0, oy1, " +
       e.lo_hi + ");\n";
  if (epi) {
    s += "if ((cb + 1 - e_r0) * (c1 - c0) * 4 >= 16384 || cb + 1 == r1) {\n";
    s += "const int64_t e_r1 = cb + 1, e_c0 = c0, e_c1 = c1;\n" + e.epilogue;
    s += "e_r0 = cb + 1;\n}\n";
  }
  s += "}\n";
  return s;
}

// Each part runs its tile of every image: output blocks [r0, r1) by columns [c0, c1)
// (positions x 8). Operands that are not contiguous (a view the executor bound) are copied
// first; the kernels index dense blocks.
std::string ConvNchwc::code(const Node& node, const CodeNames& names, const Sub& sub,
                            const std::string& epilogue, const StoreClamp* clamp) const {
  const Geometry g = geometry(node.inputs[0]->type.dims, node.inputs[1]->type.dims);
  const Emit e{g,
               sub,
               names,
               node.inputs.size() == 3 ? "d2" : "0",
               clamp ? clamp->lo + ", " + clamp->hi : "-__builtin_inff(), __builtin_inff()",
               epilogue,
               g.plain ? 1 : kNchwcBlock};
  const SplitTiles tiles = *c_split_tiles(node, names, sub);
  const std::string& ctx = sub.ctx;
  std::string s = "{\n";
  s += "int64_t r0, r1, c0, c1;\n";
  s += "kiln_tile_part(" + tiles.rows + ", " + tiles.cols + ", " + tiles.row_unit + ", " +
       tiles.col_unit + ", " + ctx + "->part, " + ctx + "->n_parts, &r0, &r1, &c0, &c1);\n";
  s += "if (r0 < r1 && c0 < c1) {\n";
  for (size_t k = 0; k < node.inputs.size(); ++k) s += dense_operand(node, names, sub, k);
  const bool direct = !depthwise() && !winograd_ && (!pointwise() || g.plain);
  if (winograd_) {
    // One row of tiles per call: its transformed input and products ((T + 2)^2 x (C + the
    // part's output channels) x tiles floats) stay in L2 between the kernel's three steps
    // (F(2x2): two rows ran 3-19% slower on one core, four 8-20%; F(4x4): 1, 2 and 4 rows
    // within 3%).
    const int64_t tile = winograd_;
    s += c_workspace("float", "wk",
                     e.v((tile + 2) * (tile + 2), "tile_elems") + " * (" + e.v(g.c, "c") +
                         " + (r1 - r0) * 8) * " + e.v((g.ow + tile - 1) / tile, "tiles_w"),
                     "conv_nchwc's Winograd tiles");
  }
  if (direct) s += direct_setup(e);
  s += "for (int64_t e_n = 0; e_n < " + names.inputs[0] + "->shape[0]; ++e_n) {\n";
  s += "const float *xi = d0 + e_n * " + e.v(g.c * g.h * g.w, "img_in") + ";\n";
  s += "float *yi = (float *)" + names.outputs[0] + "->data + e_n * " +
       e.v(g.m * g.oh * g.ow, "img_out") + ";\n";
  if (direct) {
    s += direct_image(e);
  } else if (winograd_) {
    s += winograd_image(e);
  } else if (!depthwise()) {
    s += pointwise_image(e);
  } else {
    s += depthwise_image(e);
  }
  s += "}\n}\n}\n";
  return s;
}

}  // namespace kiln
