#include "ops/cuda/sampling.h"

#include <cmath>
#include <cstdio>

#include "ops/c/elementwise_loop.h"
#include "ops/c/workspace.h"
#include "ops/cuda/kernels.h"

namespace kiln {

DeviceCode cuda_grid_sample(const GridSample& op, const Node& node, const CodeNames& names,
                            const Sub& sub) {
  const std::string T(dtype_c_type(node.inputs[0]->type.dtype));
  DeviceKernel k;
  k.name = sub.prefix + "grid_sample";
  k.params = {"int64_t",     "int64_t", "int64_t", "int64_t", "int64_t", "int64_t",
              "const void*", "int64_t", "int64_t", "int64_t", "int64_t", "const void*",
              "int64_t",     "int64_t", "int64_t", "int64_t", "void*"};
  // The rule once per module, whichever node brings it first.
  k.code = cuda_device_rules("KILN_GS_DEVICE_RULES", "KILN_GS_FN", GridSample::rules_c());
  // Y (N, C, Ho, Wo) in row-major order: consecutive threads write consecutive ox, and the
  // channels of one position read the same grid entry.
  k.code += "__global__ void " + k.name +
            "(int64_t total, int64_t c, int64_t h, int64_t w, int64_t ho, int64_t wo, "
            "const void *xv, int64_t xs0, int64_t xs1, int64_t xs2, int64_t xs3, "
            "const void *gv, int64_t gs0, int64_t gs1, int64_t gs2, int64_t gs3, void *yv) {\n"
            "  const " +
            T + " *__restrict__ x = (const " + T +
            " *)xv;\n"
            "  const " +
            T + " *__restrict__ g = (const " + T +
            " *)gv;\n"
            "  " +
            T + " *__restrict__ y = (" + T + " *)yv;\n" + cuda_grid_loop("o", "total") +
            "    const int64_t ox = o % wo, oy = (o / wo) % ho, ch = (o / (wo * ho)) % c,\n"
            "                  n = o / (wo * ho * c);\n"
            "    const " +
            T +
            " *gp = g + n * gs0 + oy * gs1 + ox * gs2;\n"
            "    int64_t off[16];\n    double wt[16];\n    int count = 0;\n"
            "    const int ok = kiln_gs_taps((double)gp[0], (double)gp[gs3], h, w, xs2, xs3, " +
            std::to_string(op.mode()) + ", " + std::to_string(op.padding()) + ", " +
            std::to_string(op.align_corners() ? 1 : 0) +
            ", off, wt, &count);\n"
            "    double v = ok ? 0.0 : nan(\"\");\n"
            "    const " +
            T +
            " *xp = x + n * xs0 + ch * xs1;\n"
            "    for (int t = 0; ok && t < count; ++t)\n"
            "      if (off[t] >= 0) v += wt[t] * (double)xp[off[t]];\n"
            "    y[o] = (" +
            T +
            ")v;\n"
            "  }\n}\n";
  DeviceCode c;
  c.kernels.push_back(k);
  const std::string& X = names.inputs[0];
  const std::string& G = names.inputs[1];
  const std::string& Y = names.outputs[0];
  std::string h = "{\n";
  h += "  int64_t gs_c = " + X + "->shape[1], gs_h = " + X + "->shape[2], gs_w = " + X +
       "->shape[3], gs_ho = " + G + "->shape[1], gs_wo = " + G + "->shape[2];\n";
  h += "  int64_t gs_total = " + X + "->shape[0] * gs_c * gs_ho * gs_wo;\n";
  std::string args = "&gs_total, &gs_c, &gs_h, &gs_w, &gs_ho, &gs_wo, &gs_x";
  for (int d = 0; d < 4; ++d) {
    h += "  int64_t gs_xs" + std::to_string(d) + " = " + X + "->strides[" + std::to_string(d) +
         "], gs_gs" + std::to_string(d) + " = " + G + "->strides[" + std::to_string(d) + "];\n";
  }
  args += ", &gs_xs0, &gs_xs1, &gs_xs2, &gs_xs3, &gs_g, &gs_gs0, &gs_gs1, &gs_gs2, &gs_gs3, &gs_y";
  h += "  void *gs_x = " + X + "->data, *gs_g = " + G + "->data, *gs_y = " + Y + "->data;\n";
  h += "  if (gs_total > 0) KILN_LAUNCH(" + k.name +
       ", kiln_cuda_blocks(gs_total, 256, 4096), 1, 1, 256, 1, 1, 0, " + args + ");\n}\n";
  c.launch = h;
  return c;
}

DeviceCode cuda_pad(const Pad& op, const Node& node, const CodeNames& names, const Sub& sub) {
  const DType dt = node.inputs[0]->type.dtype;
  const std::string T(dtype_c_type(dt));
  const int rank = node.inputs[0]->type.rank();
  DeviceKernel k;
  k.name = sub.prefix + "pad";
  k.params = {"kiln_cuda_pad", "void*", "const void*", "double"};
  k.code = "#ifndef KILN_PAD_DEVICE_RULES\n#define KILN_PAD_DEVICE_RULES\n" +
           Pad::source_c("__device__ static") + "#endif\n";
  // A constant pad writes the value where a coordinate falls outside; the other modes map it
  // back inside. Integer values are exact literals; a float's (NaN and infinities too) comes
  // as a double.
  const std::string fill = is_float(dt) ? "(" + T + ")value" : c_literal(dt, op.value());
  k.code += "__global__ void " + k.name +
            "(const __grid_constant__ kiln_cuda_pad p, void *yv, const void *xv, double value) {\n"
            "  " +
            T + " *__restrict__ y = (" + T +
            " *)yv;\n"
            "  const " +
            T + " *__restrict__ x = (const " + T +
            " *)xv;\n"
            "  (void)value;\n" +
            cuda_grid_loop("o", "p.numel") +
            "    int64_t rem = o, off = 0;\n    int inside = 1;\n"
            "    for (int d = p.ndim - 1; d >= 0; --d) {\n"
            "      int64_t i = rem % p.out_shape[d] - p.before[d];\n"
            "      rem /= p.out_shape[d];\n"
            "      if (i < 0 || i >= p.in_shape[d]) {\n"
            "        if (p.mode == 0) { inside = 0; break; }\n"
            "        i = kiln_pad_source(i, p.in_shape[d], p.mode);\n"
            "      }\n"
            "      off += i * p.in_strides[d];\n"
            "    }\n"
            "    y[o] = inside ? x[off] : " +
            fill +
            ";\n"
            "  }\n}\n";
  DeviceCode c;
  c.kernels.push_back(k);
  const std::string& X = names.inputs[0];
  const std::string& Y = names.outputs[0];
  const std::string rs = std::to_string(rank);
  std::string h = "{\n  kiln_cuda_pad kiln_p;\n";
  h += "  kiln_p.ndim = " + rs +
       ";\n  kiln_p.mode = " + std::to_string(static_cast<int>(op.mode())) +
       ";\n  kiln_p.numel = 1;\n";
  for (int d = 0; d < rank; ++d) {
    const std::string ds = std::to_string(d);
    h += "  kiln_p.out_shape[" + ds + "] = " + Y + "->shape[" + ds + "];\n";
    h += "  kiln_p.in_shape[" + ds + "] = " + X + "->shape[" + ds + "];\n";
    h += "  kiln_p.in_strides[" + ds + "] = " + X + "->strides[" + ds + "];\n";
    h += "  kiln_p.before[" + ds + "] = " + std::to_string(op.pads()[static_cast<size_t>(d)]) +
         ";\n";
    h += "  kiln_p.numel *= " + Y + "->shape[" + ds + "];\n";
  }
  char value[40];
  std::snprintf(value, sizeof value, "%.17g", op.value());
  const std::string v = std::isfinite(op.value()) ? value
                        : std::isnan(op.value())  ? "(0.0 / 0.0)"
                        : op.value() > 0          ? "(1.0 / 0.0)"
                                                  : "(-1.0 / 0.0)";
  h += "  double kiln_value = " + v + ";\n";
  h += "  void *kiln_y = " + Y + "->data, *kiln_x = " + X + "->data;\n";
  h += "  if (kiln_p.numel > 0) KILN_LAUNCH(" + k.name +
       ", kiln_cuda_blocks(kiln_p.numel, 256, 4096), 1, 1, 256, 1, 1, 0, &kiln_p, &kiln_y, "
       "&kiln_x, &kiln_value);\n}\n";
  c.launch = h;
  return c;
}

DeviceCode cuda_roi_align(const RoiAlign& op, const Node& node, const CodeNames& names,
                          const Sub& sub) {
  const std::string T(dtype_c_type(node.inputs[0]->type.dtype));
  const std::string maxs = std::to_string(RoiAlign::kMaxSamples);
  DeviceKernel k;
  k.name = sub.prefix + "roi_align";
  k.params = {"int64_t", "int64_t", "int64_t",     "int64_t",     "int64_t", "int64_t",
              "int64_t", "double",  "int",         "const void*", "int64_t", "int64_t",
              "int64_t", "int64_t", "const void*", "const void*", "void*"};
  k.code = cuda_device_rules("KILN_RA_DEVICE_RULES", "KILN_RA_FN", RoiAlign::rules_c());
  // Y (R, C, oh, ow): each thread one bin of one channel, its samples in the CPU's order.
  k.code +=
      "__global__ void " + k.name +
      "(int64_t total, int64_t c, int64_t h, int64_t w, int64_t oh, int64_t ow, "
      "int64_t ratio, double scale, int half, const void *xv, int64_t xs0, int64_t xs1, "
      "int64_t xs2, int64_t xs3, const void *rv, const void *bv, void *yv) {\n"
      "  const " +
      T + " *__restrict__ x = (const " + T +
      " *)xv;\n"
      "  const " +
      T + " *__restrict__ rois = (const " + T +
      " *)rv;\n"
      "  const int64_t *__restrict__ bi = (const int64_t *)bv;\n"
      "  " +
      T + " *__restrict__ y = (" + T +
      " *)yv;\n"
      "  kiln_roi_props p;\n"
      "  p.oh = oh;\n  p.ow = ow;\n  p.ratio = ratio;\n  p.scale = scale;\n  p.half = half;\n" +
      cuda_grid_loop("o", "total") +
      "    const int64_t pw = o % ow, ph = (o / ow) % oh, ch = (o / (ow * oh)) % c,\n"
      "                  r = o / (ow * oh * c);\n"
      "    const " +
      T +
      " *q = rois + r * 4;\n"
      "    kiln_roi_box b;\n"
      "    kiln_roi_box_of(&p, q[0], q[1], q[2], q[3], " +
      maxs +
      ", &b);\n"
      "    const " +
      T +
      " *xp = x + bi[r] * xs0 + ch * xs1;\n"
      "    double v = 0;\n    int64_t s = 0;\n"
      "    for (int64_t iy = 0; iy < b.gh; ++iy)\n"
      "      for (int64_t ix = 0; ix < b.gw; ++ix, ++s) {\n"
      "        int64_t off[4];\n        double wt[4];\n"
      "        kiln_roi_sample(&b, ph, pw, iy, ix, h, w, xs2, xs3, off, wt);\n";
  if (op.is_max()) {
    k.code +=
        "        double m = wt[0] * (double)xp[off[0]];\n"
        "        for (int t = 1; t < 4; ++t) { const double u = wt[t] * (double)xp[off[t]]; "
        "m = u > m ? u : m; }\n"
        "        v = s == 0 || m > v ? m : v;\n";
  } else {
    k.code +=
        "        v += wt[0] * (double)xp[off[0]] + wt[1] * (double)xp[off[1]] + wt[2] * "
        "(double)xp[off[2]] + wt[3] * (double)xp[off[3]];\n";
  }
  k.code += "      }\n";
  if (!op.is_max()) k.code += "    v /= (double)b.count;\n";
  k.code += "    y[o] = (" + T + ")v;\n  }\n}\n";
  DeviceCode c;
  c.kernels.push_back(k);
  const std::string& X = names.inputs[0];
  const std::string& R = names.inputs[1];
  const std::string& B = names.inputs[2];
  const std::string& Y = names.outputs[0];
  char scale[40];
  std::snprintf(scale, sizeof scale, "%.17g", op.spatial_scale());
  const std::string props = "{" + std::to_string(op.out_h()) + ", " + std::to_string(op.out_w()) +
                            ", " + std::to_string(op.sampling_ratio()) + ", " + scale + ", " +
                            (op.half_pixel() ? "1" : "0") + "}";
  std::string h = "{\n";
  h += "  const kiln_roi_props ra_p = " + props + ";\n";
  h += "  int64_t ra_rn = " + R + "->shape[0], ra_n = " + X + "->shape[0];\n";
  // The boxes on the host first: a bad one fails the run naming it, as on the CPU.
  h += "  if (ra_rn > 0) {\n";
  h += c_workspace(T, "ra_q", "ra_rn * 4", "roi_align's boxes on the host");
  h += c_workspace("int64_t", "ra_bh", "ra_rn", "roi_align's batch indices on the host");
  h += "    if (ctx->copy(ctx, ra_q, " + R + "->data, (size_t)ra_rn * 4 * sizeof(" + T +
       "), KILN_COPY_TO_HOST) != 0 || ctx->copy(ctx, ra_bh, " + B +
       "->data, (size_t)ra_rn * sizeof(int64_t), KILN_COPY_TO_HOST) != 0) {\n"
       "      kiln_status = 1;\n      goto kiln_cleanup;\n    }\n";
  h += "    for (int64_t r = 0; r < ra_rn; ++r) {\n      kiln_roi_box ra_b;\n";
  h += "      if (ra_bh[r] < 0 || ra_bh[r] >= ra_n) " + sub.fail +
       "(\"roi_align: box %lld has batch index %lld, outside [0, %lld)\", (long long)r, "
       "(long long)ra_bh[r], (long long)ra_n);\n";
  h += "      const int code = kiln_roi_box_of(&ra_p, ra_q[4 * r], ra_q[4 * r + 1], "
       "ra_q[4 * r + 2], ra_q[4 * r + 3], " +
       maxs + ", &ra_b);\n";
  h += "      if (code == 1) " + sub.fail +
       "(\"roi_align: box %lld has a NaN or infinite coordinate\", (long long)r);\n";
  h += "      if (code == 2) " + sub.fail + "(\"roi_align: box %lld takes more than " + maxs +
       " samples per bin (a box far larger than the image)\", (long long)r);\n    }\n  }\n";
  h += "  int64_t ra_c = " + X + "->shape[1], ra_h = " + X + "->shape[2], ra_w = " + X +
       "->shape[3], ra_oh = ra_p.oh, ra_ow = ra_p.ow, ra_ratio = ra_p.ratio;\n";
  h += "  double ra_scale = ra_p.scale;\n  int ra_half = ra_p.half;\n";
  h += "  int64_t ra_total = ra_rn * ra_c * ra_oh * ra_ow;\n";
  h += "  int64_t ra_xs0 = " + X + "->strides[0], ra_xs1 = " + X + "->strides[1], ra_xs2 = " + X +
       "->strides[2], ra_xs3 = " + X + "->strides[3];\n";
  h += "  void *ra_x = " + X + "->data, *ra_r = " + R + "->data, *ra_bi = " + B +
       "->data, *ra_y = " + Y + "->data;\n";
  h += "  if (ra_total > 0) KILN_LAUNCH(" + k.name +
       ", kiln_cuda_blocks(ra_total, 256, 4096), 1, 1, 256, 1, 1, 0, &ra_total, &ra_c, &ra_h, "
       "&ra_w, &ra_oh, &ra_ow, &ra_ratio, &ra_scale, &ra_half, &ra_x, &ra_xs0, &ra_xs1, "
       "&ra_xs2, &ra_xs3, &ra_r, &ra_bi, &ra_y);\n}\n";
  c.launch = h;
  return c;
}

}  // namespace kiln
