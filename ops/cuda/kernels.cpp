#include "ops/cuda/kernels.h"

#include "ctemplate/template.h"
#include "ops/c/elementwise_loop.h"
#include "ops/cuda/epilogue.h"
#include "util/error.h"

namespace kiln {
namespace {

std::string ctype(DType dt) { return std::string(dtype_c_type(dt)); }

// The launch's arguments as addresses of host locals: "&kiln_a0, &kiln_a1".
std::string addresses(const std::vector<std::string>& locals) {
  std::string s;
  for (const auto& l : locals) s += (s.empty() ? "&" : ", &") + l;
  return s;
}

// Fills a kiln_cuda_nd over some dimensions of contiguous input 0: shape and strides[0].
std::string host_dims(const std::string& nd, const std::vector<bool>& mask, bool want,
                      const std::string& tensor) {
  std::string s;
  s += "  " + nd + ".ndim = 0;\n  " + nd + ".numel = 1;\n";
  s += "  {\n    int64_t kiln_stride = 1;\n";
  s += "    int64_t kiln_strides[KILN_CUDA_MAX_RANK];\n";
  s += "    for (int d = " + tensor + "->ndim - 1; d >= 0; --d) {\n";
  s += "      kiln_strides[d] = kiln_stride;\n      kiln_stride *= " + tensor +
       "->shape[d];\n    }\n";
  for (size_t d = 0; d < mask.size(); ++d) {
    if (mask[d] != want) continue;
    const std::string D = std::to_string(d);
    s += "    " + nd + ".shape[" + nd + ".ndim] = " + tensor + "->shape[" + D + "];\n";
    s += "    " + nd + ".strides[0][" + nd + ".ndim++] = kiln_strides[" + D + "];\n";
    s += "    " + nd + ".numel *= " + tensor + "->shape[" + D + "];\n";
  }
  s += "    (void)kiln_strides;\n";
  // Offsets equal flat indices when the chosen dimensions are packed (a row reduction's
  // reduced axes, a column reduction's kept ones): kernels then skip the index division.
  s += "    kiln_stride = 1;\n    " + nd + ".contiguous = 1;\n";
  s += "    for (int d = " + nd + ".ndim - 1; d >= 0; --d) {\n";
  s += "      if (" + nd + ".shape[d] != 1 && " + nd + ".strides[0][d] != kiln_stride) " + nd +
       ".contiguous = 0;\n";
  s += "      kiln_stride *= " + nd + ".shape[d];\n    }\n";
  s += "  }\n";
  return s;
}

}  // namespace

std::string cuda_grid_loop(const std::string& index, const std::string& count) {
  return "  const int64_t step = (int64_t)gridDim.x * blockDim.x;\n  for (int64_t " + index +
         " = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; " + index + " < " + count + "; " +
         index + " += step) {\n";
}

std::string cuda_device_rules(const std::string& guard, const std::string& fn_macro,
                              const std::string& text) {
  return "#ifndef " + guard + "\n#define " + guard + "\n#define " + fn_macro +
         " __device__ static\n" + text + "\n#endif\n";
}

bool cuda_dtypes_ok(const Node& node) {
  for (const auto* list : {&node.inputs, &node.outputs}) {
    for (const Variable* v : *list) {
      if (v->type.dtype == DType::kFloat16 || v->type.dtype == DType::kBFloat16) return false;
      if (v->type.rank() > 8) return false;
    }
  }
  return true;
}

DeviceCode cuda_elementwise(const Node& node, const CodeNames& names, const Sub& sub,
                            const std::vector<std::string>& lets, const std::string& expr,
                            bool math) {
  DeviceCode c;
  c.preludes = {"kiln_scalar.h"};
  if (math) c.preludes.push_back("kiln_math.h");
  const TensorType& out = node.outputs[0]->type;
  const std::string OT = ctype(out.dtype);
  DeviceKernel k;
  k.name = sub.prefix + "elementwise";
  k.params = {"kiln_cuda_nd", OT + "*"};
  // __grid_constant__: kernels take these index maps' addresses; without it every thread
  // copies the struct (hundreds of bytes) into local memory first.
  std::string sig = "const __grid_constant__ kiln_cuda_nd nd, " + OT + " *__restrict__ y";
  std::string loads, vec_decl, vec_loads, vec_reads;
  TemplateValues v;
  std::vector<std::string> host_ops, locals{"kiln_nd", "kiln_y"};
  std::string host_ptrs = "  void *kiln_y = " + names.outputs[0] + "->data;\n";
  int nops = 0;
  for (size_t i = 0; i < node.inputs.size(); ++i) {
    const LoopOperand lo = loop_operand(node.inputs[i], names.inputs[i], out);
    const std::string I = std::to_string(i);
    if (lo.literal) {
      v[I] = *lo.literal;
      continue;
    }
    const std::string T = ctype(node.inputs[i]->type.dtype);
    k.params.push_back("const " + T + "*");
    sig += ", const " + T + " *__restrict__ in" + I;
    loads += "    const " + T + " a" + I + " = in" + I + "[kiln_cuda_offset(&nd, " +
             std::to_string(nops) + ", i)];\n";
    vec_decl += "      " + T + " v" + I + "[4] = {};\n";
    vec_loads += " v" + I + "[u] = in" + I + "[i];";
    vec_reads += "          const " + T + " a" + I + " = v" + I + "[u];\n";
    v[I] = "a" + I;
    host_ops.push_back(names.inputs[i]);
    host_ptrs += "  void *kiln_in" + I + " = " + names.inputs[i] + "->data;\n";
    locals.push_back("kiln_in" + I);
    ++nops;
  }
  std::string compute;
  for (const auto& l : lets) compute += render_template(l, v, "cuda elementwise") + "\n";
  compute += "y[i] = (" + OT + ")(" + render_template(expr, v, "cuda elementwise") + ");\n";
  auto indent = [&](const std::string& text, const std::string& pad) {
    std::string out;
    for (size_t at = 0; at < text.size();) {
      const size_t nl = text.find('\n', at);
      out += pad + text.substr(at, nl - at) + "\n";
      at = nl + 1;
    }
    return out;
  };
  // Every operand indexed like y (no broadcast, no strides): four elements per thread,
  // all loads issued before any compute, so each thread keeps four loads in flight and
  // the kernel runs at the memory's speed rather than its latency.
  const std::string contiguous =
      "  if (nd.contiguous) {\n"
      "    const int64_t n = nd.numel, bd = blockDim.x, step = (int64_t)gridDim.x * bd * 4;\n"
      "    for (int64_t b = (int64_t)blockIdx.x * bd * 4 + threadIdx.x; b < n; b += step) {\n" +
      vec_decl +
      "#pragma unroll\n"
      "      for (int u = 0; u < 4; ++u) {\n"
      "        const int64_t i = b + u * bd;\n"
      "        if (i < n) {" +
      vec_loads +
      " }\n"
      "      }\n"
      "#pragma unroll\n"
      "      for (int u = 0; u < 4; ++u) {\n"
      "        const int64_t i = b + u * bd;\n"
      "        if (i < n) {\n" +
      vec_reads + indent(compute, "          ") +
      "        }\n"
      "      }\n"
      "    }\n"
      "    return;\n"
      "  }\n";
  k.code = "__global__ void " + k.name + "(" + sig + ") {\n" + contiguous +
           "  const int64_t step = (int64_t)gridDim.x * blockDim.x;\n" +
           "  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < nd.numel; "
           "i += step) {\n" +
           loads + indent(compute, "    ") + "  }\n}\n";
  c.kernels.push_back(k);

  std::string h = "kiln_cuda_nd kiln_nd;\n";
  h += nops ? "const kiln_tensor *kiln_ops[] = {" +
                  [&] {
                    std::string s;
                    for (const auto& o : host_ops) s += (s.empty() ? "" : ", ") + o;
                    return s;
                  }() +
                  "};\n"
            : "const kiln_tensor *const *kiln_ops = 0;\n";
  h += "if (kiln_cuda_nd_init(&kiln_nd, " + names.outputs[0] + ", kiln_ops, " +
       std::to_string(nops) + ")) " + sub.fail +
       "(\"rank %d or %d operands: above the CUDA kernels' limits (8, 12)\", (int)" +
       names.outputs[0] + "->ndim, " + std::to_string(nops) + ");\n";
  h += "{\n" + host_ptrs;
  h += "  if (kiln_nd.numel > 0) KILN_LAUNCH(" + k.name +
       ", kiln_cuda_blocks(kiln_nd.numel, kiln_nd.contiguous ? 1024 : 256, 4096), 1, 1, 256, 1, "
       "1, 0, " +
       addresses(locals) + ");\n}\n";
  c.launch = h;
  return c;
}

DeviceCode cuda_reduce(const Node& node, const CodeNames& names, const Sub& sub, ReduceKind kind,
                       const std::vector<bool>& mask) {
  DeviceCode c;
  const DType dt = node.outputs[0]->type.dtype;
  const std::string T = ctype(dt);
  DeviceKernel k;
  k.name = sub.prefix + "reduce";
  k.params = {"kiln_cuda_nd", "kiln_cuda_nd", T + "*", "const " + T + "*"};
  const std::string ident = "(" + T + ")" + identity_of(kind, dt);
  const std::string f =
      "[](" + T + " a, " + T + " x) { return (" + T + ")(" + combine(kind, dt, "a", "x") + "); }";
  std::string finish = "acc";
  if (kind == ReduceKind::kMean)
    finish = "(red.numel > 0 ? acc / (" + T + ")red.numel : acc / (" + T + ")0)";
  if (kind == ReduceKind::kMean && !is_float(dt))
    finish = "(red.numel > 0 ? acc / (" + T + ")red.numel : (" + T + ")0)";
  k.code =
      "__global__ void " + k.name +
      "(const __grid_constant__ kiln_cuda_nd keep, const __grid_constant__ kiln_cuda_nd red, " + T +
      " *__restrict__ y, const " + T +
      " *__restrict__ x) {\n"
      "  __shared__ " +
      T +
      " scratch[33];\n"
      "  const auto f = " +
      f +
      ";\n"
      "  for (int64_t o = blockIdx.x; o < keep.numel; o += gridDim.x) {\n"
      "    const int64_t base = kiln_cuda_offset(&keep, 0, o);\n"
      "    " +
      T + " acc = " + ident +
      ";\n"
      // Four loads in flight per thread, combined in the same order as one at a time.
      "    const int64_t bd = blockDim.x;\n"
      "    int64_t r = threadIdx.x;\n"
      "    for (; r + 3 * bd < red.numel; r += 4 * bd) {\n"
      "      const " +
      T +
      " v0 = x[base + kiln_cuda_offset(&red, 0, r)];\n"
      "      const " +
      T +
      " v1 = x[base + kiln_cuda_offset(&red, 0, r + bd)];\n"
      "      const " +
      T +
      " v2 = x[base + kiln_cuda_offset(&red, 0, r + 2 * bd)];\n"
      "      const " +
      T +
      " v3 = x[base + kiln_cuda_offset(&red, 0, r + 3 * bd)];\n"
      "      acc = f(f(f(f(acc, v0), v1), v2), v3);\n"
      "    }\n"
      "    for (; r < red.numel; r += bd) acc = f(acc, x[base + kiln_cuda_offset(&red, 0, r)]);\n"
      "    acc = kiln_block_reduce(acc, " +
      ident +
      ", f, scratch);\n"
      "    if (threadIdx.x == 0) y[o] = " +
      finish +
      ";\n"
      "  }\n}\n";
  c.kernels.push_back(k);
  std::string h = "kiln_cuda_nd kiln_keep, kiln_red;\n";
  h += host_dims("kiln_keep", mask, false, names.inputs[0]);
  h += host_dims("kiln_red", mask, true, names.inputs[0]);
  h += "{\n  void *kiln_y = " + names.outputs[0] + "->data;\n  void *kiln_x = " + names.inputs[0] +
       "->data;\n";
  h += "  if (kiln_keep.numel > 0) KILN_LAUNCH(" + k.name +
       ", kiln_cuda_blocks(kiln_keep.numel, 1, 65535), 1, 1, 256, 1, 1, 0, &kiln_keep, "
       "&kiln_red, &kiln_y, &kiln_x);\n}\n";
  c.launch = h;
  return c;
}

DeviceCode cuda_softmax(const Node& node, const CodeNames& names, const Sub& sub, int axis,
                        bool log) {
  DeviceCode c;
  c.preludes = {"kiln_math.h"};
  const DType dt = node.outputs[0]->type.dtype;
  const std::string T = ctype(dt);
  const std::string sfx = dt == DType::kFloat32 ? "f" : "";
  DeviceKernel k;
  k.name = sub.prefix + "softmax";
  k.params = {"int64_t", "int64_t", "int64_t", T + "*", "const " + T + "*"};
  // Rows up to 32 KB (8192 float32, 4096 float64 values) are kept in shared memory, so x
  // is read once and y written once: the load (eight loads in flight per thread) finds
  // the max, a pass over shared memory the exponentials and their sum. Each thread touches
  // only its own elements of the row, in the order of the streaming form below (so the
  // same sums). Longer rows are streamed three times: max, sum, write. (A one-pass online
  // max and sum was tried: its dependent exp per loaded element made it compute-bound,
  // 0.61 of the copy kernel's bandwidth on an H100 against 0.82 for this form.)
  static const char* const kCode =
      R"(__global__ void ${NAME}(int64_t slices, int64_t n, int64_t inner, ${T} *__restrict__ y, const ${T} *__restrict__ x) {
  __shared__ ${T} scratch[33];
  __shared__ ${T} row[${CAP}];
  const auto max_f = [](${T} a, ${T} b) { return (b > a || b != b) ? b : a; };
  const auto sum_f = [](${T} a, ${T} b) { return a + b; };
  const int64_t bd = blockDim.x;
  for (int64_t sl = blockIdx.x; sl < slices; sl += gridDim.x) {
    const int64_t base = (sl / inner) * n * inner + sl % inner;
    if (n <= ${CAP}) {
      ${T} m = -INFINITY;
      const auto add = [&](${T} v) { m = (v > m || v != v) ? v : m; };
      int64_t j = threadIdx.x;
      for (; j + 7 * bd < n; j += 8 * bd) {
        ${T} v[8];
#pragma unroll
        for (int u = 0; u < 8; ++u) v[u] = x[base + (j + u * bd) * inner];
#pragma unroll
        for (int u = 0; u < 8; ++u) {
          row[j + u * bd] = v[u];
          add(v[u]);
        }
      }
      for (; j < n; j += bd) {
        const ${T} v = x[base + j * inner];
        row[j] = v;
        add(v);
      }
      m = kiln_block_reduce(m, (${T})-INFINITY, max_f, scratch);
      ${T} s = 0;
      for (j = threadIdx.x; j < n; j += bd) {
        const ${T} e = kiln_exp${F}(row[j] - m);
        s += e;
        ${KEEP}
      }
      s = kiln_block_reduce(s, (${T})0, sum_f, scratch);
      const ${T} ls = kiln_log${F}(s);
      (void)ls;
      for (j = threadIdx.x; j < n; j += bd) y[base + j * inner] = ${CACHED};
      continue;
    }
    ${T} m = -INFINITY;
    for (int64_t j = threadIdx.x; j < n; j += bd) {
      const ${T} v = x[base + j * inner];
      m = (v > m || v != v) ? v : m;
    }
    m = kiln_block_reduce(m, (${T})-INFINITY, max_f, scratch);
    ${T} s = 0;
    for (int64_t j = threadIdx.x; j < n; j += bd) s += kiln_exp${F}(x[base + j * inner] - m);
    s = kiln_block_reduce(s, (${T})0, sum_f, scratch);
    const ${T} ls = kiln_log${F}(s);
    (void)ls;
    for (int64_t j = threadIdx.x; j < n; j += bd) {
      const ${T} v = x[base + j * inner];
      y[base + j * inner] = ${WRITE};
    }
  }
}
)";
  k.code = render_template(kCode,
                           {{"NAME", k.name},
                            {"T", T},
                            {"F", sfx},
                            {"CAP", std::to_string(32768 / dtype_size(dt))},
                            {"WRITE", log ? "(v - m) - ls" : "kiln_exp" + sfx + "(v - m) / s"},
                            {"KEEP", log ? "" : "row[j] = e;"},
                            {"CACHED", log ? "(row[j] - m) - ls" : "row[j] / s"}},
                           "cuda softmax kernel");
  c.kernels.push_back(k);
  const std::string A = std::to_string(axis);
  std::string h = "{\n  int64_t kiln_outer = 1, kiln_inner = 1, kiln_n = " + names.inputs[0] +
                  "->shape[" + A + "];\n";
  h += "  for (int d = 0; d < " + A + "; ++d) kiln_outer *= " + names.inputs[0] + "->shape[d];\n";
  h += "  for (int d = " + A + " + 1; d < " + names.inputs[0] +
       "->ndim; ++d) kiln_inner *= " + names.inputs[0] + "->shape[d];\n";
  h += "  int64_t kiln_slices = kiln_outer * kiln_inner;\n";
  h += "  void *kiln_y = " + names.outputs[0] + "->data;\n  void *kiln_x = " + names.inputs[0] +
       "->data;\n";
  h += "  if (kiln_slices > 0 && kiln_n > 0) KILN_LAUNCH(" + k.name +
       ", kiln_cuda_blocks(kiln_slices, 1, 65535), 1, 1, 512, 1, 1, 0, "
       "&kiln_slices, &kiln_n, "
       "&kiln_inner, &kiln_y, &kiln_x);\n}\n";
  c.launch = h;
  return c;
}

namespace {

// A 64x64 tile of Y per block of 16x16 threads, each thread 4x4 results spaced 16 apart
// (conflict-free shared reads); K in steps of 16 through shared memory.
std::string gemm_kernel_code(const std::string& name, const std::string& T,
                             const CudaEpilogue* epi) {
  static const char* const kCode =
      R"(${EPI_FUNCTION}__global__ void ${NAME}(int64_t M, int64_t N, int64_t K, const __grid_constant__ kiln_cuda_nd bnd, const ${T} *__restrict__ A, int64_t rsa, int64_t csa, const ${T} *__restrict__ B, int64_t rsb, int64_t csb, const ${T} *__restrict__ C, int64_t rsc, int64_t csc, ${T} alpha, ${T} beta, ${T} *__restrict__ Y${EPI_SIGNATURE}) {
  __shared__ ${T} As[16][65];
  __shared__ ${T} Bs[16][64];
  const int tx = (int)threadIdx.x, ty = (int)threadIdx.y, tid = ty * 16 + tx;
  const int64_t z = blockIdx.z;
  const ${T} *Az = A + kiln_cuda_offset(&bnd, 0, z);
  const ${T} *Bz = B + kiln_cuda_offset(&bnd, 1, z);
  const int64_t row0 = (int64_t)blockIdx.y * 64, col0 = (int64_t)blockIdx.x * 64;
  ${T} acc[4][4];
#pragma unroll
  for (int i = 0; i < 4; ++i)
#pragma unroll
    for (int j = 0; j < 4; ++j) acc[i][j] = 0;
  for (int64_t k0 = 0; k0 < K; k0 += 16) {
#pragma unroll
    for (int t = 0; t < 4; ++t) {
      const int idx = tid + 256 * t;
      const int ar = idx >> 4, ac = idx & 15, br = idx >> 6, bc = idx & 63;
      const int64_t gr = row0 + ar, ga = k0 + ac, gb = k0 + br, gc = col0 + bc;
      As[ac][ar] = (gr < M && ga < K) ? Az[gr * rsa + ga * csa] : (${T})0;
      Bs[br][bc] = (gb < K && gc < N) ? Bz[gb * rsb + gc * csb] : (${T})0;
    }
    __syncthreads();
#pragma unroll
    for (int kk = 0; kk < 16; ++kk) {
      ${T} a[4], b[4];
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        a[i] = As[kk][ty + 16 * i];
        b[i] = Bs[kk][tx + 16 * i];
      }
#pragma unroll
      for (int i = 0; i < 4; ++i)
#pragma unroll
        for (int j = 0; j < 4; ++j) acc[i][j] += a[i] * b[j];
    }
    __syncthreads();
  }
#pragma unroll
  for (int i = 0; i < 4; ++i) {
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const int64_t row = row0 + ty + 16 * i, col = col0 + tx + 16 * j;
      if (row < M && col < N) {
        ${T} r = alpha * acc[i][j];
        if (C) r += beta * C[row * rsc + col * csc];
        const int64_t o = (z * M + row) * N + col;
        Y[o] = ${STORE};
      }
    }
  }
}
)";
  return render_template(kCode,
                         {{"EPI_FUNCTION", epi ? epi->function : ""},
                          {"NAME", name},
                          {"T", T},
                          {"EPI_SIGNATURE", epi ? epi->signature : ""},
                          {"STORE", cuda_store(epi, "r", "o")}},
                         "cuda gemm kernel");
}

// The host side: the operands' sizes and strides as the kernel reads them (a transposed
// operand is its strides swapped), the batch dimensions, the optional C, the launch.
std::string gemm_launch(const Node& node, const CodeNames& names, const Sub& sub,
                        const std::string& kernel, bool trans_a, bool trans_b, double alpha,
                        double beta, const CudaEpilogue* epi) {
  const DType dt = node.outputs[0]->type.dtype;
  const std::string T = ctype(dt);
  const std::string& a = names.inputs[0];
  const std::string& b = names.inputs[1];
  const std::string& y = names.outputs[0];
  const int ra = node.inputs[0]->type.rank(), rb = node.inputs[1]->type.rank();
  const int nb = node.outputs[0]->type.rank() - (ra > 1) - (rb > 1);  // batch dimensions
  auto dim = [](const std::string& t, int d) { return t + "->shape[" + std::to_string(d) + "]"; };
  auto stride = [](const std::string& t, int d) {
    return t + "->strides[" + std::to_string(d) + "]";
  };
  std::string h = "{\n" + (epi ? epi->host : "");
  // A 1-D A is one row (1, K); a 1-D B one column (K, 1). Any strides work.
  if (ra == 1) {
    h += "int64_t kiln_m = 1, kiln_k = " + dim(a, 0) + ", kiln_rsa = 0, kiln_csa = " +
         stride(a, 0) + ";\n";
  } else {
    const int rd = trans_a ? ra - 1 : ra - 2, cd = trans_a ? ra - 2 : ra - 1;
    h += "int64_t kiln_m = " + dim(a, rd) + ", kiln_k = " + dim(a, cd) +
         ", kiln_rsa = " + stride(a, rd) + ", kiln_csa = " + stride(a, cd) + ";\n";
  }
  if (rb == 1) {
    h += "int64_t kiln_n = 1, kiln_rsb = " + stride(b, 0) + ", kiln_csb = 0;\n";
  } else {
    const int rd = trans_b ? rb - 1 : rb - 2, cd = trans_b ? rb - 2 : rb - 1;
    h += "int64_t kiln_n = " + dim(b, cd) + ", kiln_rsb = " + stride(b, rd) +
         ", kiln_csb = " + stride(b, cd) + ";\n";
  }
  // Batch dimensions broadcast: an operand lacking one, or of size 1 there, repeats.
  h += "kiln_cuda_nd kiln_bnd;\nkiln_bnd.ndim = " + std::to_string(nb) +
       ";\nkiln_bnd.numel = 1;\nkiln_bnd.contiguous = 0;\n";
  for (int d = 0; d < nb; ++d) {
    const std::string D = std::to_string(d);
    h += "kiln_bnd.shape[" + D + "] = " + dim(y, d) + ";\nkiln_bnd.numel *= " + dim(y, d) + ";\n";
    for (int op = 0; op < 2; ++op) {
      const std::string& t = op ? b : a;
      const int td = d - (nb - ((op ? rb : ra) - 2));
      h += "kiln_bnd.strides[" + std::to_string(op) + "][" + D +
           "] = " + (td < 0 ? std::string("0") : dim(t, td) + " == 1 ? 0 : " + stride(t, td)) +
           ";\n";
    }
  }
  h += "int64_t kiln_rsc = 0, kiln_csc = 0;\nvoid *kiln_c = 0;\n";
  if (names.inputs.size() > 2) {
    const std::string& cc = names.inputs[2];
    h += "kiln_c = " + cc + "->data;\n";
    h += "if (" + cc + "->ndim == 2) {\n";
    h += "kiln_rsc = " + cc + "->shape[0] == 1 ? 0 : " + cc + "->strides[0];\n";
    h += "kiln_csc = " + cc + "->shape[1] == 1 ? 0 : " + cc + "->strides[1];\n";
    h += "} else if (" + cc + "->ndim == 1) {\n";
    h += "kiln_csc = " + cc + "->shape[0] == 1 ? 0 : " + cc + "->strides[0];\n}\n";
  }
  h += T + " kiln_alpha = (" + T + ")" + c_literal(dt, alpha) + ", kiln_beta = (" + T + ")" +
       c_literal(dt, beta) + ";\n";
  h += "void *kiln_a = " + a + "->data, *kiln_b = " + b + "->data, *kiln_y = " + y + "->data;\n";
  h += "if (kiln_m > 0 && kiln_n > 0 && kiln_bnd.numel > 0) {\n";
  h += "if ((kiln_m + 63) / 64 > 65535 || kiln_bnd.numel > 65535) " + sub.fail +
       "(\"%lld rows in %lld batches: above the CUDA GEMM's limits (4194240, 65535)\", "
       "(long long)kiln_m, (long long)kiln_bnd.numel);\n";
  h += "KILN_LAUNCH(" + kernel +
       ", (kiln_n + 63) / 64, (kiln_m + 63) / 64, kiln_bnd.numel, 16, 16, 1, 0, &kiln_m, "
       "&kiln_n, &kiln_k, &kiln_bnd, &kiln_a, &kiln_rsa, &kiln_csa, &kiln_b, &kiln_rsb, "
       "&kiln_csb, &kiln_c, &kiln_rsc, &kiln_csc, &kiln_alpha, &kiln_beta, &kiln_y" +
       (epi ? epi->launch_args : "") + ");\n}\n}\n";
  return h;
}

}  // namespace

DeviceCode cuda_gemm(const Node& node, const CodeNames& names, const Sub& sub, bool trans_a,
                     bool trans_b, double alpha, double beta, const CudaEpilogue* epi) {
  DeviceCode c;
  if (epi) c.preludes = epi->preludes;
  const std::string T = ctype(node.outputs[0]->type.dtype);
  DeviceKernel k;
  k.name = sub.prefix + "gemm";
  // M, N, K; batch offsets; A and its strides; B and its strides; C and its strides;
  // alpha, beta; Y.
  k.params = {"int64_t",         "int64_t", "int64_t", "kiln_cuda_nd", "const " + T + "*",
              "int64_t",         "int64_t", "const " + T + "*", "int64_t", "int64_t",
              "const " + T + "*", "int64_t", "int64_t", T, T, T + "*"};
  if (epi) k.params.insert(k.params.end(), epi->params.begin(), epi->params.end());
  k.code = gemm_kernel_code(k.name, T, epi);
  c.kernels.push_back(k);
  c.launch = gemm_launch(node, names, sub, k.name, trans_a, trans_b, alpha, beta, epi);
  return c;
}

}  // namespace kiln
