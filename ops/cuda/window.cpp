#include "ops/cuda/window.h"

#include "ops/cuda/epilogue.h"

namespace kiln {
namespace {

// The host fragment: the window, the output's element count, and a grid-stride launch.
std::string window_launch(const std::string& kernel, const std::string& window,
                          const std::string& out, const std::string& args) {
  std::string h = "{\n  kiln_cuda_window kiln_w = " + window + ";\n  int64_t kiln_total = 1;\n";
  h += "  for (int d = 0; d < " + out + "->ndim; ++d) kiln_total *= " + out + "->shape[d];\n";
  h += "  if (kiln_total > 0) KILN_LAUNCH(" + kernel +
       ", kiln_cuda_blocks(kiln_total, 256, 4096), 1, 1, 256, 1, 1, 0, &kiln_w, &kiln_total" +
       args + ");\n}\n";
  return h;
}

// Decomposes flat output index o into (plane, oy, ox) of the window's output.
const char* kDecompose =
    "    const int64_t ox = o % w.ow, oy = (o / w.ow) % w.oh, plane = o / (w.ow * w.oh);\n";

}  // namespace

bool window_dims_static(const Node& node) {
  for (const Variable* v : node.inputs) {
    for (size_t d = 1; d < v->type.dims.size(); ++d) {
      if (v->type.dims[d] == kDynamic) return false;
    }
  }
  return true;
}

DeviceCode cuda_conv(const Node& node, const CodeNames& names, const Sub& sub,
                     const std::string& window, int64_t group, const CudaEpilogue* epi) {
  DeviceCode c;
  if (epi) c.preludes = epi->preludes;
  const std::string T(dtype_c_type(node.outputs[0]->type.dtype));
  DeviceKernel k;
  k.name = sub.prefix + "conv";
  k.params = {"kiln_cuda_window", "int64_t",          "int64_t",
              "int64_t",          "int64_t",          T + "*",
              "const " + T + "*", "const " + T + "*", "const " + T + "*"};
  if (epi) k.params.insert(k.params.end(), epi->params.begin(), epi->params.end());
  k.code = (epi ? epi->function : "") + "__global__ void " + k.name +
           "(kiln_cuda_window w, int64_t total, int64_t C, int64_t M, int64_t group, " + T +
           " *__restrict__ y, const " + T + " *__restrict__ x, const " + T +
           " *__restrict__ wt, const " + T + " *__restrict__ b" + (epi ? epi->signature : "") +
           ") {\n"
           "  const int64_t cg = C / group, mg = M / group;\n"
           "  const int64_t step = (int64_t)gridDim.x * blockDim.x;\n"
           "  for (int64_t o = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; o < total; "
           "o += step) {\n" +
           kDecompose +
           "    const int64_t m = plane % M, n = plane / M;\n"
           "    " +
           T + " acc = b ? b[m] : (" + T +
           ")0;\n"
           "    const " +
           T +
           " *xg = x + (n * C + (m / mg) * cg) * w.h * w.w;\n"
           "    const " +
           T +
           " *wm = wt + m * cg * w.kh * w.kw;\n"
           "    for (int64_t c = 0; c < cg; ++c) {\n"
           "      const " +
           T +
           " *xc = xg + c * w.h * w.w;\n"
           "      const " +
           T +
           " *wc = wm + c * w.kh * w.kw;\n"
           "      for (int64_t i = 0; i < w.kh; ++i) {\n"
           "        const int64_t yy = oy * w.sh - w.ph + i * w.dh;\n"
           "        if (yy < 0 || yy >= w.h) continue;\n"
           "        for (int64_t j = 0; j < w.kw; ++j) {\n"
           "          const int64_t xx = ox * w.sw - w.pw + j * w.dw;\n"
           "          if (xx >= 0 && xx < w.w) acc += xc[yy * w.w + xx] * wc[i * w.kw + j];\n"
           "        }\n"
           "      }\n"
           "    }\n"
           "    y[o] = " +
           cuda_store(epi, "acc", "o") +
           ";\n"
           "  }\n}\n";
  c.kernels.push_back(k);
  const std::string& x = names.inputs[0];
  const std::string& wt = names.inputs[1];
  const std::string& y = names.outputs[0];
  std::string h = epi ? "{\n" + epi->host : "{\n";
  h += "  int64_t kiln_c = " + x + "->shape[1], kiln_mo = " + wt +
       "->shape[0], kiln_g = " + std::to_string(group) + ";\n";
  h += "  void *kiln_y = " + y + "->data, *kiln_x = " + x + "->data, *kiln_wt = " + wt +
       "->data, *kiln_b = " + (names.inputs.size() > 2 ? names.inputs[2] + "->data" : "0") + ";\n";
  h += window_launch(k.name, window, y,
                     ", &kiln_c, &kiln_mo, &kiln_g, &kiln_y, &kiln_x, &kiln_wt, &kiln_b" +
                         (epi ? epi->launch_args : ""));
  c.launch = h + "}\n";
  return c;
}

DeviceCode cuda_pool(const Node& node, const CodeNames& names, const Sub& sub,
                     const std::string& window, bool is_max, bool count_include_pad) {
  DeviceCode c;
  const std::string T(dtype_c_type(node.outputs[0]->type.dtype));
  DeviceKernel k;
  k.name = sub.prefix + "pool";
  k.params = {"kiln_cuda_window", "int64_t", T + "*", "const " + T + "*"};
  // Windows stop at the trailing pad (ceil_mode may leave part of one beyond it); padded
  // positions count toward the average only with count_include_pad; NaN wins a max.
  const std::string update = is_max ? "if (v > acc || v != v) acc = v;" : "acc += v;";
  const std::string finish = is_max ? ""
                             : count_include_pad
                                 ? "    acc /= (" + T + ")padded;\n"
                                 : "    acc /= (" + T + ")(count > 0 ? count : 1);\n";
  k.code = "__global__ void " + k.name + "(kiln_cuda_window w, int64_t total, " + T +
           " *__restrict__ y, const " + T +
           " *__restrict__ x) {\n"
           "  const int64_t step = (int64_t)gridDim.x * blockDim.x;\n"
           "  for (int64_t o = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; o < total; "
           "o += step) {\n" +
           kDecompose + "    " + T + " acc = " + (is_max ? "-INFINITY" : "0") +
           ";\n"
           "    int64_t count = 0, padded = 0;\n"
           "    for (int64_t i = 0; i < w.kh; ++i) {\n"
           "      const int64_t yy = oy * w.sh - w.ph + i * w.dh;\n"
           "      if (yy >= w.h + w.eh) break;\n"
           "      for (int64_t j = 0; j < w.kw; ++j) {\n"
           "        const int64_t xx = ox * w.sw - w.pw + j * w.dw;\n"
           "        if (xx >= w.w + w.ew) break;\n"
           "        ++padded;\n"
           "        if (yy < 0 || yy >= w.h || xx < 0 || xx >= w.w) continue;\n"
           "        const " +
           T +
           " v = x[(plane * w.h + yy) * w.w + xx];\n"
           "        ++count;\n"
           "        " +
           update +
           "\n"
           "      }\n"
           "    }\n"
           "    (void)count;\n    (void)padded;\n" +
           finish +
           "    y[o] = acc;\n"
           "  }\n}\n";
  c.kernels.push_back(k);
  std::string h = "{\n  void *kiln_y = " + names.outputs[0] +
                  "->data, *kiln_x = " + names.inputs[0] + "->data;\n";
  h += window_launch(k.name, window, names.outputs[0], ", &kiln_y, &kiln_x");
  c.launch = h + "}\n";
  return c;
}

}  // namespace kiln
