#include "ops/roi_align.h"

#include <cmath>

#include "ops/builders.h"
#include "ops/c/c_text.h"
#include "ops/c/workspace.h"
#include "ops/grad/support.h"
#include "util/error.h"

namespace kiln {
namespace {

// The box and sample rules, written once in C: emitted into modules and compiled into kiln
// for perform.
#define KILN_ROI_RULES                                                                         \
  typedef struct {                                                                             \
    int64_t oh, ow, ratio;                                                                     \
    double scale;                                                                              \
    int half;                                                                                  \
  } kiln_roi_props;                                                                            \
  typedef struct {                                                                             \
    double y0, x0, bh, bw;                                                                     \
    int64_t gh, gw, count;                                                                     \
  } kiln_roi_box;                                                                              \
  /* 0, or 1 for a coordinate that is NaN or infinite, 2 for a bin of too many samples. */     \
  KILN_RA_FN int kiln_roi_box_of(const kiln_roi_props* p, double x1, double y1, double x2,     \
                                 double y2, int64_t max_samples, kiln_roi_box* b) {            \
    if (!(isfinite(x1) && isfinite(y1) && isfinite(x2) && isfinite(y2))) return 1;             \
    const double off = p->half ? 0.5 : 0.0;                                                    \
    const double sw = x1 * p->scale - off, sh = y1 * p->scale - off;                           \
    double rw = x2 * p->scale - off - sw, rh = y2 * p->scale - off - sh;                       \
    if (!p->half) {                                                                            \
      rw = rw > 1 ? rw : 1;                                                                    \
      rh = rh > 1 ? rh : 1;                                                                    \
    }                                                                                          \
    b->y0 = sh;                                                                                \
    b->x0 = sw;                                                                                \
    b->bh = rh / (double)p->oh;                                                                \
    b->bw = rw / (double)p->ow;                                                                \
    const double gh = p->ratio > 0 ? (double)p->ratio : ceil(rh / (double)p->oh);              \
    const double gw = p->ratio > 0 ? (double)p->ratio : ceil(rw / (double)p->ow);              \
    if (fabs(gh) * fabs(gw) > (double)max_samples || !isfinite(gh) || !isfinite(gw)) return 2; \
    b->gh = (int64_t)gh;                                                                       \
    b->gw = (int64_t)gw;                                                                       \
    b->count = b->gh * b->gw > 1 ? b->gh * b->gw : 1;                                          \
    return 0;                                                                                  \
  }                                                                                            \
  /* Sample (iy, ix) of bin (ph, pw): corner offsets (y * sy + x * sx) and weights, all 0 for  \
     a sample more than a pixel outside the image. */                                          \
  KILN_RA_FN void kiln_roi_sample(const kiln_roi_box* b, int64_t ph, int64_t pw, int64_t iy,   \
                                  int64_t ix, int64_t h, int64_t w, int64_t sy, int64_t sx,    \
                                  int64_t* off, double* wt) {                                  \
    double y = b->y0 + (double)ph * b->bh + ((double)iy + 0.5) * b->bh / (double)b->gh;        \
    double x = b->x0 + (double)pw * b->bw + ((double)ix + 0.5) * b->bw / (double)b->gw;        \
    if (y < -1.0 || y > (double)h || x < -1.0 || x > (double)w) {                              \
      for (int k = 0; k < 4; ++k) {                                                            \
        off[k] = 0;                                                                            \
        wt[k] = 0;                                                                             \
      }                                                                                        \
      return;                                                                                  \
    }                                                                                          \
    y = y > 0 ? y : 0;                                                                         \
    x = x > 0 ? x : 0;                                                                         \
    int64_t yl = (int64_t)y, xl = (int64_t)x, yh, xh;                                          \
    if (yl >= h - 1) {                                                                         \
      yh = yl = h - 1;                                                                         \
      y = (double)yl;                                                                          \
    } else {                                                                                   \
      yh = yl + 1;                                                                             \
    }                                                                                          \
    if (xl >= w - 1) {                                                                         \
      xh = xl = w - 1;                                                                         \
      x = (double)xl;                                                                          \
    } else {                                                                                   \
      xh = xl + 1;                                                                             \
    }                                                                                          \
    const double ly = y - (double)yl, lx = x - (double)xl, hy = 1 - ly, hx = 1 - lx;           \
    off[0] = yl * sy + xl * sx;                                                                \
    off[1] = yl * sy + xh * sx;                                                                \
    off[2] = yh * sy + xl * sx;                                                                \
    off[3] = yh * sy + xh * sx;                                                                \
    wt[0] = hy * hx;                                                                           \
    wt[1] = hy * lx;                                                                           \
    wt[2] = ly * hx;                                                                           \
    wt[3] = ly * lx;                                                                           \
  }

#define KILN_RA_FN static
#define isfinite std::isfinite
using std::ceil;
using std::fabs;
KILN_ROI_RULES
#undef isfinite
#undef KILN_RA_FN

const char* const kRulesC = KILN_C_TEXT(KILN_ROI_RULES);

// The box a bad input makes fail, in words.
std::string box_error(int code, int64_t r) {
  return code == 1 ? "roi_align: box " + std::to_string(r) + " has a NaN or infinite coordinate"
                   : "roi_align: box " + std::to_string(r) + " takes more than " +
                         std::to_string(RoiAlign::kMaxSamples) +
                         " samples per bin (a box far larger than the image)";
}

struct Dims {
  int64_t n, c, h, w, r;
};

Dims dims_of(const std::vector<Tensor>& in) {
  return {in[0].shape()[0], in[0].shape()[1], in[0].shape()[2], in[0].shape()[3], in[1].shape()[0]};
}

// Box r's batch index and geometry, or a UserError naming it.
kiln_roi_box box_at(const std::vector<Tensor>& in, const kiln_roi_props& p, int64_t r,
                    const Dims& d, int64_t* batch) {
  *batch = in[2].load_int(r);
  if (*batch < 0 || *batch >= d.n) {
    throw UserError("roi_align: box " + std::to_string(r) + " has batch index " +
                    std::to_string(*batch) + ", outside [0, " + std::to_string(d.n) + ")");
  }
  kiln_roi_box b{};
  const int code =
      kiln_roi_box_of(&p, in[1].load(r * 4), in[1].load(r * 4 + 1), in[1].load(r * 4 + 2),
                      in[1].load(r * 4 + 3), RoiAlign::kMaxSamples, &b);
  if (code) throw UserError(box_error(code, r));
  return b;
}

}  // namespace

RoiAlign::RoiAlign(Attrs props, const std::string& name) : COp(name, std::move(props)) {
  check_known_attrs(this->props(), {"mode", "output_height", "output_width", "sampling_ratio",
                                    "spatial_scale", "half_pixel"});
  const std::string mode = attr_string(this->props(), "mode", std::string("avg"));
  if (mode != "avg" && mode != "max")
    throw AttrError("mode", "'" + mode + "' is not avg or max (roi_align)");
  max_ = mode == "max";
  out_h_ = attr_int(this->props(), "output_height", 1);
  out_w_ = attr_int(this->props(), "output_width", 1);
  ratio_ = attr_int(this->props(), "sampling_ratio", 0);
  scale_ = attr_float(this->props(), "spatial_scale", 1.0);
  half_pixel_ = attr_int(this->props(), "half_pixel", 1) != 0;
  if (out_h_ < 1 || out_w_ < 1) throw AttrError("output_height", "output sizes must be >= 1");
  if (ratio_ < 0) throw AttrError("sampling_ratio", "must be >= 0 (0: adaptive)");
  if (!std::isfinite(scale_) || scale_ <= 0)
    throw AttrError("spatial_scale", "must be a positive finite number");
}

void RoiAlign::check_inputs(const std::vector<TensorType>& inputs, size_t count) const {
  if (inputs.size() != count)
    throw UserError(name() + " takes " + std::to_string(count) + " inputs");
  const TensorType& x = inputs[0];
  const TensorType& r = inputs[1];
  const TensorType& b = inputs[2];
  if (x.dtype != DType::kFloat32 && x.dtype != DType::kFloat64)
    throw UnsupportedError(name() + ": " + x.to_string() + " input (float32 and float64)");
  if (x.rank() != 4) throw UserError(name() + ": X " + x.to_string() + " must be (N, C, H, W)");
  if (r.dtype != x.dtype || r.rank() != 2 || (r.dims[1] != kDynamic && r.dims[1] != 4))
    throw UserError(name() + ": rois " + r.to_string() + " must be (R, 4) of X's dtype");
  if (b.dtype != DType::kInt64 || b.rank() != 1)
    throw UserError(name() + ": batch_indices " + b.to_string() + " must be int64 (R)");
  if (r.dims[0] != kDynamic && b.dims[0] != kDynamic && r.dims[0] != b.dims[0]) {
    throw UserError(name() + ": " + std::to_string(r.dims[0]) + " boxes but " +
                    std::to_string(b.dims[0]) + " batch indices");
  }
}

std::vector<TensorType> RoiAlign::infer_type(const std::vector<TensorType>& inputs) const {
  check_inputs(inputs, 3);
  return {TensorType{inputs[0].dtype, {inputs[1].dims[0], inputs[0].dims[1], out_h_, out_w_}}};
}

std::vector<Shape> RoiAlign::infer_shape(const std::vector<Shape>& inputs) const {
  if (inputs[1].size() != 2 || inputs[1][1] != 4 || inputs[2][0] != inputs[1][0]) {
    throw UserError("roi_align: " + std::to_string(inputs[1][0]) + " boxes and " +
                    std::to_string(inputs[2][0]) + " batch indices (rois must be (R, 4))");
  }
  return {Shape{inputs[1][0], inputs[0][1], out_h_, out_w_}};
}

void RoiAlign::perform(const std::vector<Tensor>& inputs, std::vector<Tensor>& outputs) const {
  const Dims d = dims_of(inputs);
  const kiln_roi_props p{out_h_, out_w_, ratio_, scale_, half_pixel_ ? 1 : 0};
  int64_t off[4];
  double wt[4];
  for (int64_t r = 0; r < d.r; ++r) {
    int64_t batch = 0;
    const kiln_roi_box b = box_at(inputs, p, r, d, &batch);
    for (int64_t c = 0; c < d.c; ++c) {
      const int64_t base = (batch * d.c + c) * d.h * d.w;
      for (int64_t ph = 0; ph < out_h_; ++ph) {
        for (int64_t pw = 0; pw < out_w_; ++pw) {
          double v = 0;
          bool first = true;
          for (int64_t iy = 0; iy < b.gh; ++iy) {
            for (int64_t ix = 0; ix < b.gw; ++ix) {
              kiln_roi_sample(&b, ph, pw, iy, ix, d.h, d.w, d.w, 1, off, wt);
              if (max_) {
                double m = wt[0] * inputs[0].load(base + off[0]);
                for (int k = 1; k < 4; ++k) m = std::max(m, wt[k] * inputs[0].load(base + off[k]));
                v = first ? m : std::max(v, m);
                first = false;
              } else {
                for (int k = 0; k < 4; ++k) v += wt[k] * inputs[0].load(base + off[k]);
              }
            }
          }
          if (!max_) v /= static_cast<double>(b.count);
          outputs[0].store(((r * d.c + c) * out_h_ + ph) * out_w_ + pw, v);
        }
      }
    }
  }
}

std::string RoiAlign::props_c() const {
  char scale[64];
  std::snprintf(scale, sizeof scale, "%.17g", scale_);
  return "{" + std::to_string(out_h_) + ", " + std::to_string(out_w_) + ", " +
         std::to_string(ratio_) + ", " + scale + ", " + (half_pixel_ ? "1" : "0") + "}";
}

const char* RoiAlign::rules_c() { return kRulesC; }

std::string RoiAlign::c_support_code() const {
  return std::string("#define KILN_RA_FN __attribute__((unused)) static\n") + kRulesC + "\n";
}

namespace {

// The loop over boxes [r0, r1) both kernels share: a bad box fails the call; for each bin,
// the samples' corners and weights (ra_off, ra_wt: 4 per sample) shared by every channel.
// `body` runs per (box, bin) with ra_b (the box), ra_base (X's image offset), ra_samples.
std::string box_loop(const std::string& X, const std::string& R, const std::string& B,
                     const std::string& T, const std::string& props, const std::string& sy,
                     const std::string& sx, const std::string& body) {
  std::string s;
  s += "  const kiln_roi_props ra_p = " + props + ";\n";
  s += "  const int64_t ra_n = " + X + "->shape[0], ra_c = " + X + "->shape[1], ra_h = " + X +
       "->shape[2], ra_w = " + X + "->shape[3];\n";
  s += "  (void)ra_c;\n";
  s += "  const " + T + " *ra_rois = (const " + T + " *)" + R + "->data;\n";
  s += "  const int64_t *ra_bi = (const int64_t *)" + B + "->data;\n";
  s += "  kiln_roi_box ra_b;\n";
  // First the boxes' checks and their largest bin, for one workspace.
  s += "  int64_t ra_most = 1;\n";
  s += "  for (int64_t r = ra_r0; r < ra_r1; ++r) {\n";
  s += "    const int64_t bi = ra_bi[r * " + B + "->strides[0]];\n";
  s += "    if (bi < 0 || bi >= ra_n) KILN_FAIL(\"roi_align: box %lld has batch index %lld, "
       "outside [0, %lld)\", (long long)r, (long long)bi, (long long)ra_n);\n";
  s += "    const " + T + " *q = ra_rois + r * " + R + "->strides[0];\n";
  s += "    const int64_t qs = " + R + "->strides[1];\n";
  s += "    const int code = kiln_roi_box_of(&ra_p, q[0], q[qs], q[2 * qs], q[3 * qs], " +
       std::to_string(RoiAlign::kMaxSamples) + ", &ra_b);\n";
  s += "    if (code == 1) KILN_FAIL(\"roi_align: box %lld has a NaN or infinite coordinate\", "
       "(long long)r);\n";
  s += "    if (code == 2) KILN_FAIL(\"roi_align: box %lld takes more than " +
       std::to_string(RoiAlign::kMaxSamples) +
       " samples per bin (a box far larger than the image)\", (long long)r);\n";
  s += "    if (ra_b.gh * ra_b.gw > ra_most) ra_most = ra_b.gh * ra_b.gw;\n";
  s += "  }\n";
  s += "  " + c_workspace("int64_t", "ra_off", "4 * ra_most", "roi_align's sample corners");
  s += "  " + c_workspace("double", "ra_wt", "4 * ra_most", "roi_align's sample weights");
  s += "  for (int64_t r = ra_r0; r < ra_r1; ++r) {\n";
  s += "    const " + T + " *q = ra_rois + r * " + R + "->strides[0];\n";
  s += "    const int64_t qs = " + R + "->strides[1];\n";
  s += "    kiln_roi_box_of(&ra_p, q[0], q[qs], q[2 * qs], q[3 * qs], " +
       std::to_string(RoiAlign::kMaxSamples) + ", &ra_b);\n";
  s += "    const int64_t ra_batch = ra_bi[r * " + B + "->strides[0]];\n";
  s += "    const int64_t ra_samples = ra_b.gh > 0 && ra_b.gw > 0 ? ra_b.gh * ra_b.gw : 0;\n";
  s += "    for (int64_t ph = 0; ph < ra_p.oh; ++ph)\n";
  s += "    for (int64_t pw = 0; pw < ra_p.ow; ++pw) {\n";
  s += "      for (int64_t iy = 0; iy < ra_b.gh; ++iy)\n";
  s += "        for (int64_t ix = 0; ix < ra_b.gw; ++ix)\n";
  s += "          kiln_roi_sample(&ra_b, ph, pw, iy, ix, ra_h, ra_w, " + sy + ", " + sx +
       ", ra_off + 4 * (iy * ra_b.gw + ix), ra_wt + 4 * (iy * ra_b.gw + ix));\n";
  s += body;
  s += "    }\n";
  s += "  }\n";
  return s;
}

}  // namespace

std::string RoiAlign::c_code(const Node& node, const CodeNames& names, const Sub& sub) const {
  const std::string T(dtype_c_type(node.inputs[0]->type.dtype));
  const std::string& X = names.inputs[0];
  const std::string& Y = names.outputs[0];
  const std::string& ctx = sub.ctx;
  std::string body;
  body += "      for (int64_t c = 0; c < ra_c; ++c) {\n";
  body += "        const " + T + " *xp = (const " + T + " *)" + X + "->data + ra_batch * " + X +
          "->strides[0] + c * " + X + "->strides[1];\n";
  body += "        double v = 0;\n";
  body += "        for (int64_t s = 0; s < ra_samples; ++s) {\n";
  body += "          const int64_t *o = ra_off + 4 * s;\n";
  body += "          const double *w = ra_wt + 4 * s;\n";
  if (max_) {
    body += "          double m = w[0] * (double)xp[o[0]];\n";
    body +=
        "          for (int k = 1; k < 4; ++k) { const double t = w[k] * (double)xp[o[k]]; "
        "m = t > m ? t : m; }\n";
    body += "          v = s == 0 || m > v ? m : v;\n";
  } else {
    body +=
        "          v += w[0] * (double)xp[o[0]] + w[1] * (double)xp[o[1]] + w[2] * "
        "(double)xp[o[2]] + w[3] * (double)xp[o[3]];\n";
  }
  body += "        }\n";
  body += std::string("        ") + (max_ ? "" : "v /= (double)ra_b.count;\n");
  body += "        ((" + T + " *)" + Y +
          "->data)[((r * ra_c + c) * ra_p.oh + ph) * ra_p.ow + pw] = (" + T + ")v;\n";
  body += "      }\n";
  std::string s = "{\n";
  s += "  const int64_t ra_rn = " + names.inputs[1] + "->shape[0];\n";
  s += "  const int64_t ra_r0 = ra_rn * " + ctx + "->part / " + ctx + "->n_parts;\n";
  s += "  const int64_t ra_r1 = ra_rn * (" + ctx + "->part + 1) / " + ctx + "->n_parts;\n";
  s += "  if (ra_r1 > ra_r0) {\n";
  s += box_loop(X, names.inputs[1], names.inputs[2], T, props_c(), X + "->strides[2]",
                X + "->strides[3]", body);
  s += "  }\n}\n";
  return s;
}

std::vector<Variable*> RoiAlign::grad(const GradArgs& args) const {
  if (max_) not_differentiable(args, 0, "roi_align: the gradient of max mode");
  std::vector<Variable*> out(3, nullptr);
  if (args.wanted[0]) {
    out[0] =
        apply("roi_align_grad",
              {grad_in(args, 0), grad_in(args, 1), grad_in(args, 2), grad_of_out(args, 0)}, props())
            .var();
  }
  if (args.wanted[1]) not_differentiable(args, 1, "roi_align: the gradient of the boxes");
  return out;
}

RoiAlignGrad::RoiAlignGrad(Attrs props) : RoiAlign(std::move(props), "roi_align_grad") {
  if (max_) throw AttrError("mode", "roi_align_grad is for avg mode");
}

std::vector<TensorType> RoiAlignGrad::infer_type(const std::vector<TensorType>& inputs) const {
  check_inputs(inputs, 4);
  const TensorType& g = inputs[3];
  if (g.dtype != inputs[0].dtype || g.rank() != 4)
    throw UserError("roi_align_grad: dY " + g.to_string() + " must be (R, C, oh, ow)");
  return {inputs[0]};
}

std::vector<Shape> RoiAlignGrad::infer_shape(const std::vector<Shape>& inputs) const {
  const Shape y = RoiAlign::infer_shape({inputs[0], inputs[1], inputs[2]}).at(0);
  if (y != inputs[3]) throw UserError("roi_align_grad: dY's shape does not match the output's");
  return {inputs[0]};
}

void RoiAlignGrad::perform(const std::vector<Tensor>& inputs, std::vector<Tensor>& outputs) const {
  const Dims d = dims_of(inputs);
  const kiln_roi_props p{out_h_, out_w_, ratio_, scale_, half_pixel_ ? 1 : 0};
  std::vector<double> dx(static_cast<size_t>(inputs[0].numel()), 0.0);
  int64_t off[4];
  double wt[4];
  for (int64_t r = 0; r < d.r; ++r) {
    int64_t batch = 0;
    const kiln_roi_box b = box_at(inputs, p, r, d, &batch);
    for (int64_t c = 0; c < d.c; ++c) {
      const int64_t base = (batch * d.c + c) * d.h * d.w;
      for (int64_t ph = 0; ph < out_h_; ++ph) {
        for (int64_t pw = 0; pw < out_w_; ++pw) {
          const double g = inputs[3].load(((r * d.c + c) * out_h_ + ph) * out_w_ + pw) /
                           static_cast<double>(b.count);
          for (int64_t iy = 0; iy < b.gh; ++iy) {
            for (int64_t ix = 0; ix < b.gw; ++ix) {
              kiln_roi_sample(&b, ph, pw, iy, ix, d.h, d.w, d.w, 1, off, wt);
              for (int k = 0; k < 4; ++k) dx[static_cast<size_t>(base + off[k])] += wt[k] * g;
            }
          }
        }
      }
    }
  }
  for (int64_t i = 0; i < inputs[0].numel(); ++i) outputs[0].store(i, dx[static_cast<size_t>(i)]);
}

std::string RoiAlignGrad::c_code(const Node& node, const CodeNames& names, const Sub&) const {
  const std::string T(dtype_c_type(node.inputs[0]->type.dtype));
  const std::string& X = names.inputs[0];
  const std::string& G = names.inputs[3];
  const std::string& DX = names.outputs[0];
  std::string body;
  body += "      for (int64_t c = 0; c < ra_c; ++c) {\n";
  body += "        " + T + " *dp = (" + T + " *)" + DX +
          "->data + (ra_batch * ra_c + c) * ra_h * ra_w;\n";
  body += "        const double g = (double)((const " + T + " *)" + G + "->data)[r * " + G +
          "->strides[0] + c * " + G + "->strides[1] + ph * " + G + "->strides[2] + pw * " + G +
          "->strides[3]] / (double)ra_b.count;\n";
  // Corners are offsets into the dense dX (X's values are not read).
  body += "        for (int64_t s = 0; s < 4 * ra_samples; ++s) dp[ra_off[s]] += (" + T +
          ")(ra_wt[s] * g);\n";
  body += "      }\n";
  std::string s = "{\n";
  s += "  const int64_t ra_r0 = 0, ra_r1 = " + names.inputs[1] + "->shape[0];\n";
  s += "  {\n    " + T + " *z = (" + T + " *)" + DX + "->data;\n";
  s += "    for (int64_t i = 0; i < " + X + "->shape[0] * " + X + "->shape[1] * " + X +
       "->shape[2] * " + X + "->shape[3]; ++i) z[i] = 0;\n  }\n";
  s += box_loop(X, names.inputs[1], names.inputs[2], T, props_c(), "ra_w", "1", body);
  s += "}\n";
  return s;
}

}  // namespace kiln
