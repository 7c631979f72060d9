#include "ops/conv_transpose_fold.h"

#include "ops/c/workspace.h"
#include "util/error.h"

namespace kiln {

ConvTransposeFold::ConvTransposeFold(Attrs props) : COp("conv_transpose_fold", std::move(props)) {
  check_known_attrs(this->props(), {"strides", "dilations", "pads", "output_padding"});
  window_ = TransposedWindow::from_props(this->props(), "conv_transpose_fold");
}

int ConvTransposeFold::spatial_rank(int rank) {
  if (rank < 5 || rank > 9 || (rank - 3) % 2 != 0) {
    throw UserError(
        "conv_transpose_fold: cols must be (N, in..., G, k..., mg) for 1 to 3 "
        "spatial dimensions, got rank " +
        std::to_string(rank));
  }
  return (rank - 3) / 2;
}

std::vector<TransposedDim> ConvTransposeFold::geometry(const std::vector<int64_t>& cols) const {
  const std::ptrdiff_t k = spatial_rank(static_cast<int>(cols.size()));
  return window_.resolve(std::vector<int64_t>(cols.begin() + 1, cols.begin() + 1 + k),
                         std::vector<int64_t>(cols.begin() + 2 + k, cols.begin() + 2 + 2 * k),
                         "conv_transpose_fold");
}

std::vector<TensorType> ConvTransposeFold::infer_type(const std::vector<TensorType>& inputs) const {
  if (inputs.size() != 1 && inputs.size() != 2)
    throw UserError("conv_transpose_fold takes 1 or 2 inputs (cols[, B])");
  const TensorType& c = inputs[0];
  if (c.dtype != DType::kFloat32 && c.dtype != DType::kFloat64)
    throw UnsupportedError("conv_transpose_fold: " + c.to_string() + " input");
  const int k = spatial_rank(c.rank());
  const int64_t g = c.dims[static_cast<size_t>(k) + 1], mg = c.dims.back();
  for (int d = k + 1; d < c.rank(); ++d) {
    if (c.dims[static_cast<size_t>(d)] == kDynamic)
      throw UnsupportedError(
          "conv_transpose_fold: groups, kernel and channels must be static, "
          "got " +
          c.to_string());
  }
  if (inputs.size() == 2) {
    const TensorType& b = inputs[1];
    if (b.dtype != c.dtype || b.rank() != 1 || (b.dims[0] != kDynamic && b.dims[0] != g * mg)) {
      throw UserError("conv_transpose_fold: bias " + b.to_string() + " must be " +
                      std::string(dtype_name(c.dtype)) + " (" + std::to_string(g * mg) + ")");
    }
  }
  TensorType out{c.dtype, {c.dims[0], g * mg}};
  for (const auto& d : geometry(c.dims)) out.dims.push_back(d.out);
  return {out};
}

std::vector<Shape> ConvTransposeFold::infer_shape(const std::vector<Shape>& inputs) const {
  const Shape& c = inputs[0];
  const int k = spatial_rank(static_cast<int>(c.size()));
  Shape out{c[0], c[static_cast<size_t>(k) + 1] * c.back()};
  if (inputs.size() == 2 && inputs[1][0] != out[1]) {
    throw UserError("conv_transpose_fold: bias has " + std::to_string(inputs[1][0]) +
                    " entries for " + std::to_string(out[1]) + " output channels");
  }
  for (const auto& d : geometry(c)) out.push_back(d.out);
  return {out};
}

void ConvTransposeFold::perform(const std::vector<Tensor>& inputs,
                                std::vector<Tensor>& outputs) const {
  const Tensor& cols = inputs[0];
  Tensor& y = outputs[0];
  const int k = spatial_rank(cols.ndim());
  auto geo = geometry(cols.shape());
  while (geo.size() < 3) geo.insert(geo.begin(), TransposedDim{1, 1, 1, 1, 0, 1});
  const int64_t N = cols.shape()[0], G = cols.shape()[static_cast<size_t>(k) + 1];
  const int64_t mg = cols.shape().back(), M = G * mg;
  const int64_t ik = geo[0].in * geo[1].in * geo[2].in, ok = geo[0].out * geo[1].out * geo[2].out;
  const int64_t kk = geo[0].kernel * geo[1].kernel * geo[2].kernel;
  std::vector<double> acc(static_cast<size_t>(N * M * ok), 0.0);
  // cols flat: ((n * ik + i) * G + g) * kk * mg + t * mg + j.
  for (int64_t n = 0; n < N; ++n) {
    for (int64_t i = 0; i < ik; ++i) {
      const int64_t iz = i / (geo[1].in * geo[2].in), iy = i / geo[2].in % geo[1].in,
                    ix = i % geo[2].in;
      for (int64_t t = 0; t < kk; ++t) {
        const int64_t kz = t / (geo[1].kernel * geo[2].kernel),
                      ky = t / geo[2].kernel % geo[1].kernel, kx = t % geo[2].kernel;
        const int64_t oz = iz * geo[0].stride - geo[0].pad_begin + kz * geo[0].dilation;
        const int64_t oy = iy * geo[1].stride - geo[1].pad_begin + ky * geo[1].dilation;
        const int64_t ox = ix * geo[2].stride - geo[2].pad_begin + kx * geo[2].dilation;
        if (oz < 0 || oz >= geo[0].out || oy < 0 || oy >= geo[1].out || ox < 0 || ox >= geo[2].out)
          continue;
        const int64_t pos = (oz * geo[1].out + oy) * geo[2].out + ox;
        for (int64_t g = 0; g < G; ++g) {
          for (int64_t j = 0; j < mg; ++j) {
            acc[static_cast<size_t>((n * M + g * mg + j) * ok + pos)] +=
                cols.load((((n * ik + i) * G + g) * kk + t) * mg + j);
          }
        }
      }
    }
  }
  for (int64_t o = 0; o < N * M * ok; ++o) {
    const double b = inputs.size() == 2 ? inputs[1].load(o / ok % M) : 0.0;
    y.store(o, acc[static_cast<size_t>(o)] + b);
  }
}

std::string ConvTransposeFold::c_support_code() const {
  // cs: cols' strides as (n, iz, iy, ix, g, kz, ky, kx, j), 1-D and 2-D padded at the front.
  // For tap kx, the input columns whose output lands in [0, od[2]) are a range: no test per
  // element, and the mg run of each (column, group) adds as one vector loop.
  std::string s =
      R"(#define KILN_CONVT_FOLD(T, S)                                                    \
__attribute__((unused)) static void kiln_convt_fold_##S(                                        \
    const T *cols, const int64_t *cs, const T *bias, int64_t bs, T *y, const int64_t *in,       \
    const int64_t *ker, const int64_t *od, const int64_t *st, const int64_t *dl,                \
    const int64_t *pb, int64_t G, int64_t mg, int64_t r0, int64_t r1, T *buf) {                 \
  const int64_t C = G * mg, ow = od[2], ok = od[0] * od[1] * od[2];                               \
  for (int64_t r = r0; r < r1; ++r) {                                                             \
    const int64_t n = r / (od[0] * od[1]), oz = r / od[1] % od[0], oy = r % od[1];                \
    for (int64_t x = 0; x < ow; ++x)                                                              \
      for (int64_t c = 0; c < C; ++c) buf[x * C + c] = bias ? bias[c * bs] : (T)0;                \
    for (int64_t kz = 0; kz < ker[0]; ++kz) {                                                     \
      const int64_t tz = oz + pb[0] - kz * dl[0];                                                 \
      if (tz < 0 || tz % st[0] != 0 || tz / st[0] >= in[0]) continue;                             \
      for (int64_t ky = 0; ky < ker[1]; ++ky) {                                                   \
        const int64_t ty = oy + pb[1] - ky * dl[1];                                               \
        if (ty < 0 || ty % st[1] != 0 || ty / st[1] >= in[1]) continue;                           \
        const T *base = cols + n * cs[0] + tz / st[0] * cs[1] + ty / st[1] * cs[2] +              \
                        kz * cs[5] + ky * cs[6];                                                  \
        for (int64_t kx = 0; kx < ker[2]; ++kx) {                                                 \
          const int64_t lo = pb[2] - kx * dl[2], hi = ow - 1 + pb[2] - kx * dl[2];                \
          if (hi < 0) continue;                                                                   \
          const int64_t x0 = lo <= 0 ? 0 : (lo + st[2] - 1) / st[2];                              \
          const int64_t x1 = hi / st[2] + 1 < in[2] ? hi / st[2] + 1 : in[2];                     \
          for (int64_t ix = x0; ix < x1; ++ix) {                                                  \
            T *dst = buf + (ix * st[2] - lo) * C;                                                 \
            for (int64_t g = 0; g < G; ++g) {                                                     \
              const T *src = base + ix * cs[3] + g * cs[4] + kx * cs[7];                          \
              T *d = dst + g * mg;                                                                \
              if (cs[8] == 1)                                                                     \
                for (int64_t j = 0; j < mg; ++j) d[j] += src[j];                                  \
              else                                                                                \
                for (int64_t j = 0; j < mg; ++j) d[j] += src[j * cs[8]];                          \
            }                                                                                     \
          }                                                                                       \
        }                                                                                         \
      }                                                                                           \
    }                                                                                             \
    T *o = y + n * C * ok + (oz * od[1] + oy) * ow;                                               \
    for (int64_t c = 0; c < C; ++c)                                                               \
      for (int64_t x = 0; x < ow; ++x) o[c * ok + x] = buf[x * C + c];                            \
  }                                                                                               \
}
KILN_CONVT_FOLD(float, f32)
KILN_CONVT_FOLD(double, f64)
)";
  return s;
}

std::string ConvTransposeFold::c_code(const Node& node, const CodeNames& names,
                                      const Sub& sub) const {
  const TensorType& ct = node.inputs[0]->type;
  const bool f32 = ct.dtype == DType::kFloat32;
  const std::string T = f32 ? "float" : "double", S = f32 ? "f32" : "f64";
  const int k = spatial_rank(ct.rank());
  const auto geo = geometry(ct.dims);
  const std::string& X = names.inputs[0];
  const std::string& Y = names.outputs[0];
  const std::string& ctx = sub.ctx;
  const std::string ks = std::to_string(k);
  std::string s = "{\n";
  s += transposed_window_c(geo, sub);
  s += "  int64_t t_in[3] = {1, 1, 1}, t_ker[3] = {1, 1, 1}, t_od[3] = {1, 1, 1};\n";
  s += "  int64_t t_cs[9] = {0, 0, 0, 0, 0, 0, 0, 0, 0};\n";
  s += "  for (int d = 0; d < " + ks + "; ++d) {\n";
  s += "    const int e = 3 - " + ks + " + d;\n";
  s += "    t_in[e] = " + X + "->shape[1 + d]; t_cs[1 + e] = " + X + "->strides[1 + d];\n";
  s += "    t_ker[e] = " + X + "->shape[" + std::to_string(k + 2) + " + d]; t_cs[5 + e] = " + X +
       "->strides[" + std::to_string(k + 2) + " + d];\n";
  s += "    t_od[e] = " + Y + "->shape[2 + d];\n";
  s += "  }\n";
  s += "  t_cs[0] = " + X + "->strides[0]; t_cs[4] = " + X + "->strides[" + std::to_string(k + 1) +
       "]; t_cs[8] = " + X + "->strides[" + std::to_string(2 * k + 2) + "];\n";
  s += "  const int64_t G = " + X + "->shape[" + std::to_string(k + 1) + "], mg = " + X +
       "->shape[" + std::to_string(2 * k + 2) + "];\n";
  s += "  const int64_t rows = " + X + "->shape[0] * t_od[0] * t_od[1];\n";
  s += "  const int64_t r0 = rows * " + ctx + "->part / " + ctx + "->n_parts;\n";
  s += "  const int64_t r1 = rows * (" + ctx + "->part + 1) / " + ctx + "->n_parts;\n";
  s += "  if (r1 > r0) {\n";
  s += "  " + c_workspace(T, "buf", "t_od[2] * G * mg", "conv_transpose_fold's row");
  const bool bias = node.inputs.size() == 2;
  const std::string B = bias ? "(const " + T + " *)" + names.inputs[1] + "->data" : "NULL";
  const std::string bs = bias ? names.inputs[1] + "->strides[0]" : "0";
  s += "  kiln_convt_fold_" + S + "((const " + T + " *)" + X + "->data, t_cs, " + B + ", " + bs +
       ", (" + T + " *)" + Y +
       "->data, t_in, t_ker, t_od, t_st, t_dl, t_pb, G, mg, r0, r1, buf);\n";
  s += "  }\n}\n";
  return s;
}

}  // namespace kiln
