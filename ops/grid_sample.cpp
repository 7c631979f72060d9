#include "ops/grid_sample.h"

#include <cmath>

#include "ops/builders.h"
#include "ops/c/c_text.h"
#include "ops/grad/support.h"
#include "util/error.h"

namespace kiln {
namespace {

// The sampling rule, written once in C: the generated code includes it, and perform runs the
// same text compiled into kiln (so the oracle for the generated code is the rule itself, and
// the ONNX conformance cases and PyTorch check the rule).
#define KILN_GRID_SAMPLE_RULES                                                                    \
  KILN_GS_FN double kiln_gs_unnorm(double g, int64_t size, int align) {                           \
    const double x =                                                                              \
        align ? (g + 1) * 0.5 * (double)(size - 1) : ((g + 1) * (double)size - 1) * 0.5;          \
    /* An infinite coordinate becomes a finite one far outside: every rule stays defined. */      \
    return isinf(x) ? (x > 0 ? 1e9 : -1e9) : x;                                                   \
  }                                                                                               \
  KILN_GS_FN double kiln_gs_clip(double x, int64_t size) {                                        \
    return x < 0 ? 0 : (x > (double)(size - 1) ? (double)(size - 1) : x);                         \
  }                                                                                               \
  /* Reflection off the image's edges: the pixel centres with align_corners, the outer edges      \
     without. */                                                                                  \
  KILN_GS_FN double kiln_gs_reflect(double x, int64_t size, int align) {                          \
    const double lo2 = align ? 0.0 : -1.0,                                                        \
                 hi2 = align ? 2.0 * (double)(size - 1) : 2.0 * (double)size - 1;                 \
    if (lo2 == hi2) return 0;                                                                     \
    const double lo = lo2 / 2, span = (hi2 - lo2) / 2;                                            \
    x = fabs(x - lo);                                                                             \
    const double extra = fmod(x, span);                                                           \
    return fmod(floor(x / span), 2.0) == 0 ? extra + lo : span - extra + lo;                      \
  }                                                                                               \
  KILN_GS_FN double kiln_gs_pad(double x, int64_t size, int padding, int align) {                 \
    if (padding == 1) return kiln_gs_clip(x, size);                                               \
    if (padding == 2) return kiln_gs_clip(kiln_gs_reflect(x, size, align), size);                 \
    return x;                                                                                     \
  }                                                                                               \
  KILN_GS_FN double kiln_gs_cubic(double t, int k) { /* Keys, a = -0.75: tap k of 4 */            \
    const double a = -0.75, d = k == 0 ? t + 1 : (k == 1 ? t : (k == 2 ? 1 - t : 2 - t));         \
    return d <= 1 ? ((a + 2) * d - (a + 3)) * d * d + 1                                           \
                  : ((a * d - 5 * a) * d + 8 * a) * d - 4 * a;                                    \
  }                                                                                               \
  /* Output position (n, oy, ox) of every channel: taps (offsets into X's image, -1 where a       \
     tap reads nothing) and weights. Returns 0 for a NaN coordinate. */                           \
  KILN_GS_FN int kiln_gs_taps(double gx, double gy, int64_t h, int64_t w, int64_t sy, int64_t sx, \
                              int mode, int padding, int align, int64_t* off, double* wt,         \
                              int* count) {                                                       \
    double x = kiln_gs_unnorm(gx, w, align), y = kiln_gs_unnorm(gy, h, align);                    \
    if (isnan(x) || isnan(y)) return 0;                                                           \
    if (mode == 2) {                                                                              \
      const double fx = floor(x), fy = floor(y);                                                  \
      for (int i = 0; i < 4; ++i) {                                                               \
        for (int j = 0; j < 4; ++j) {                                                             \
          const double ty = kiln_gs_pad(fy - 1 + i, h, padding, align);                           \
          const double tx = kiln_gs_pad(fx - 1 + j, w, padding, align);                           \
          const int in = ty >= 0 && ty <= (double)(h - 1) && tx >= 0 && tx <= (double)(w - 1);    \
          off[i * 4 + j] = in ? (int64_t)ty * sy + (int64_t)tx * sx : -1;                         \
          wt[i * 4 + j] = kiln_gs_cubic(y - fy, i) * kiln_gs_cubic(x - fx, j);                    \
        }                                                                                         \
      }                                                                                           \
      *count = 16;                                                                                \
      return 1;                                                                                   \
    }                                                                                             \
    x = kiln_gs_pad(x, w, padding, align);                                                        \
    y = kiln_gs_pad(y, h, padding, align);                                                        \
    if (mode == 0) {                                                                              \
      const double rx = nearbyint(x), ry = nearbyint(y);                                          \
      const int in = ry >= 0 && ry <= (double)(h - 1) && rx >= 0 && rx <= (double)(w - 1);        \
      off[0] = in ? (int64_t)ry * sy + (int64_t)rx * sx : -1;                                     \
      wt[0] = 1;                                                                                  \
      *count = 1;                                                                                 \
      return 1;                                                                                   \
    }                                                                                             \
    const double fx = floor(x), fy = floor(y), dx = x - fx, dy = y - fy;                          \
    for (int i = 0; i < 2; ++i) {                                                                 \
      for (int j = 0; j < 2; ++j) {                                                               \
        const double ty = fy + i, tx = fx + j;                                                    \
        const int in = ty >= 0 && ty <= (double)(h - 1) && tx >= 0 && tx <= (double)(w - 1);      \
        off[i * 2 + j] = in ? (int64_t)ty * sy + (int64_t)tx * sx : -1;                           \
        wt[i * 2 + j] = (i ? dy : 1 - dy) * (j ? dx : 1 - dx);                                    \
      }                                                                                           \
    }                                                                                             \
    *count = 4;                                                                                   \
    return 1;                                                                                     \
  }

// The gradient's rules: the padded coordinate with its derivative, and, per output position,
// the taps with their weights' derivatives in x and y (of the unnormalised coordinate).
#define KILN_GRID_SAMPLE_GRAD_RULES                                                                \
  KILN_GS_FN double kiln_gs_pad_d(double x, int64_t size, int padding, int align, double* d) {     \
    double s = 1;                                                                                  \
    if (padding == 0) {                                                                            \
      *d = 1;                                                                                      \
      return x;                                                                                    \
    }                                                                                              \
    if (padding == 2) {                                                                            \
      const double lo2 = align ? 0.0 : -1.0,                                                       \
                   hi2 = align ? 2.0 * (double)(size - 1) : 2.0 * (double)size - 1;                \
      if (lo2 == hi2) {                                                                            \
        *d = 0;                                                                                    \
        return 0;                                                                                  \
      }                                                                                            \
      const double lo = lo2 / 2, span = (hi2 - lo2) / 2;                                           \
      double in = x - lo;                                                                          \
      if (in < 0) {                                                                                \
        in = -in;                                                                                  \
        s = -1;                                                                                    \
      }                                                                                            \
      const double extra = fmod(in, span);                                                         \
      if (fmod(floor(in / span), 2.0) == 0) {                                                      \
        x = extra + lo;                                                                            \
      } else {                                                                                     \
        x = span - extra + lo;                                                                     \
        s = -s;                                                                                    \
      }                                                                                            \
    }                                                                                              \
    if (x <= 0 || x >= (double)(size - 1)) {                                                       \
      *d = 0;                                                                                      \
      return x <= 0 ? 0 : (double)(size - 1);                                                      \
    }                                                                                              \
    *d = s;                                                                                        \
    return x;                                                                                      \
  }                                                                                                \
  KILN_GS_FN double kiln_gs_cubic_d(double t, int k) { /* d/dt of kiln_gs_cubic(t, k) */           \
    const double a = -0.75, d = k == 0 ? t + 1 : (k == 1 ? t : (k == 2 ? 1 - t : 2 - t));          \
    const double dd = k < 2 ? 1.0 : -1.0;                                                          \
    return dd * (d <= 1 ? (3 * (a + 2) * d - 2 * (a + 3)) * d : (3 * a * d - 10 * a) * d + 8 * a); \
  }                                                                                                \
  /* Taps as kiln_gs_taps, with dwx[t], dwy[t]: the derivatives of tap t's weight in the grid's    \
     x and y. Returns 0 for a NaN coordinate. */                                                   \
  KILN_GS_FN int kiln_gs_taps_d(double gx, double gy, int64_t h, int64_t w, int64_t sy,            \
                                int64_t sx, int mode, int padding, int align, int64_t* off,        \
                                double* wt, double* dwx, double* dwy, int* count) {                \
    const double x0 = kiln_gs_unnorm(gx, w, align), y0 = kiln_gs_unnorm(gy, h, align);             \
    if (isnan(x0) || isnan(y0)) return 0;                                                          \
    /* d(unnormalised)/d(grid), 0 where an infinite coordinate was moved outside. */               \
    const double ax = isinf(gx) ? 0 : (align ? 0.5 * (double)(w - 1) : 0.5 * (double)w);           \
    const double ay = isinf(gy) ? 0 : (align ? 0.5 * (double)(h - 1) : 0.5 * (double)h);           \
    if (!kiln_gs_taps(gx, gy, h, w, sy, sx, mode, padding, align, off, wt, count)) return 0;       \
    if (mode == 0) {                                                                               \
      dwx[0] = dwy[0] = 0;                                                                         \
      return 1;                                                                                    \
    }                                                                                              \
    if (mode == 2) {                                                                               \
      const double fx = floor(x0), fy = floor(y0);                                                 \
      for (int i = 0; i < 4; ++i) {                                                                \
        for (int j = 0; j < 4; ++j) {                                                              \
          dwx[i * 4 + j] = kiln_gs_cubic(y0 - fy, i) * kiln_gs_cubic_d(x0 - fx, j) * ax;           \
          dwy[i * 4 + j] = kiln_gs_cubic_d(y0 - fy, i) * kiln_gs_cubic(x0 - fx, j) * ay;           \
        }                                                                                          \
      }                                                                                            \
      return 1;                                                                                    \
    }                                                                                              \
    double px, py;                                                                                 \
    const double x = kiln_gs_pad_d(x0, w, padding, align, &px);                                    \
    const double y = kiln_gs_pad_d(y0, h, padding, align, &py);                                    \
    const double dx = x - floor(x), dy = y - floor(y);                                             \
    for (int i = 0; i < 2; ++i) {                                                                  \
      for (int j = 0; j < 2; ++j) {                                                                \
        dwx[i * 2 + j] = (i ? dy : 1 - dy) * (j ? 1.0 : -1.0) * px * ax;                           \
        dwy[i * 2 + j] = (i ? 1.0 : -1.0) * (j ? dx : 1 - dx) * py * ay;                           \
      }                                                                                            \
    }                                                                                              \
    return 1;                                                                                      \
  }

#define KILN_GS_FN static
#define isnan std::isnan
#define isinf std::isinf
using std::fabs;
using std::floor;
using std::fmod;
using std::nearbyint;
KILN_GRID_SAMPLE_RULES
KILN_GRID_SAMPLE_GRAD_RULES
#undef isnan
#undef isinf
#undef KILN_GS_FN

const char* const kRulesC = KILN_C_TEXT(KILN_GRID_SAMPLE_RULES);
const char* const kGradRulesC = KILN_C_TEXT(KILN_GRID_SAMPLE_GRAD_RULES);

}  // namespace

GridSample::GridSample(Attrs props) : COp("grid_sample", std::move(props)) {
  check_known_attrs(this->props(), {"mode", "padding_mode", "align_corners"});
  const std::string mode = attr_string(this->props(), "mode", std::string("bilinear"));
  if (mode == "bilinear" || mode == "linear")
    mode_ = kBilinear;
  else if (mode == "nearest")
    mode_ = kNearest;
  else if (mode == "bicubic" || mode == "cubic")
    mode_ = kBicubic;
  else
    throw AttrError("mode", "'" + mode + "' is not bilinear, nearest or bicubic (grid_sample)");
  const std::string pad = attr_string(this->props(), "padding_mode", std::string("zeros"));
  if (pad == "zeros")
    padding_ = kZeros;
  else if (pad == "border")
    padding_ = kBorder;
  else if (pad == "reflection")
    padding_ = kReflection;
  else
    throw AttrError("padding_mode",
                    "'" + pad + "' is not zeros, border or reflection (grid_sample)");
  align_ = attr_int(this->props(), "align_corners", 0) != 0;
}

std::vector<TensorType> GridSample::infer_type(const std::vector<TensorType>& inputs) const {
  if (inputs.size() != 2) throw UserError("grid_sample takes 2 inputs (X, grid)");
  const TensorType& x = inputs[0];
  const TensorType& g = inputs[1];
  if (x.dtype != DType::kFloat32 && x.dtype != DType::kFloat64)
    throw UnsupportedError("grid_sample: " + x.to_string() + " input (float32 and float64)");
  if (x.rank() != 4) {
    throw UnsupportedError("grid_sample: a rank-" + std::to_string(x.rank()) +
                           " input (2-D images (N, C, H, W) are supported)");
  }
  if (g.dtype != x.dtype || g.rank() != 4 || g.dims[3] != 2) {
    throw UserError("grid_sample: grid " + g.to_string() + " must be " +
                    std::string(dtype_name(x.dtype)) + " (N, H_out, W_out, 2)");
  }
  if (x.dims[0] != kDynamic && g.dims[0] != kDynamic && x.dims[0] != g.dims[0]) {
    throw UserError("grid_sample: grid " + g.to_string() + " and input " + x.to_string() +
                    " differ in batch");
  }
  return {TensorType{x.dtype, {x.dims[0], x.dims[1], g.dims[1], g.dims[2]}}};
}

std::vector<Shape> GridSample::infer_shape(const std::vector<Shape>& inputs) const {
  const Shape& x = inputs[0];
  const Shape& g = inputs[1];
  if (x[0] != g[0]) {
    throw UserError("grid_sample: a grid of batch " + std::to_string(g[0]) + " for an input of " +
                    std::to_string(x[0]));
  }
  if ((x[2] == 0 || x[3] == 0) && g[1] * g[2] > 0)
    throw UserError("grid_sample: sampling an empty image");
  return {Shape{x[0], x[1], g[1], g[2]}};
}

void GridSample::perform(const std::vector<Tensor>& inputs, std::vector<Tensor>& outputs) const {
  const Tensor& x = inputs[0];
  const Tensor& g = inputs[1];
  Tensor& y = outputs[0];
  const int64_t N = x.shape()[0], C = x.shape()[1], H = x.shape()[2], W = x.shape()[3];
  const int64_t Ho = g.shape()[1], Wo = g.shape()[2];
  int64_t off[16];
  double wt[16];
  int count = 0;
  for (int64_t n = 0; n < N; ++n) {
    for (int64_t p = 0; p < Ho * Wo; ++p) {
      const double gx = g.load((n * Ho * Wo + p) * 2), gy = g.load((n * Ho * Wo + p) * 2 + 1);
      const bool ok = kiln_gs_taps(gx, gy, H, W, W, 1, mode_, padding_, align_, off, wt, &count);
      for (int64_t c = 0; c < C; ++c) {
        double v = ok ? 0.0 : std::nan("");
        for (int t = 0; ok && t < count; ++t) {
          if (off[t] >= 0) v += wt[t] * x.load((n * C + c) * H * W + off[t]);
        }
        y.store((n * C + c) * Ho * Wo + p, v);
      }
    }
  }
}

const char* GridSample::rules_c() { return kRulesC; }

std::string GridSample::c_support_code() const {
  return std::string("#define KILN_GS_FN __attribute__((unused)) static\n") + kRulesC + "\n";
}

std::string GridSample::c_code(const Node& node, const CodeNames& names, const Sub& sub) const {
  const std::string T(dtype_c_type(node.inputs[0]->type.dtype));
  const std::string& X = names.inputs[0];
  const std::string& G = names.inputs[1];
  const std::string& Y = names.outputs[0];
  const std::string& ctx = sub.ctx;
  std::string s = "{\n";
  s += "  const int64_t g_n = " + X + "->shape[0], g_c = " + X + "->shape[1], g_h = " + X +
       "->shape[2], g_w = " + X + "->shape[3];\n";
  s += "  const int64_t g_ho = " + G + "->shape[1], g_wo = " + G + "->shape[2];\n";
  s += "  const int64_t g_rows = g_n * g_ho;\n";
  s += "  const int64_t g_r0 = g_rows * " + ctx + "->part / " + ctx + "->n_parts;\n";
  s += "  const int64_t g_r1 = g_rows * (" + ctx + "->part + 1) / " + ctx + "->n_parts;\n";
  s += "  const " + T + " *g_x = (const " + T + " *)" + X + "->data;\n";
  s += "  const " + T + " *g_g = (const " + T + " *)" + G + "->data;\n";
  s += "  " + T + " *g_y = (" + T + " *)" + Y + "->data;\n";
  s += "  int64_t g_off[16];\n  double g_wt[16];\n  int g_count = 0;\n";
  s += "  for (int64_t r = g_r0; r < g_r1; ++r) {\n";
  s += "    const int64_t n = r / g_ho, oy = r % g_ho;\n";
  s += "    for (int64_t ox = 0; ox < g_wo; ++ox) {\n";
  s += "      const " + T + " *gp = g_g + n * " + G + "->strides[0] + oy * " + G +
       "->strides[1] + ox * " + G + "->strides[2];\n";
  s += "      const int ok = kiln_gs_taps((double)gp[0], (double)gp[" + G +
       "->strides[3]], g_h, g_w, " + X + "->strides[2], " + X + "->strides[3], " +
       std::to_string(mode_) + ", " + std::to_string(padding_) + ", " +
       std::to_string(align_ ? 1 : 0) + ", g_off, g_wt, &g_count);\n";
  s += "      " + T + " *yp = g_y + (n * g_c * g_ho + oy) * g_wo + ox;\n";
  s += "      const " + T + " *xp = g_x + n * " + X + "->strides[0];\n";
  s += "      for (int64_t c = 0; c < g_c; ++c) {\n";
  s += "        double v = ok ? 0.0 : (double)NAN;\n";
  s += "        for (int t = 0; ok && t < g_count; ++t)\n";
  s += "          if (g_off[t] >= 0) v += g_wt[t] * (double)xp[c * " + X +
       "->strides[1] + g_off[t]];\n";
  s += "        yp[c * g_ho * g_wo] = (" + T + ")v;\n";
  s += "      }\n";
  s += "    }\n";
  s += "  }\n}\n";
  return s;
}

std::vector<Variable*> GridSample::grad(const GradArgs& args) const {
  std::vector<Var> d = apply_multi(
      "grid_sample_grad", {grad_in(args, 0), grad_in(args, 1), grad_of_out(args, 0)}, props());
  std::vector<Variable*> out(2, nullptr);
  if (args.wanted[0]) out[0] = d[0].var();
  if (args.wanted[1]) out[1] = d[1].var();
  return out;
}

GridSampleGrad::GridSampleGrad(Attrs props)
    : COp("grid_sample_grad", props), forward_(std::move(props)) {}

std::vector<TensorType> GridSampleGrad::infer_type(const std::vector<TensorType>& inputs) const {
  if (inputs.size() != 3) throw UserError("grid_sample_grad takes 3 inputs (X, grid, dY)");
  const TensorType y = forward_.infer_type({inputs[0], inputs[1]}).at(0);
  if (inputs[2].dtype != y.dtype || inputs[2].rank() != 4)
    throw UserError("grid_sample_grad: dY " + inputs[2].to_string() + " must be " + y.to_string());
  return {inputs[0], inputs[1]};
}

std::vector<Shape> GridSampleGrad::infer_shape(const std::vector<Shape>& inputs) const {
  if (forward_.infer_shape({inputs[0], inputs[1]}).at(0) != inputs[2])
    throw UserError("grid_sample_grad: dY's shape does not match the forward output's");
  return {inputs[0], inputs[1]};
}

void GridSampleGrad::perform(const std::vector<Tensor>& inputs,
                             std::vector<Tensor>& outputs) const {
  const Tensor& x = inputs[0];
  const Tensor& g = inputs[1];
  const Tensor& dy = inputs[2];
  const int64_t N = x.shape()[0], C = x.shape()[1], H = x.shape()[2], W = x.shape()[3];
  const int64_t Ho = g.shape()[1], Wo = g.shape()[2], P = Ho * Wo;
  std::vector<double> dx(static_cast<size_t>(x.numel()), 0.0);
  int64_t off[16] = {};
  double wt[16] = {}, dwx[16] = {}, dwy[16] = {};
  int count = 0;
  for (int64_t n = 0; n < N; ++n) {
    for (int64_t p = 0; p < P; ++p) {
      const double gx = g.load((n * P + p) * 2), gy = g.load((n * P + p) * 2 + 1);
      double sx = 0, sy = 0;
      if (!kiln_gs_taps_d(gx, gy, H, W, W, 1, forward_.mode_, forward_.padding_, forward_.align_,
                          off, wt, dwx, dwy, &count)) {
        sx = sy = std::nan("");
        count = 0;
      }
      for (int64_t c = 0; c < C; ++c) {
        const double go = dy.load((n * C + c) * P + p);
        for (int t = 0; t < count; ++t) {
          if (off[t] < 0) continue;
          const int64_t at = (n * C + c) * H * W + off[t];
          dx[static_cast<size_t>(at)] += wt[t] * go;
          sx += go * x.load(at) * dwx[t];
          sy += go * x.load(at) * dwy[t];
        }
      }
      outputs[1].store((n * P + p) * 2, sx);
      outputs[1].store((n * P + p) * 2 + 1, sy);
    }
  }
  for (int64_t i = 0; i < x.numel(); ++i) outputs[0].store(i, dx[static_cast<size_t>(i)]);
}

std::string GridSampleGrad::c_support_code() const {
  return forward_.c_support_code() + kGradRulesC + "\n";
}

std::string GridSampleGrad::c_code(const Node& node, const CodeNames& names, const Sub&) const {
  const std::string T(dtype_c_type(node.inputs[0]->type.dtype));
  const std::string& X = names.inputs[0];
  const std::string& G = names.inputs[1];
  const std::string& D = names.inputs[2];
  const std::string& DX = names.outputs[0];
  const std::string& DG = names.outputs[1];
  std::string s = "{\n";
  s += "  const int64_t g_n = " + X + "->shape[0], g_c = " + X + "->shape[1], g_h = " + X +
       "->shape[2], g_w = " + X + "->shape[3];\n";
  s += "  const int64_t g_ho = " + G + "->shape[1], g_wo = " + G + "->shape[2];\n";
  s += "  const " + T + " *g_x = (const " + T + " *)" + X + "->data;\n";
  s += "  const " + T + " *g_g = (const " + T + " *)" + G + "->data;\n";
  s += "  const " + T + " *g_d = (const " + T + " *)" + D + "->data;\n";
  s += "  " + T + " *g_dx = (" + T + " *)" + DX + "->data;\n";
  s += "  " + T + " *g_dg = (" + T + " *)" + DG + "->data;\n";
  // dX is a fresh contiguous buffer (N, C, H, W).
  s += "  for (int64_t i = 0; i < g_n * g_c * g_h * g_w; ++i) g_dx[i] = 0;\n";
  s += "  int64_t g_off[16];\n  double g_wt[16], g_wx[16], g_wy[16];\n  int g_count = 0;\n";
  s += "  for (int64_t n = 0; n < g_n; ++n)\n";
  s += "  for (int64_t oy = 0; oy < g_ho; ++oy)\n";
  s += "  for (int64_t ox = 0; ox < g_wo; ++ox) {\n";
  s += "    const " + T + " *gp = g_g + n * " + G + "->strides[0] + oy * " + G +
       "->strides[1] + ox * " + G + "->strides[2];\n";
  s += "    double sx = 0, sy = 0;\n";
  s += "    if (!kiln_gs_taps_d((double)gp[0], (double)gp[" + G +
       "->strides[3]], g_h, g_w, g_w, 1, " + std::to_string(forward_.mode_) + ", " +
       std::to_string(forward_.padding_) + ", " + std::to_string(forward_.align_ ? 1 : 0) +
       ", g_off, g_wt, g_wx, g_wy, &g_count)) { sx = sy = (double)NAN; g_count = 0; }\n";
  s += "    for (int64_t c = 0; c < g_c; ++c) {\n";
  s += "      const double go = (double)g_d[n * " + D + "->strides[0] + c * " + D +
       "->strides[1] + oy * " + D + "->strides[2] + ox * " + D + "->strides[3]];\n";
  s += "      " + T + " *dxp = g_dx + (n * g_c + c) * g_h * g_w;\n";
  s += "      const " + T + " *xp = g_x + n * " + X + "->strides[0] + c * " + X + "->strides[1];\n";
  s += "      for (int t = 0; t < g_count; ++t) {\n";
  s += "        if (g_off[t] < 0) continue;\n";
  // Taps are offsets into a dense (H, W) image: X is read through its strides.
  s += "        const int64_t ty = g_off[t] / g_w, tx = g_off[t] % g_w;\n";
  s += "        const double v = (double)xp[ty * " + X + "->strides[2] + tx * " + X +
       "->strides[3]];\n";
  s += "        dxp[g_off[t]] += (" + T + ")(g_wt[t] * go);\n";
  s += "        sx += go * v * g_wx[t];\n";
  s += "        sy += go * v * g_wy[t];\n";
  s += "      }\n";
  s += "    }\n";
  s += "    " + T + " *dgp = g_dg + ((n * g_ho + oy) * g_wo + ox) * 2;\n";
  s += "    dgp[0] = (" + T + ")sx;\n    dgp[1] = (" + T + ")sy;\n";
  s += "  }\n}\n";
  return s;
}

}  // namespace kiln
