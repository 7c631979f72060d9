#include "ops/cuda/transposed.h"

#include "ops/cuda/kernels.h"

namespace kiln {
namespace {

// The kernel: `direct` sums X times W over the group's input channels at each tap; the fold
// sums cols (N, in..., G, k..., mg), already multiplied. An input coordinate t = o + pad -
// k*dilation lands only where the stride divides it.
DeviceKernel tconv_kernel(const std::string& name, const std::string& T, bool direct) {
  DeviceKernel k;
  k.name = name;
  k.params = {"kiln_cuda_tconv", "void*", "const void*", "const void*", "const void*"};
  const std::string body =
      direct ? "          const " + T +
                   " *xp = x + ((n * p.c + g * cg) * p.in[0] + iz) * ik + iy * p.in[2] + ix;\n"
                   "          const " +
                   T +
                   " *wp = w + ((g * cg * mg + j) * p.ker[0] + kz) * kk + ky * p.ker[2] + kx;\n"
                   "          for (int64_t c = 0; c < cg; ++c)\n"
                   "            acc += xp[c * p.in[0] * ik] * wp[c * mg * p.ker[0] * kk];\n"
             : "          acc += x[(((((n * p.in[0] + iz) * p.in[1] + iy) * p.in[2] + ix) * "
               "p.group + g) * p.ker[0] * kk + (kz * p.ker[1] + ky) * p.ker[2] + kx) * mg + j];\n";
  k.code = "__global__ void " + name +
           "(const __grid_constant__ kiln_cuda_tconv p, void *yv, const void *xv, "
           "const void *wv, const void *bv) {\n"
           "  " +
           T + " *__restrict__ y = (" + T + " *)yv;\n  const " + T + " *__restrict__ x = (const " +
           T + " *)xv;\n  const " + T + " *__restrict__ w = (const " + T + " *)wv;\n  const " + T +
           " *__restrict__ b = (const " + T +
           " *)bv;\n"
           "  (void)w;\n"
           "  const int64_t ok = p.out[0] * p.out[1] * p.out[2], ik = p.in[1] * p.in[2],\n"
           "                kk = p.ker[1] * p.ker[2], mg = p.m / p.group, cg = p.c / p.group;\n"
           "  (void)cg;\n" +
           cuda_grid_loop("o", "p.numel") +
           "    const int64_t ox = o % p.out[2], oy = o / p.out[2] % p.out[1],\n"
           "                  oz = o / (p.out[1] * p.out[2]) % p.out[0], m = o / ok % p.m,\n"
           "                  n = o / ok / p.m, g = m / mg, j = m % mg;\n"
           "    " +
           T + " acc = b ? b[m] : (" + T +
           ")0;\n"
           "    for (int64_t kz = 0; kz < p.ker[0]; ++kz) {\n"
           "      const int64_t tz = oz + p.pb[0] - kz * p.dl[0];\n"
           "      if (tz < 0 || tz % p.st[0] != 0 || tz / p.st[0] >= p.in[0]) continue;\n"
           "      const int64_t iz = tz / p.st[0];\n"
           "      for (int64_t ky = 0; ky < p.ker[1]; ++ky) {\n"
           "        const int64_t ty = oy + p.pb[1] - ky * p.dl[1];\n"
           "        if (ty < 0 || ty % p.st[1] != 0 || ty / p.st[1] >= p.in[1]) continue;\n"
           "        const int64_t iy = ty / p.st[1];\n"
           "        for (int64_t kx = 0; kx < p.ker[2]; ++kx) {\n"
           "          const int64_t tx = ox + p.pb[2] - kx * p.dl[2];\n"
           "          if (tx < 0 || tx % p.st[2] != 0 || tx / p.st[2] >= p.in[2]) continue;\n"
           "          const int64_t ix = tx / p.st[2];\n" +
           body +
           "        }\n"
           "      }\n"
           "    }\n"
           "    y[o] = acc;\n"
           "  }\n}\n";
  return k;
}

// The host fragment: the geometry from the tensors (spatial dimensions `x_spatial` of X,
// `k_spatial` of `K`, Y's from 2), the static strides, dilations and pads, and the launch.
DeviceCode tconv_code(DeviceKernel k, const std::vector<TransposedDim>& geo, const Sub& sub,
                      const std::string& X, int x_spatial, const std::string& K, int k_spatial,
                      const std::string& Y, const std::string& channels, const std::string& outputs,
                      const std::string& groups, const std::string& w, const std::string& b) {
  const std::string ks = std::to_string(geo.size());
  std::string h = "{\n" + transposed_window_c(geo, sub);
  h += "  kiln_cuda_tconv kiln_t;\n";
  h +=
      "  kiln_t.c = " + channels + "; kiln_t.m = " + outputs + "; kiln_t.group = " + groups + ";\n";
  h += "  for (int d = 0; d < 3; ++d) {\n";
  h += "    kiln_t.in[d] = kiln_t.ker[d] = kiln_t.out[d] = 1;\n";
  h += "    kiln_t.st[d] = t_st[d]; kiln_t.dl[d] = t_dl[d]; kiln_t.pb[d] = t_pb[d];\n  }\n";
  h += "  for (int d = 0; d < " + ks + "; ++d) {\n";
  h += "    const int e = 3 - " + ks + " + d;\n";
  h += "    kiln_t.in[e] = " + X + "->shape[" + std::to_string(x_spatial) + " + d];\n";
  h += "    kiln_t.ker[e] = " + K + "->shape[" + std::to_string(k_spatial) + " + d];\n";
  h += "    kiln_t.out[e] = " + Y + "->shape[2 + d];\n  }\n";
  h += "  kiln_t.numel = 1;\n";
  h += "  for (int d = 0; d < " + Y + "->ndim; ++d) kiln_t.numel *= " + Y + "->shape[d];\n";
  h += "  void *kiln_y = " + Y + "->data, *kiln_x = " + X + "->data, *kiln_w = " + w +
       ", *kiln_b = " + b + ";\n";
  h += "  if (kiln_t.numel > 0) KILN_LAUNCH(" + k.name +
       ", kiln_cuda_blocks(kiln_t.numel, 256, 4096), 1, 1, 256, 1, 1, 0, &kiln_t, &kiln_y, "
       "&kiln_x, &kiln_w, &kiln_b);\n}\n";
  DeviceCode c;
  c.kernels.push_back(std::move(k));
  c.launch = h;
  return c;
}

}  // namespace

DeviceCode cuda_conv_transpose(const ConvTranspose& op, const Node& node, const CodeNames& names,
                               const Sub& sub) {
  const TensorType& xt = node.inputs[0]->type;
  const TensorType& wt = node.inputs[1]->type;
  const std::vector<int64_t> in(xt.dims.begin() + 2, xt.dims.end());
  const std::vector<int64_t> ker(wt.dims.begin() + 2, wt.dims.end());
  const auto geo = op.window().resolve(in, ker, "conv_transpose");
  const std::string& X = names.inputs[0];
  const std::string& W = names.inputs[1];
  const std::string b = node.inputs.size() == 3 ? names.inputs[2] + "->data" : "0";
  const std::string g = std::to_string(op.group());
  return tconv_code(
      tconv_kernel(sub.prefix + "conv_transpose", std::string(dtype_c_type(xt.dtype)), true), geo,
      sub, X, 2, W, 2, names.outputs[0], X + "->shape[1]", W + "->shape[1] * " + g, g, W + "->data",
      b);
}

DeviceCode cuda_conv_transpose_fold(const ConvTransposeFold& op, const Node& node,
                                    const CodeNames& names, const Sub& sub) {
  const TensorType& ct = node.inputs[0]->type;
  const int k = (ct.rank() - 3) / 2;
  const std::vector<int64_t> in(ct.dims.begin() + 1, ct.dims.begin() + 1 + k);
  const std::vector<int64_t> ker(ct.dims.begin() + 2 + k, ct.dims.begin() + 2 + 2 * k);
  const auto geo = op.window().resolve(in, ker, "conv_transpose_fold");
  const std::string& X = names.inputs[0];
  const std::string G = X + "->shape[" + std::to_string(k + 1) + "]";
  const std::string b = node.inputs.size() == 2 ? names.inputs[1] + "->data" : "0";
  return tconv_code(
      tconv_kernel(sub.prefix + "conv_transpose_fold", std::string(dtype_c_type(ct.dtype)), false),
      geo, sub, X, 1, X, k + 2, names.outputs[0], "0",
      G + " * " + X + "->shape[" + std::to_string(2 * k + 2) + "]", G, "0", b);
}

}  // namespace kiln
