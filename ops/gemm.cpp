#include "ops/gemm.h"

#include <algorithm>

#include "ops/broadcast.h"
#include "ops/c/elementwise_loop.h"
#include "ops/c/gemm_pack.h"
#include "ops/c/gemm_support.h"
#include "ops/c/workspace.h"
#include "ops/matmul.h"
#include "util/error.h"
#include "util/strings.h"

namespace kiln {
namespace {

struct Dims {
  int64_t m, k_a, k_b, n;
};

// B is (K, N), (N, K) when transposed, or packed panels (NP, K, P) for N = packed_n; with
// packed B, A may have leading dimensions, whose rows all count in M.
// bfloat16 panels hold K as pairs: B's K is A's when their pair counts agree.
Dims gemm_dims(const std::vector<int64_t>& a, const std::vector<int64_t>& b, bool ta, bool tb,
               int64_t packed_n, bool pairs = false) {
  auto k_b = [&](int64_t k_a) {
    return pairs && k_a != kDynamic && b[1] != kDynamic && (k_a + 1) / 2 == b[1] ? k_a : b[1];
  };
  if (packed_n > 0 && !ta) {
    int64_t m = 1;
    for (size_t d = 0; d + 1 < a.size(); ++d)
      m = (m == kDynamic || a[d] == kDynamic) ? kDynamic : m * a[d];
    return {m, a.back(), k_b(a.back()), packed_n};
  }
  if (packed_n > 0) return {a[1], a[0], k_b(a[0]), packed_n};
  return {ta ? a[1] : a[0], ta ? a[0] : a[1], tb ? b[1] : b[0], tb ? b[0] : b[1]};
}

}  // namespace

Gemm::Gemm(Attrs props) : COp("gemm", std::move(props)) {
  check_known_attrs(this->props(), {"alpha", "beta", "transA", "transB", "packed_n"});
  alpha_ = attr_float(this->props(), "alpha", 1.0);
  beta_ = attr_float(this->props(), "beta", 1.0);
  trans_a_ = attr_int(this->props(), "transA", 0) != 0;
  trans_b_ = attr_int(this->props(), "transB", 0) != 0;
  packed_n_ = attr_int(this->props(), "packed_n", 0);
  if (packed_n_ < 0)
    throw UserError("gemm: packed_n must be >= 0, got " + std::to_string(packed_n_));
  if (packed_n_ > 0 && trans_b_) {
    throw UserError("gemm: packed_n takes B already packed, so transB must be 0");
  }
}

std::vector<TensorType> Gemm::infer_type(const std::vector<TensorType>& inputs) const {
  if (inputs.size() != 2 && inputs.size() != 3) throw UserError("gemm takes 2 or 3 inputs");
  const auto& a = inputs[0];
  const auto& b = inputs[1];
  const bool pairs = packed_n_ > 0 && b.dtype == DType::kBFloat16;
  if (pairs) {
    if (a.dtype != DType::kFloat32) {
      throw UserError("gemm: bfloat16 packed B needs float32 A, got " + a.to_string());
    }
  } else {
    check_gemm_dtype("gemm", a.dtype, b.dtype);
  }
  if (packed_n_ > 0) {
    if (a.dtype != DType::kFloat32 && a.dtype != DType::kFloat64) {
      throw UserError("gemm: packed B needs float32 or float64, got " + a.to_string());
    }
    const Shape want = pairs
                           ? gemm_packed_bf16_shape(2 * (b.rank() == 3 ? b.dims[1] : 0), packed_n_)
                           : gemm_packed_shape(a.dtype, b.rank() == 3 ? b.dims[1] : 0, packed_n_);
    const bool a_ok = trans_a_ ? a.rank() == 2 : a.rank() >= 2;
    if (!a_ok || b.rank() != 3 || (b.dims[0] != kDynamic && b.dims[0] != want[0]) ||
        b.dims[2] != want[2]) {
      throw UserError("gemm: with packed_n=" + std::to_string(packed_n_) + ", A must be " +
                      (trans_a_ ? "2-D" : "at least 2-D") + " and B packed as (" +
                      std::to_string(want[0]) + ", K, " + std::to_string(want[2]) + "), got " +
                      a.to_string() + " and " + b.to_string());
    }
    if (a.rank() > 2 && inputs.size() == 3 && inputs[2].rank() > 1) {
      throw UserError("gemm: with A " + a.to_string() +
                      " of rank > 2, C must be a row (rank <= 1), got " + inputs[2].to_string());
    }
  } else if (a.rank() != 2 || b.rank() != 2) {
    throw UserError("gemm: A and B must be 2-D, got " + a.to_string() + " and " + b.to_string());
  }
  Dims d = gemm_dims(a.dims, b.dims, trans_a_, trans_b_, packed_n_, pairs);
  if (d.k_a != kDynamic && d.k_b != kDynamic && d.k_a != d.k_b) {
    throw UserError("gemm: inner dimensions differ: " + std::to_string(d.k_a) + " vs " +
                    std::to_string(d.k_b) + (pairs ? " pairs" : "") + " (A " + a.to_string() +
                    ", B " + b.to_string() + ")");
  }
  TensorType out{a.dtype, {d.m, d.n}};
  if (a.rank() > 2) {  // packed B: A's leading dimensions stay in the output
    out.dims.assign(a.dims.begin(), a.dims.end() - 1);
    out.dims.push_back(d.n);
  }
  if (inputs.size() == 3) {
    const auto& c = inputs[2];
    check_gemm_dtype("gemm", a.dtype, c.dtype);
    if (c.rank() > 2) throw UserError("gemm: C must have rank <= 2, got " + c.to_string());
    try {
      const std::vector<int64_t> mn{d.m, d.n};
      auto bd = broadcast_dims({mn, c.dims});
      if (bd.size() != 2 || (mn[0] != kDynamic && bd[0] != mn[0]) ||
          (mn[1] != kDynamic && bd[1] != mn[1])) {
        throw UserError("C does not broadcast to the output");
      }
    } catch (const UserError& e) {
      throw UserError("gemm: C " + c.to_string() + " does not broadcast to (M, N) = " +
                      dims_to_string(out.dims) + ": " + e.what());
    }
  }
  return {out};
}

double Gemm::flops(const std::vector<Shape>& inputs, const std::vector<Shape>& outputs) const {
  const Dims d = gemm_dims(inputs[0], inputs[1], trans_a_, trans_b_, packed_n_, true);
  return 2.0 * static_cast<double>(d.k_a) * static_cast<double>(shape_numel(outputs.at(0)));
}

std::vector<Shape> Gemm::infer_shape(const std::vector<Shape>& inputs) const {
  // (The types say whether B holds pairs; here a panel of 32 does, as no other does.)
  const bool pairs = packed_n_ > 0 && inputs[1].size() == 3 && inputs[1][2] == 2 * kBf16PanelWidth;
  Dims d = gemm_dims(inputs[0], inputs[1], trans_a_, trans_b_, packed_n_, pairs);
  const int64_t width = pairs ? kBf16PanelWidth : inputs[1][2];
  if (packed_n_ > 0 && (width <= 0 || inputs[1][0] != (packed_n_ + width - 1) / width)) {
    throw UserError("gemm: packed B " + dims_to_string(inputs[1]) + " does not hold " +
                    std::to_string(packed_n_) + " columns in panels of " +
                    std::to_string(inputs[1][2]));
  }
  if (d.k_a != d.k_b) {
    throw UserError("gemm: inner dimensions differ: " + dims_to_string(inputs[0]) + " and " +
                    dims_to_string(inputs[1]));
  }
  const Shape mn{d.m, d.n};
  if (inputs.size() == 3 && broadcast_shapes({mn, inputs[2]}) != mn) {
    throw UserError("gemm: C " + dims_to_string(inputs[2]) + " does not broadcast to " +
                    dims_to_string(mn));
  }
  if (inputs[0].size() <= 2) return {mn};
  Shape out(inputs[0].begin(), inputs[0].end() - 1);
  out.push_back(d.n);
  return {out};
}

void Gemm::perform(const std::vector<Tensor>& inputs, std::vector<Tensor>& outputs) const {
  const Tensor& a = inputs[0];
  const Tensor& b = inputs[1];
  Tensor& y = outputs[0];
  const bool pairs = packed_n_ > 0 && b.dtype() == DType::kBFloat16;
  Dims d = gemm_dims(a.shape(), b.shape(), trans_a_, trans_b_, packed_n_, pairs);
  const int64_t p = packed_n_ > 0 ? b.shape()[2] : 0;
  for (int64_t i = 0; i < d.m; ++i) {
    for (int64_t j = 0; j < d.n; ++j) {
      double acc = 0;
      for (int64_t k = 0; k < d.k_a; ++k) {
        double x = a.load(trans_a_ ? k * d.m + i : i * d.k_a + k);
        // bfloat16 B: A is rounded as the kernel reads it.
        if (pairs) x = bfloat16_round(static_cast<float>(x));
        double w = b.load(pairs           ? gemm_packed_bf16_index(k, j, d.k_a)
                          : packed_n_ > 0 ? gemm_packed_index(k, j, d.k_b, p)
                          : trans_b_      ? j * d.k_b + k
                                          : k * d.n + j);
        acc += x * w;
      }
      double v = alpha_ * acc;
      if (inputs.size() == 3) {
        v += beta_ *
             inputs[2].load(broadcast_source_index(i * d.n + j, {d.m, d.n}, inputs[2].shape()));
      }
      if (is_integer(y.dtype())) {
        y.store_int(i * d.n + j, static_cast<int64_t>(v));
      } else {
        y.store(i * d.n + j, v);
      }
    }
  }
}

std::string Gemm::c_support_code_apply(const Node& node, const std::string&) const {
  const DType dt = node.inputs[0]->type.dtype;
  if (packed_n_ == 0) return gemm_support_code(dt);
  const std::string s = node.inputs[1]->type.dtype == DType::kBFloat16 ? "bf16"
                        : dt == DType::kFloat32                        ? "f32"
                                                                       : "f64";
  return "#define kiln_gemm_packed_" + s + " (KILN_SUPPORT->gemm_packed_" + s + ")\n";
}

// py[i, j] = beta * C broadcast, for output rows i in [lo, hi) and columns j in [c0, c1).
std::string Gemm::c_fill_bias(const Node& node, const CodeNames& names, const std::string& lo,
                              const std::string& hi, const std::string& c0,
                              const std::string& c1) const {
  const DType dt = node.inputs[0]->type.dtype;
  const std::string T(dtype_c_type(dt));
  const auto& ct = node.inputs[2]->type;
  const std::string& Cn = names.inputs[2];
  const int rc = ct.rank();
  // C's element strides against (M, N); size-1 or missing dimensions broadcast (stride 0).
  std::string sci = rc == 2 ? "(" + Cn + "->shape[0] == 1 ? 0 : " + Cn + "->strides[0])" : "0";
  std::string scj = rc >= 1
                        ? "(" + Cn + "->shape[" + std::to_string(rc - 1) + "] == 1 ? 0 : " + Cn +
                              "->strides[" + std::to_string(rc - 1) + "])"
                        : "0";
  std::string s = "  const " + T + " *pc = (const " + T + " *)" + Cn + "->data;\n";
  s += "  const int64_t sci = " + sci + ", scj = " + scj + ";\n";
  if (lo.empty()) return s;  // the view only: the packed kernel adds it as it stores
  if (beta_ == 1.0) {
    // A plain broadcast copy: the host's copy loop, not one more loop for clang to compile.
    s += "  {\n";
    s += "    const int64_t fill_shape[2] = {" + hi + " - " + lo + ", " + c1 + " - " + c0 +
         "}, dst_st[2] = {N, 1}, src_st[2] = {sci, scj};\n";
    s += "    if (" + hi + " > " + lo + " && " + c1 + " > " + c0 + ") kiln_copy_nd(py + " + lo +
         " * N + " + c0 + ", dst_st, pc + " + lo + " * sci + " + c0 +
         " * scj, src_st, 2, fill_shape, sizeof(" + T + "));\n";
    s += "  }\n";
    return s;
  }
  s += "  for (int64_t i = " + lo + "; i < " + hi + "; ++i)\n";
  s += "    for (int64_t j = " + c0 + "; j < " + c1 + "; ++j) py[i * N + j] = (" + T + ")(" +
       c_literal(dt, beta_) + " * pc[i * sci + j * scj]);\n";
  return s;
}

std::string Gemm::c_code(const Node& node, const CodeNames& names, const Sub& sub) const {
  if (packed_n_ > 0) return c_code_packed(node, names, sub, "");
  const DType dt = node.inputs[0]->type.dtype;
  const std::string T(dtype_c_type(dt));
  const std::string& A = names.inputs[0];
  const std::string& B = names.inputs[1];
  const std::string& Y = names.outputs[0];
  const bool has_c = node.inputs.size() == 3 && beta_ != 0;
  std::string s = "{\n";
  s += "  const int64_t M = " + Y + "->shape[0], N = " + Y + "->shape[1];\n";
  s += "  const int64_t K = " + A + "->shape[" + (trans_a_ ? "0" : "1") + "];\n";
  // op(A)[i,k] = A[i,k] or A[k,i]: swap the element strides instead of copying.
  s += "  const int64_t rsa = " + A + "->strides[" + (trans_a_ ? "1" : "0") + "], csa = " + A +
       "->strides[" + (trans_a_ ? "0" : "1") + "];\n";
  s += "  const int64_t rsb = " + B + "->strides[" + (trans_b_ ? "1" : "0") + "], csb = " + B +
       "->strides[" + (trans_b_ ? "0" : "1") + "];\n";
  s += "  " + T + " *py = (" + T + " *)" + Y + "->data;\n";
  if (has_c) s += c_fill_bias(node, names, "0", "M");
  s += "  if (" + gemm_fn_name(dt) + "(ctx, M, N, K, " + c_literal(dt, alpha_) + ", (const " + T +
       " *)" + A + "->data, rsa, csa, (const " + T + " *)" + B + "->data, rsb, csb, (" + T + ")" +
       (has_c ? "1" : "0") + ", py, N) != 0) " + sub.fail + "(\"gemm failed\");\n";
  s += "}\n";
  return s;
}

// Packed B: kiln's kernel, on this part's rows of the output (and of A).
std::string Gemm::c_code_packed(const Node& node, const CodeNames& names, const Sub& sub,
                                const std::string& epilogue, const StoreClamp* clamp) const {
  const DType dt = node.inputs[0]->type.dtype;
  const std::string T(dtype_c_type(dt));
  // bfloat16 B (the bf16 pass): panels of 16 columns by pairs of k, as uint16 bits.
  const bool pairs = node.inputs[1]->type.dtype == DType::kBFloat16;
  const std::string S = pairs ? "bf16" : dt == DType::kFloat32 ? "f32" : "f64";
  const std::string TB = pairs ? "uint16_t" : T;
  const std::string& A = names.inputs[0];
  const std::string& B = names.inputs[1];
  const std::string& Y = names.outputs[0];
  const bool has_c = node.inputs.size() == 3 && beta_ != 0;
  const std::string ctx = sub.ctx;
  std::string s = "{\n";
  s += "  _Static_assert(KILN_GEMM_PANEL_BYTES == " + std::to_string(kGemmPanelBytes) +
       ", \"kiln packed these weights for another panel width\");\n";
  const int ra = node.inputs[0]->type.rank();
  const std::string last = std::to_string(ra - 1);
  s += "  const int64_t N = " + Y + "->shape[" + last + "];\n";
  // K: A's; P: columns per panel; PS: elements from one panel to the next; BR x BW: a
  // panel's rows and their elements.
  const std::string k_of_a = A + "->shape[" + (trans_a_ ? std::to_string(ra - 2) : last) + "]";
  s += "  const int64_t BR = " + B + "->shape[1], BW = " + B + "->shape[2], PS = BR * BW;\n";
  s += pairs ? "  const int64_t K = " + k_of_a + ", P = BW / 2;\n"
             : "  const int64_t K = BR, P = BW;\n";
  s += "  int64_t rsa = " + A + "->strides[" + (trans_a_ ? "1" : std::to_string(ra - 2)) +
       "], csa = " + A + "->strides[" + (trans_a_ ? "0" : last) + "];\n";
  s += "  const " + T + " *pa = (const " + T + " *)" + A + "->data;\n";
  if (ra == 2) {
    s += "  const int64_t M = " + Y + "->shape[0];\n";
  } else {
    // Rows of every leading index: one row stride when the leading dimensions collapse onto
    // the row dimension, else A is copied to a dense block first.
    s += "  int64_t M = 1, rows_ok = 1, expect = rsa;\n";
    s += "  for (int d = " + std::to_string(ra - 2) + "; d >= 0; --d) {\n";
    s += "    if (" + A + "->shape[d] != 1 && " + A + "->strides[d] != expect) rows_ok = 0;\n";
    s += "    expect *= " + A + "->shape[d];\n    M *= " + A + "->shape[d];\n  }\n";
    s += "  if (!rows_ok && M > 0) {\n";
    s += c_workspace(T, "dense", "M * K", "gemm's dense copy of A");
    s += "    kiln_copy_strided(dense, pa, " + std::to_string(ra) + ", " + A + "->shape, " + A +
         "->strides, sizeof(" + T + "));\n";
    s += "    pa = dense;\n    rsa = K;\n    csa = 1;\n  }\n";
  }
  s += "  const " + TB + " *pb = (const " + TB + " *)" + B + "->data;\n";
  // The kernel walks the panels as one dense block; any other layout is copied to one.
  s += "  if (" + B + "->strides[2] != 1 || (BR > 1 && " + B + "->strides[1] != BW) || (" + B +
       "->shape[0] > 1 && " + B + "->strides[0] != PS)) {\n";
  s += c_workspace(TB, "dense", B + "->shape[0] * PS", "gemm's packed B");
  s += "    kiln_copy_strided(dense, pb, 3, " + B + "->shape, " + B + "->strides, sizeof(" + TB +
       "));\n";
  s += "    pb = dense;\n  }\n";
  const SplitTiles tiles = *c_split_tiles(node, names, sub);
  s += "  int64_t lo, hi, c0, c1;\n";
  s += "  kiln_tile_part(M, N, " + tiles.row_unit + ", " + tiles.col_unit + ", " + ctx +
       "->part, " + ctx + "->n_parts, &lo, &hi, &c0, &c1);\n";
  s += "  " + T + " *py = (" + T + " *)" + Y + "->data;\n";
  // C at beta 1 is the kernel's bias, added as it stores; another beta scales a copy first.
  const bool c_in_kernel = has_c && beta_ == 1.0;
  if (c_in_kernel) s += c_fill_bias(node, names, "", "", "", "");
  const std::string lo_hi = clamp ? clamp->lo + ", " + clamp->hi
                                  : "-(" + T + ")__builtin_inf(), (" + T + ")__builtin_inf()";
  auto bias_args = [&](const std::string& r0, const std::string& c0) {
    return c_in_kernel ? "pc + " + r0 + " * sci + " + c0 + " * scj, sci, scj, " + lo_hi
                       : "0, 0, 0, " + lo_hi;
  };
  const std::string beta = has_c && !c_in_kernel ? "1" : "0";
  if (epilogue.empty()) {
    if (has_c && !c_in_kernel) s += c_fill_bias(node, names, "lo", "hi", "c0", "c1");
    s += "  if (lo < hi && c0 < c1)\n";
    s += "    kiln_gemm_packed_" + S + "(hi - lo, c1 - c0, K, " + c_literal(dt, alpha_) +
         ", (const " + T + " *)pa + lo * rsa, rsa, csa, pb + c0 / P * PS, (" + T + ")" + beta +
         ", py + lo * N + c0, N, " + bias_args("lo", "c0") + ");\n";
    s += "}\n";
    return s;
  }
  // With an epilogue: the tile in pieces of about 128 KB of output, each filled with the
  // bias, multiplied and run through the epilogue while it is in L2 (a transformer's
  // 197 x 384 tile went to L3 and back once per pass). A piece is whole column blocks of the
  // kernel, four panels each (with fewer, one vector per row left the FMA units waiting on
  // broadcasts: ConvNeXt's 3136 x 96 -> 384 layer ran at 135 GFLOP/s), and a tile of many rows is
  // cut into chunks of whole row blocks. Rows are outermost, so a chunk's rows of A stay in L2
  // while every piece of its columns passes; a row sums its terms alike in any chunk.
  s += "  const int64_t e_budget = 131072 / sizeof(" + T + ");\n";
  s += "  int64_t piece = e_budget / (hi - lo > 1 ? hi - lo : 1) / (4 * P) * (4 * P);\n";
  s += "  if (piece < 4 * P) piece = 4 * P;\n";
  s += "  int64_t chunk = hi - lo;\n";
  s += "  if (chunk * piece > e_budget) chunk = e_budget / piece / 6 * 6;\n";
  s += "  if (chunk < 6) chunk = 6;\n";
  s += "  for (int64_t e_r0 = lo; e_r0 < hi; e_r0 += chunk) {\n";
  s += "    const int64_t e_r1 = hi - e_r0 < chunk ? hi : e_r0 + chunk;\n";
  s += "    for (int64_t e_c0 = c0; e_c0 < c1; e_c0 += piece) {\n";
  s += "      const int64_t e_c1 = c1 - e_c0 < piece ? c1 : e_c0 + piece;\n";
  if (has_c && !c_in_kernel) s += c_fill_bias(node, names, "e_r0", "e_r1", "e_c0", "e_c1");
  s += "      kiln_gemm_packed_" + S + "(e_r1 - e_r0, e_c1 - e_c0, K, " + c_literal(dt, alpha_) +
       ", (const " + T + " *)pa + e_r0 * rsa, rsa, csa, pb + e_c0 / P * PS, (" + T + ")" + beta +
       ", py + e_r0 * N + e_c0, N, " + bias_args("e_r0", "e_c0") + ");\n";
  s += "      {\n        const int64_t e_n = 0;\n" + epilogue + "      }\n";
  s += "    }\n";
  s += "  }\n";
  s += "}\n";
  return s;
}

bool Gemm::c_inline_epilogue(const Node&) const { return packed_n_ > 0; }

bool Gemm::c_store_clamp(const Node& node) const {
  const DType dt = node.outputs[0]->type.dtype;
  return packed_n_ > 0 && (dt == DType::kFloat32 || dt == DType::kFloat64);
}

std::string Gemm::c_code_with_clamp(const Node& node, const CodeNames& names, const Sub& sub,
                                    const StoreClamp& clamp) const {
  if (!c_store_clamp(node)) throw InternalError("gemm: a store clamp on a gemm without one");
  return c_code_packed(node, names, sub, "", &clamp);
}

std::string Gemm::c_code_with_epilogue(const Node& node, const CodeNames& names, const Sub& sub,
                                       const std::string& epilogue) const {
  return c_code_packed(node, names, sub, epilogue);
}

int64_t Gemm::c_split_unit(const Node& node) const {
  if (packed_n_ == 0) return 0;
  const DType dt = node.outputs[0]->type.dtype;
  const int64_t pw = gemm_panel_width(dt), k = std::max<int64_t>(node.inputs[1]->type.dims[1], 1);
  const int64_t elements = (int64_t(1) << 18) / static_cast<int64_t>(dtype_size(dt));
  return pw * std::max<int64_t>(1, (elements + k * pw - 1) / (k * pw));
}

// Parts take tiles of whole panels by blocks of the kernel's rows: splitting columns first
// gives each part its own panels of B, which it streams once.
std::optional<SplitTiles> Gemm::c_split_tiles(const Node& node, const CodeNames& names,
                                              const Sub&) const {
  if (packed_n_ == 0) return std::nullopt;
  const auto& yt = node.outputs[0]->type;
  const std::string& Y = names.outputs[0];
  std::string rows;
  for (int d = 0; d + 1 < yt.rank(); ++d) {
    rows += (d ? " * " : "(") + Y + "->shape[" + std::to_string(d) + "]";
  }
  rows += ")";
  return SplitTiles{rows, Y + "->shape[" + std::to_string(yt.rank() - 1) + "]", "6",
                    std::to_string(gemm_panel_width(yt.dtype))};
}

// Packed weights (the pack pass) are a CPU layout: such a Gemm stays on the CPU.

}  // namespace kiln
