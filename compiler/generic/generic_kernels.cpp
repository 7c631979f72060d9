#include "compiler/generic/generic_kernels.h"

#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <initializer_list>

#include "ops/conv.h"
#include "ops/elementwise.h"
#include "ops/gemm.h"
#include "ops/matmul.h"
#include "ops/pool.h"
#include "ops/reduce.h"
#include "ops/softmax.h"

namespace kiln {
namespace {

bool all_float32(const std::vector<Tensor>& ts) {
  return std::all_of(ts.begin(), ts.end(),
                     [](const Tensor& t) { return t.dtype() == DType::kFloat32; });
}

// Sizes OpenBLAS takes as int.
bool fits_int(std::initializer_list<int64_t> sizes) {
  return std::all_of(sizes.begin(), sizes.end(), [](int64_t v) { return v <= INT32_MAX; });
}

const float* fdata(const Tensor& t) { return static_cast<const float*>(t.data()); }
float* fdata(Tensor& t) { return static_cast<float*>(t.data()); }

// ---- Elementwise: the output's index space walked once, each operand by its own strides
// (0 along a broadcast dimension), adjacent dimensions merged where every operand allows.

struct Walk {
  std::vector<int64_t> dims;                  // merged output dims, outermost first
  std::vector<std::vector<int64_t>> strides;  // per operand, per merged dim
};

Walk broadcast_walk(const Shape& out, const std::vector<Tensor>& ins) {
  const size_t rank = out.size();
  Walk w;
  std::vector<std::vector<int64_t>> full(ins.size(), std::vector<int64_t>(rank, 0));
  for (size_t k = 0; k < ins.size(); ++k) {
    const Shape& s = ins[k].shape();
    int64_t stride = 1;
    for (size_t i = 0; i < s.size(); ++i) {
      const size_t d = rank - 1 - i;
      const int64_t dim = s[s.size() - 1 - i];
      full[k][d] = dim == 1 && out[d] != 1 ? 0 : stride;
      stride *= dim;
    }
  }
  w.strides.assign(ins.size(), {});
  for (size_t d = 0; d < rank; ++d) {
    if (out[d] == 1) continue;  // contributes nothing to any index
    bool merge = !w.dims.empty();
    for (size_t k = 0; merge && k < ins.size(); ++k)
      merge = w.strides[k].back() == full[k][d] * out[d];
    if (merge) {
      w.dims.back() *= out[d];
      for (size_t k = 0; k < ins.size(); ++k) w.strides[k].back() = full[k][d];
    } else {
      w.dims.push_back(out[d]);
      for (size_t k = 0; k < ins.size(); ++k) w.strides[k].push_back(full[k][d]);
    }
  }
  if (w.dims.empty()) {
    w.dims.push_back(1);
    for (auto& s : w.strides) s.push_back(0);
  }
  return w;
}

// Calls body(out_offset, operand offsets, inner length, inner strides) once per inner run.
template <class Body>
void for_each_run(const Walk& w, Body body) {
  const size_t rank = w.dims.size(), n = w.strides.size();
  const int64_t inner = w.dims.back();
  std::vector<int64_t> inner_stride(n), offset(n, 0), idx(rank, 0);
  for (size_t k = 0; k < n; ++k) inner_stride[k] = w.strides[k].back();
  int64_t outer = 1;
  for (size_t d = 0; d + 1 < rank; ++d) outer *= w.dims[d];
  for (int64_t o = 0; o < outer; ++o) {
    body(o * inner, offset, inner, inner_stride);
    for (size_t d = rank - 1; d-- > 0;) {  // odometer over the outer dims
      ++idx[d];
      for (size_t k = 0; k < n; ++k) offset[k] += w.strides[k][d];
      if (idx[d] < w.dims[d]) break;
      for (size_t k = 0; k < n; ++k) offset[k] -= w.strides[k][d] * w.dims[d];
      idx[d] = 0;
    }
  }
}

template <class F>
void binary_loop(const Walk& w, const float* a, const float* b, float* y, F f) {
  for_each_run(w, [&](int64_t out, const std::vector<int64_t>& off, int64_t len,
                      const std::vector<int64_t>& st) {
    const float* __restrict pa = a + off[0];
    const float* __restrict pb = b + off[1];
    float* __restrict py = y + out;
    if (st[0] == 1 && st[1] == 1) {
      for (int64_t i = 0; i < len; ++i) py[i] = f(pa[i], pb[i]);
    } else if (st[0] == 1) {
      const float vb = *pb;
      for (int64_t i = 0; i < len; ++i) py[i] = f(pa[i], st[1] ? pb[i * st[1]] : vb);
    } else {
      for (int64_t i = 0; i < len; ++i) py[i] = f(pa[i * st[0]], pb[i * st[1]]);
    }
  });
}

template <class F>
void unary_loop(const Walk& w, const float* a, float* y, F f) {
  for_each_run(w, [&](int64_t out, const std::vector<int64_t>& off, int64_t len,
                      const std::vector<int64_t>& st) {
    const float* __restrict pa = a + off[0];
    float* __restrict py = y + out;
    if (st[0] == 1) {
      for (int64_t i = 0; i < len; ++i) py[i] = f(pa[i]);
    } else {
      for (int64_t i = 0; i < len; ++i) py[i] = f(pa[i * st[0]]);
    }
  });
}

bool run_elementwise(const Elementwise& op, const std::vector<Tensor>& ins, Tensor& y) {
  const ScalarOpDef& def = op.def();
  if (def.out != OutRule::kSame || !all_float32(ins) || y.dtype() != DType::kFloat32) return false;
  const Walk w = broadcast_walk(y.shape(), ins);
  float* out = fdata(y);
  const std::string_view name = def.name;
  if (ins.size() == 2) {
    const float* a = fdata(ins[0]);
    const float* b = fdata(ins[1]);
    // Rounded from float operands, + - * / in float equal the reference's double result.
    if (name == "add")
      return binary_loop(w, a, b, out, [](float x, float z) { return x + z; }), true;
    if (name == "sub")
      return binary_loop(w, a, b, out, [](float x, float z) { return x - z; }), true;
    if (name == "mul")
      return binary_loop(w, a, b, out, [](float x, float z) { return x * z; }), true;
    if (name == "div")
      return binary_loop(w, a, b, out, [](float x, float z) { return x / z; }), true;
  }
  if (ins.size() == 1) {
    const float* a = fdata(ins[0]);
    // float libm where the table's reference calls double libm: within an ulp or two.
    if (name == "relu")
      return unary_loop(w, a, out, [](float v) { return v < 0 ? 0.0f : v; }), true;
    if (name == "sigmoid")
      return unary_loop(w, a, out, [](float v) { return 1.0f / (1.0f + std::exp(-v)); }), true;
    if (name == "exp") return unary_loop(w, a, out, [](float v) { return std::exp(v); }), true;
    if (name == "tanh") return unary_loop(w, a, out, [](float v) { return std::tanh(v); }), true;
    if (name == "erf") return unary_loop(w, a, out, [](float v) { return std::erf(v); }), true;
    if (name == "sqrt") return unary_loop(w, a, out, [](float v) { return std::sqrt(v); }), true;
  }
  if (ins.size() == 3 && name == "clip") {
    const float* x = fdata(ins[0]);
    const float* lo = fdata(ins[1]);
    const float* hi = fdata(ins[2]);
    for_each_run(w, [&](int64_t o, const std::vector<int64_t>& off, int64_t len,
                        const std::vector<int64_t>& st) {
      for (int64_t i = 0; i < len; ++i) {
        const float v = x[off[0] + i * st[0]], l = lo[off[1] + i * st[1]],
                    h = hi[off[2] + i * st[2]];
        const float m = v < l ? l : v;  // NaN stays NaN, as in the table
        out[o + i] = m > h ? h : m;
      }
    });
    return true;
  }
  // Any other entry: its reference function, without perform's per-element index search.
  const std::vector<double>& params = op.params();
  const size_t n = ins.size();
  std::vector<const float*> src(n);
  for (size_t k = 0; k < n; ++k) src[k] = fdata(ins[k]);
  std::vector<double> x(n);
  for_each_run(w, [&](int64_t o, const std::vector<int64_t>& off, int64_t len,
                      const std::vector<int64_t>& st) {
    for (int64_t i = 0; i < len; ++i) {
      for (size_t k = 0; k < n; ++k) x[k] = src[k][off[k] + i * st[k]];
      out[o + i] = static_cast<float>(def.ref(x.data(), params.data()));
    }
  });
  return true;
}

// ---- Convolution (1-D and 2-D, any group): each image group's columns gathered (im2col)
// and multiplied by its weights in one SGEMM; depthwise convolutions run directly.

bool run_conv(const Conv& op, const Node& node, const std::vector<Tensor>& ins, Tensor& y) {
  if (op.packed() || !all_float32(ins)) return false;
  const Shape& xs = ins[0].shape();
  const auto& declared = node.inputs[0]->type.dims;
  if (xs.size() != 3 && xs.size() != 4) return false;
  // The geometry comes from the node's types: every dim but the batch must be as declared.
  for (size_t d = 1; d < xs.size(); ++d)
    if (d >= declared.size() || declared[d] != xs[d]) return false;
  std::vector<WindowDims> g = op.node_geometry(node);
  if (g.size() == 1) g.insert(g.begin(), WindowDims{1, 1, 1, 1, 0, 0, 1});
  if (g.size() != 2) return false;
  const int64_t batch = xs[0], c = xs[1], m = ins[1].shape()[0], group = op.group();
  const int64_t cg = c / group, mg = m / group;
  const int64_t h = g[0].in, wd = g[1].in, oh = g[0].out, ow = g[1].out;
  const int64_t kh = g[0].kernel, kw = g[1].kernel, ohw = oh * ow, hw = h * wd;
  const int64_t ckk = cg * kh * kw;
  if (!fits_int({mg, ohw, ckk, ckk * ohw})) return false;
  const float* x = fdata(ins[0]);
  const float* w = fdata(ins[1]);
  const float* bias = ins.size() == 3 ? fdata(ins[2]) : nullptr;
  float* out = fdata(y);
  const bool direct = g[0].kernel == 1 && g[1].kernel == 1 && g[0].stride == 1 &&
                      g[1].stride == 1 && g[0].pad_begin == 0 && g[1].pad_begin == 0 &&
                      g[0].pad_end == 0 && g[1].pad_end == 0;
  std::vector<float> cols(direct || (cg == 1 && mg == 1) ? 0 : static_cast<size_t>(ckk * ohw));
  for (int64_t n = 0; n < batch; ++n) {
    for (int64_t grp = 0; grp < group; ++grp) {
      const float* xg = x + (n * c + grp * cg) * hw;
      float* yg = out + (n * m + grp * mg) * ohw;
      const float* wg = w + grp * mg * ckk;
      if (cg == 1 && mg == 1) {  // depthwise: one plane, one filter
        for (int64_t oy = 0; oy < oh; ++oy) {
          for (int64_t ox = 0; ox < ow; ++ox) {
            float acc = 0;
            for (int64_t i = 0; i < kh; ++i) {
              const int64_t yy = oy * g[0].stride - g[0].pad_begin + i * g[0].dilation;
              if (yy < 0 || yy >= h) continue;
              for (int64_t j = 0; j < kw; ++j) {
                const int64_t xx = ox * g[1].stride - g[1].pad_begin + j * g[1].dilation;
                if (xx >= 0 && xx < wd) acc += xg[yy * wd + xx] * wg[i * kw + j];
              }
            }
            yg[oy * ow + ox] = acc;
          }
        }
      } else {
        const float* b = xg;
        if (!direct) {
          for (int64_t ic = 0; ic < cg; ++ic) {
            for (int64_t i = 0; i < kh; ++i) {
              for (int64_t j = 0; j < kw; ++j) {
                float* row = cols.data() + ((ic * kh + i) * kw + j) * ohw;
                for (int64_t oy = 0; oy < oh; ++oy) {
                  const int64_t yy = oy * g[0].stride - g[0].pad_begin + i * g[0].dilation;
                  for (int64_t ox = 0; ox < ow; ++ox) {
                    const int64_t xx = ox * g[1].stride - g[1].pad_begin + j * g[1].dilation;
                    row[oy * ow + ox] = yy >= 0 && yy < h && xx >= 0 && xx < wd
                                            ? xg[(ic * h + yy) * wd + xx]
                                            : 0.0f;
                  }
                }
              }
            }
          }
          b = cols.data();
        }
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, static_cast<int>(mg),
                    static_cast<int>(ohw), static_cast<int>(ckk), 1.0f, wg, static_cast<int>(ckk),
                    b, static_cast<int>(ohw), 0.0f, yg, static_cast<int>(ohw));
      }
      if (bias) {
        for (int64_t oc = 0; oc < mg; ++oc) {
          const float v = bias[grp * mg + oc];
          float* row = yg + oc * ohw;
          for (int64_t i = 0; i < ohw; ++i) row[i] += v;
        }
      }
    }
  }
  return true;
}

// ---- Pooling (1-D and 2-D), the reference's walk over each window in float.

bool run_pool(const Pool& op, const Tensor& x, Tensor& y) {
  if (x.dtype() != DType::kFloat32 || (x.ndim() != 3 && x.ndim() != 4)) return false;
  std::vector<WindowDims> g = op.geometry(x.shape());
  if (g.size() == 1) g.insert(g.begin(), WindowDims{1, 1, 1, 1, 0, 0, 1});
  if (g.size() != 2) return false;
  const int64_t planes = x.shape()[0] * x.shape()[1];
  const float* in = fdata(x);
  float* out = fdata(y);
  const bool is_max = op.is_max();
  for (int64_t p = 0; p < planes; ++p) {
    const float* plane = in + p * g[0].in * g[1].in;
    for (int64_t oy = 0; oy < g[0].out; ++oy) {
      for (int64_t ox = 0; ox < g[1].out; ++ox) {
        float mx = -INFINITY;
        double sum = 0;
        int64_t count = 0, padded = 0;
        for (int64_t i = 0; i < g[0].kernel; ++i) {
          const int64_t yy = oy * g[0].stride - g[0].pad_begin + i * g[0].dilation;
          if (yy >= g[0].in + g[0].pad_end) break;
          for (int64_t j = 0; j < g[1].kernel; ++j) {
            const int64_t xx = ox * g[1].stride - g[1].pad_begin + j * g[1].dilation;
            if (xx >= g[1].in + g[1].pad_end) break;
            ++padded;
            if (yy < 0 || yy >= g[0].in || xx < 0 || xx >= g[1].in) continue;
            const float v = plane[yy * g[1].in + xx];
            ++count;
            if (!is_max) {
              sum += v;
            } else if (v > mx || std::isnan(v)) {
              mx = v;
            }
          }
        }
        const int64_t divisor = op.count_include_pad() ? padded : std::max<int64_t>(count, 1);
        *out++ = is_max ? mx : static_cast<float>(sum / static_cast<double>(divisor));
      }
    }
  }
  return true;
}

// ---- Softmax and sums over a block of adjacent axes: (outer, n, inner) walks.

bool run_softmax(const Softmax& op, const Tensor& x, Tensor& y) {
  if (x.dtype() != DType::kFloat32 || x.ndim() == 0) return false;
  const int64_t axis = op.axis() < 0 ? op.axis() + x.ndim() : op.axis();
  if (axis < 0 || axis >= x.ndim()) return false;
  int64_t outer = 1, inner = 1;
  for (int64_t d = 0; d < axis; ++d) outer *= x.shape()[d];
  for (int64_t d = axis + 1; d < x.ndim(); ++d) inner *= x.shape()[d];
  const int64_t n = x.shape()[axis];
  const float* in = fdata(x);
  float* out = fdata(y);
  for (int64_t o = 0; o < outer; ++o) {
    for (int64_t i = 0; i < inner; ++i) {
      const float* px = in + o * n * inner + i;
      float* py = out + o * n * inner + i;
      float m = -INFINITY;
      for (int64_t k = 0; k < n; ++k) m = std::max(m, px[k * inner]);
      if (m == -INFINITY) {
        if (op.safe()) {  // PyTorch's safe softmax: a row of -inf attends to nothing
          for (int64_t k = 0; k < n; ++k) py[k * inner] = 0.0f;
          continue;
        }
        m = 0;  // as the reference: a row of -inf gives NaN, not a shift
      }
      double sum = 0;
      for (int64_t k = 0; k < n; ++k) {
        const float e = std::exp(px[k * inner] - m);
        if (!op.log()) py[k * inner] = e;
        sum += e;
      }
      if (op.log()) {
        const float shift = m + static_cast<float>(std::log(sum));
        for (int64_t k = 0; k < n; ++k) py[k * inner] = px[k * inner] - shift;
      } else {
        const float r = static_cast<float>(1.0 / sum);
        for (int64_t k = 0; k < n; ++k) py[k * inner] *= r;
      }
    }
  }
  return true;
}

bool run_reduce(const Reduce& op, const Tensor& x, Tensor& y) {
  if (x.dtype() != DType::kFloat32 || x.ndim() == 0) return false;
  if (op.kind() != ReduceKind::kSum && op.kind() != ReduceKind::kMean) return false;
  const std::vector<bool> mask = op.reduced_mask(x.ndim());
  // The reduced axes (size-1 ones aside) must be adjacent.
  int first = -1, last = -1;
  for (int d = 0; d < x.ndim(); ++d) {
    if (!mask[static_cast<size_t>(d)] || x.shape()[d] == 1) continue;
    if (first < 0) first = d;
    last = d;
  }
  if (first < 0) return false;
  for (int d = first; d <= last; ++d)
    if (!mask[static_cast<size_t>(d)] && x.shape()[d] != 1) return false;
  int64_t outer = 1, n = 1, inner = 1;
  for (int d = 0; d < first; ++d) outer *= x.shape()[d];
  for (int d = first; d <= last; ++d) n *= x.shape()[d];
  for (int d = last + 1; d < x.ndim(); ++d) inner *= x.shape()[d];
  const float* in = fdata(x);
  float* out = fdata(y);
  const double scale = op.kind() == ReduceKind::kMean ? 1.0 / static_cast<double>(n) : 1.0;
  std::vector<double> acc(static_cast<size_t>(inner));
  for (int64_t o = 0; o < outer; ++o) {
    std::fill(acc.begin(), acc.end(), 0.0);
    for (int64_t k = 0; k < n; ++k) {
      const float* row = in + (o * n + k) * inner;
      for (int64_t i = 0; i < inner; ++i) acc[static_cast<size_t>(i)] += row[i];
    }
    for (int64_t i = 0; i < inner; ++i)
      out[o * inner + i] = static_cast<float>(acc[static_cast<size_t>(i)] * scale);
  }
  return true;
}

// ---- Products through OpenBLAS.

bool run_matmul(const MatMul& op, const std::vector<Tensor>& ins, Tensor& y) {
  if (!op.plain() || !all_float32(ins)) return false;
  const Shape& as = ins[0].shape();
  const Shape& bs = ins[1].shape();
  if (as.size() < 2 || bs.size() < 2) return false;  // vector operands: perform
  const int64_t m = as[as.size() - 2], k = as.back(), n = bs.back();
  const Shape a_batch(as.begin(), as.end() - 2), b_batch(bs.begin(), bs.end() - 2);
  const Shape batch(y.shape().begin(), y.shape().end() - 2);
  if (!fits_int({m, n, k, shape_numel(a_batch) * m})) return false;
  const float* a = fdata(ins[0]);
  const float* b = fdata(ins[1]);
  float* out = fdata(y);
  if (shape_numel(b_batch) == 1) {  // one B for every batch: a single product of all rows
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans,
                static_cast<int>(shape_numel(a_batch) * m), static_cast<int>(n),
                static_cast<int>(k), 1.0f, a, static_cast<int>(k), b, static_cast<int>(n), 0.0f,
                out, static_cast<int>(n));
    return true;
  }
  std::vector<Tensor> views{Tensor::empty(DType::kFloat32, a_batch.empty() ? Shape{1} : a_batch),
                            Tensor::empty(DType::kFloat32, b_batch.empty() ? Shape{1} : b_batch)};
  const Walk w = broadcast_walk(batch.empty() ? Shape{1} : batch, views);
  for_each_run(w, [&](int64_t o, const std::vector<int64_t>& off, int64_t len,
                      const std::vector<int64_t>& st) {
    for (int64_t i = 0; i < len; ++i) {
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, static_cast<int>(m),
                  static_cast<int>(n), static_cast<int>(k), 1.0f, a + (off[0] + i * st[0]) * m * k,
                  static_cast<int>(k), b + (off[1] + i * st[1]) * k * n, static_cast<int>(n), 0.0f,
                  out + (o + i) * m * n, static_cast<int>(n));
    }
  });
  return true;
}

bool run_gemm(const Gemm& op, const std::vector<Tensor>& ins, Tensor& y) {
  if (op.packed() || !all_float32(ins)) return false;
  const Shape& as = ins[0].shape();
  const Shape& bs = ins[1].shape();
  if (as.size() != 2 || bs.size() != 2) return false;
  const int64_t m = op.trans_a() ? as[1] : as[0], k = op.trans_a() ? as[0] : as[1];
  const int64_t n = op.trans_b() ? bs[0] : bs[1];
  if (!fits_int({m, n, k})) return false;
  float* out = fdata(y);
  float beta = 0.0f;
  if (ins.size() == 3) {
    // beta * C, broadcast, first; the product is then added to it.
    const float bc = static_cast<float>(op.beta());
    std::vector<Tensor> cin{ins[2]};
    const float* c = fdata(ins[2]);
    for_each_run(broadcast_walk(y.shape(), cin), [&](int64_t o, const std::vector<int64_t>& off,
                                                     int64_t len, const std::vector<int64_t>& st) {
      for (int64_t i = 0; i < len; ++i) out[o + i] = bc * c[off[0] + i * st[0]];
    });
    beta = 1.0f;
  }
  cblas_sgemm(CblasRowMajor, op.trans_a() ? CblasTrans : CblasNoTrans,
              op.trans_b() ? CblasTrans : CblasNoTrans, static_cast<int>(m), static_cast<int>(n),
              static_cast<int>(k), static_cast<float>(op.alpha()), fdata(ins[0]),
              static_cast<int>(as[1]), fdata(ins[1]), static_cast<int>(bs[1]), beta, out,
              static_cast<int>(n));
  return true;
}

}  // namespace

bool run_generic_kernel(const Node& node, const std::vector<Tensor>& inputs,
                        std::vector<Tensor>& outputs) {
  if (outputs.size() != 1) return false;
  for (const Tensor& t : inputs)
    if (!t.is_contiguous()) return false;
  Tensor& y = outputs[0];
  if (y.numel() == 0) return false;
  for (const Tensor& t : inputs)
    if (t.numel() == 0) return false;
  const Op* op = node.op.get();
  if (const auto* e = dynamic_cast<const Elementwise*>(op)) return run_elementwise(*e, inputs, y);
  if (const auto* c = dynamic_cast<const Conv*>(op)) return run_conv(*c, node, inputs, y);
  if (const auto* mm = dynamic_cast<const MatMul*>(op)) return run_matmul(*mm, inputs, y);
  if (const auto* gm = dynamic_cast<const Gemm*>(op)) return run_gemm(*gm, inputs, y);
  if (const auto* pl = dynamic_cast<const Pool*>(op)) return run_pool(*pl, inputs[0], y);
  if (const auto* sm = dynamic_cast<const Softmax*>(op)) return run_softmax(*sm, inputs[0], y);
  if (const auto* r = dynamic_cast<const Reduce*>(op)) return run_reduce(*r, inputs[0], y);
  return false;
}

}  // namespace kiln
