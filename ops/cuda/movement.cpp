#include "ops/cuda/movement.h"

#include "ops/c/workspace.h"
namespace kiln {

DeviceKernel cuda_copy_kernel(const Sub& sub, DType dt) {
  const std::string T = "uint" + std::to_string(dtype_size(dt) * 8) + "_t";
  DeviceKernel k;
  k.name = sub.prefix + "copy";
  k.params = {"kiln_cuda_nd", "void*", "const void*"};
  k.code = "__global__ void " + k.name +
           "(const __grid_constant__ kiln_cuda_nd nd, void *y, const void *x) {\n"
           // Both sides packed alike: four elements per thread, loads before stores, so
           // four loads are in flight per thread (as in the elementwise kernels).
           "  if (nd.contiguous) {\n"
           "    const " +
           T + " *__restrict__ src = (const " + T +
           " *)x;\n"
           "    " +
           T + " *__restrict__ dst = (" + T +
           " *)y;\n"
           "    const int64_t n = nd.numel, bd = blockDim.x, step = (int64_t)gridDim.x * bd * 4;\n"
           "    for (int64_t b = (int64_t)blockIdx.x * bd * 4 + threadIdx.x; b < n; b += step) {\n"
           "      " +
           T +
           " v[4] = {};\n"
           "#pragma unroll\n"
           "      for (int u = 0; u < 4; ++u) if (b + u * bd < n) v[u] = src[b + u * bd];\n"
           "#pragma unroll\n"
           "      for (int u = 0; u < 4; ++u) if (b + u * bd < n) dst[b + u * bd] = v[u];\n"
           "    }\n"
           "    return;\n"
           "  }\n"
           "  const int64_t step = (int64_t)gridDim.x * blockDim.x;\n"
           "  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < nd.numel; "
           "i += step) {\n"
           "    ((" +
           T + " *)y)[kiln_cuda_offset(&nd, 1, i)] = ((const " + T +
           " *)x)[kiln_cuda_offset(&nd, 0, i)];\n"
           "  }\n}\n";
  return k;
}

std::string cuda_copy_launch(const std::string& kernel, int rank, const std::string& shape,
                             const std::string& src, const std::string& src_strides,
                             const std::string& dst, const std::string& dst_strides) {
  return "  {\n    kiln_cuda_nd kiln_nd;\n    kiln_cuda_copy_init(&kiln_nd, " +
         std::to_string(rank) + ", " + shape + ", " + src_strides + ", " + dst_strides +
         ");\n    void *kiln_dst = (void *)(" + dst + "), *kiln_src = (void *)(" + src +
         ");\n    if (kiln_nd.numel > 0) KILN_LAUNCH(" + kernel +
         ", kiln_cuda_blocks(kiln_nd.numel, kiln_nd.contiguous ? 1024 : 256, 4096), 1, 1, 256, "
         "1, 1, 0, &kiln_nd, "
         "&kiln_dst, &kiln_src);\n  }\n";
}

DeviceCode cuda_gather(const Node& node, const CodeNames& names, const Sub& sub, int axis) {
  DeviceCode c;
  const std::string T = "uint" + std::to_string(dtype_size(node.outputs[0]->type.dtype) * 8) + "_t";
  const std::string I(dtype_c_type(node.inputs[1]->type.dtype));
  DeviceKernel k;
  k.name = sub.prefix + "gather";
  k.params = {"int64_t", "int64_t",     "int64_t",         "int64_t",
              "void*",   "const void*", "const " + I + "*"};
  // y viewed as (outer, n_idx, inner), x as (outer, dim, inner); indices already checked.
  k.code =
      "__global__ void " + k.name +
      "(int64_t total, int64_t n_idx, int64_t inner, int64_t dim, void *y, const void *x, "
      "const " +
      I +
      " *__restrict__ idx) {\n"
      "  const int64_t step = (int64_t)gridDim.x * blockDim.x;\n"
      "  for (int64_t o = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; o < total; "
      "o += step) {\n"
      "    const int64_t in = o % inner, j = (o / inner) % n_idx, outer = o / (inner * n_idx);\n"
      "    int64_t i = (int64_t)idx[j];\n"
      "    if (i < 0) i += dim;\n"
      "    ((" +
      T + " *)y)[o] = ((const " + T +
      " *)x)[(outer * dim + i) * inner + in];\n"
      "  }\n}\n";
  c.kernels.push_back(k);
  const std::string& x = names.inputs[0];
  const std::string& ix = names.inputs[1];
  const std::string& y = names.outputs[0];
  const std::string A = std::to_string(axis);
  std::string h = "{\n";
  h += "  int64_t kiln_dim = " + x + "->shape[" + A +
       "], kiln_inner = 1, kiln_n = 1, kiln_total = 1;\n";
  h += "  for (int d = " + A + " + 1; d < " + x + "->ndim; ++d) kiln_inner *= " + x +
       "->shape[d];\n";
  h += "  for (int d = 0; d < " + ix + "->ndim; ++d) kiln_n *= " + ix + "->shape[d];\n";
  h += "  for (int d = 0; d < " + y + "->ndim; ++d) kiln_total *= " + y + "->shape[d];\n";
  h += "  if (kiln_n > 0) {\n";
  h += c_workspace(I, "kiln_host", "kiln_n", "the gather's indices on the host");
  h += "    if (ctx->copy(ctx, kiln_host, " + ix + "->data, (size_t)kiln_n * sizeof(" + I +
       "), KILN_COPY_TO_HOST) != 0) {\n      kiln_status = 1;\n      goto kiln_cleanup;\n    }\n";
  h += "    for (int64_t j = 0; j < kiln_n; ++j) {\n";
  h += "      if (kiln_host[j] < -kiln_dim || kiln_host[j] >= kiln_dim) " + sub.fail +
       "(\"gather: index %lld is out of range for axis " + A +
       " of size %lld\", (long long)kiln_host[j], "
       "(long long)kiln_dim);\n    }\n  }\n";
  h += "  void *kiln_y = " + y + "->data, *kiln_x = " + x + "->data, *kiln_idx = " + ix +
       "->data;\n";
  h += "  if (kiln_total > 0) KILN_LAUNCH(" + k.name +
       ", kiln_cuda_blocks(kiln_total, 256, 4096), 1, 1, 256, 1, 1, 0, &kiln_total, &kiln_n, "
       "&kiln_inner, &kiln_dim, &kiln_y, &kiln_x, &kiln_idx);\n}\n";
  c.launch = h;
  return c;
}

}  // namespace kiln
