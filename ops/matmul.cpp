#include "ops/matmul.h"

#include <algorithm>

#include "ops/broadcast.h"
#include "ops/c/elementwise_loop.h"
#include "ops/c/gemm_pack.h"
#include "ops/c/gemm_support.h"
#include "ops/c/packed_gemm_code.h"
#include "ops/c/workspace.h"
#include "util/error.h"
#include "util/strings.h"

namespace kiln {
namespace {

struct Split {
  std::vector<int64_t> a_batch, b_batch;
  int64_t m, k_a, k_b, n;
};

Split split(const std::vector<int64_t>& a, const std::vector<int64_t>& b) {
  Split s;
  if (a.size() == 1) {
    s.m = 1;
    s.k_a = a[0];
  } else {
    s.a_batch.assign(a.begin(), a.end() - 2);
    s.m = a[a.size() - 2];
    s.k_a = a.back();
  }
  if (b.size() == 1) {
    s.k_b = b[0];
    s.n = 1;
  } else {
    s.b_batch.assign(b.begin(), b.end() - 2);
    s.k_b = b[b.size() - 2];
    s.n = b.back();
  }
  return s;
}

std::vector<int64_t> result_dims(const std::vector<int64_t>& batch, const std::vector<int64_t>& a,
                                 const std::vector<int64_t>& b, int64_t m, int64_t n) {
  std::vector<int64_t> out = batch;
  if (a.size() > 1) out.push_back(m);
  if (b.size() > 1) out.push_back(n);
  return out;
}

}  // namespace

void check_gemm_dtype(const std::string& op, DType a, DType b) {
  if (a != b) {
    throw UserError(op + ": dtype mismatch: " + std::string(dtype_name(a)) + " vs " +
                    std::string(dtype_name(b)));
  }
  if (a != DType::kFloat32 && a != DType::kFloat64 && a != DType::kInt32 && a != DType::kInt64) {
    throw UserError(op + ": " + std::string(dtype_name(a)) +
                    " is not supported (float32, float64, int32, int64)");
  }
}

MatMul::MatMul(Attrs props) : COp("matmul", std::move(props)) {
  check_known_attrs(this->props(), {"a_view", "b_view", "alpha", "out_perm"});
  views_[0] = OperandView::from_props(this->props(), "a_view");
  views_[1] = OperandView::from_props(this->props(), "b_view");
  alpha_ = attr_float(this->props(), "alpha", 1.0);
  out_perm_ = out_perm_from_props(this->props(), "out_perm");
}

std::vector<int64_t> MatMul::permuted(const std::vector<int64_t>& product) const {
  if (out_perm_.empty()) return product;
  if (out_perm_.size() != product.size()) {
    throw UserError("matmul: out_perm has " + std::to_string(out_perm_.size()) +
                    " axes, the product " + std::to_string(product.size()));
  }
  std::vector<int64_t> out;
  for (int64_t d : out_perm_) out.push_back(product[static_cast<size_t>(d)]);
  return out;
}

std::vector<TensorType> MatMul::operand_types(const std::vector<TensorType>& inputs) const {
  std::vector<TensorType> ops = inputs;
  for (size_t k = 0; k < 2 && k < ops.size(); ++k) {
    if (!views_[k]) continue;
    views_[k]->check_within(inputs[k], std::string("matmul: ") + (k == 0 ? "a_view" : "b_view"));
    ops[k].dims = views_[k]->dims;
  }
  return ops;
}

std::vector<Shape> MatMul::operand_shapes(const std::vector<Shape>& inputs) const {
  std::vector<Shape> ops = inputs;
  for (size_t k = 0; k < 2 && k < ops.size(); ++k) {
    if (views_[k]) ops[k] = views_[k]->dims;
  }
  return ops;
}

std::vector<TensorType> MatMul::infer_type(const std::vector<TensorType>& inputs) const {
  if (inputs.size() != 2) throw UserError("matmul takes 2 inputs");
  const auto operands = operand_types(inputs);
  const auto& a = operands[0];
  const auto& b = operands[1];
  check_gemm_dtype("matmul", a.dtype, b.dtype);
  if (alpha_ != 1.0 && !is_float(a.dtype)) throw UserError("matmul: alpha needs float operands");
  if (a.rank() < 1 || b.rank() < 1) throw UserError("matmul: operands must have rank >= 1");
  if (a.rank() > 16 || b.rank() > 16) throw UserError("matmul: rank > 16");
  Split s = split(a.dims, b.dims);
  if (s.k_a != kDynamic && s.k_b != kDynamic && s.k_a != s.k_b) {
    throw UserError("matmul: inner dimensions differ: " + a.to_string() + " @ " + b.to_string() +
                    " (" + std::to_string(s.k_a) + " vs " + std::to_string(s.k_b) + ")");
  }
  std::vector<int64_t> batch;
  try {
    batch = broadcast_dims({s.a_batch, s.b_batch});
  } catch (const UserError& e) {
    throw UserError(std::string("matmul: batch dimensions: ") + e.what());
  }
  if (!out_perm_.empty() && (a.rank() < 2 || b.rank() < 2)) {
    throw UserError("matmul: out_perm needs operands of rank 2 or more");
  }
  return {TensorType{a.dtype, permuted(result_dims(batch, a.dims, b.dims, s.m, s.n))}};
}

double MatMul::flops(const std::vector<Shape>& inputs, const std::vector<Shape>& outputs) const {
  // K is A's last dimension (a 1-D A is one row of K).
  return 2.0 * static_cast<double>(operand_shapes(inputs).at(0).back()) *
         static_cast<double>(shape_numel(outputs.at(0)));
}

std::vector<Shape> MatMul::infer_shape(const std::vector<Shape>& given) const {
  const auto inputs = operand_shapes(given);
  Split s = split(inputs[0], inputs[1]);
  if (s.k_a != s.k_b) {
    throw UserError("matmul: inner dimensions differ: " + dims_to_string(inputs[0]) + " @ " +
                    dims_to_string(inputs[1]));
  }
  Shape batch = broadcast_shapes({s.a_batch, s.b_batch});
  return {permuted(result_dims(batch, inputs[0], inputs[1], s.m, s.n))};
}

void MatMul::perform(const std::vector<Tensor>& inputs, std::vector<Tensor>& outputs) const {
  const Tensor a = views_[0] ? views_[0]->of(inputs[0]) : inputs[0];
  const Tensor b = views_[1] ? views_[1]->of(inputs[1]) : inputs[1];
  // With out_perm the product is computed in its own order and stored through the
  // permutation's view of the output.
  Tensor product;
  if (!out_perm_.empty()) {
    std::vector<int> inverse(out_perm_.size());
    for (size_t i = 0; i < out_perm_.size(); ++i)
      inverse[static_cast<size_t>(out_perm_[i])] = static_cast<int>(i);
    product = outputs[0].permute(inverse);
  }
  Tensor& out = out_perm_.empty() ? outputs[0] : product;
  Split s = split(a.shape(), b.shape());
  Shape batch = broadcast_shapes({s.a_batch, s.b_batch});
  const int64_t nb = shape_numel(batch);
  const bool ints = is_integer(a.dtype());
  for (int64_t bi = 0; bi < nb; ++bi) {
    int64_t ab = broadcast_source_index(bi, batch, s.a_batch);
    int64_t bb = broadcast_source_index(bi, batch, s.b_batch);
    for (int64_t i = 0; i < s.m; ++i) {
      for (int64_t j = 0; j < s.n; ++j) {
        double acc = 0;
        int64_t acci = 0;
        for (int64_t k = 0; k < s.k_a; ++k) {
          int64_t ia = (ab * s.m + i) * s.k_a + k;
          int64_t ib = (bb * s.k_b + k) * s.n + j;
          if (ints) {
            acci += a.load_int(ia) * b.load_int(ib);
          } else {
            acc += a.load(ia) * b.load(ib);
          }
        }
        int64_t o = (bi * s.m + i) * s.n + j;
        if (ints) {
          out.store_int(o, acci);
        } else {
          out.store(o, alpha_ * acc);
        }
      }
    }
  }
}

std::string MatMul::c_support_code_apply(const Node& node, const std::string&) const {
  const DType dt = node.inputs[0]->type.dtype;
  if (!packs_b(node)) return gemm_support_code(dt);
  const std::string s = dt == DType::kFloat32 ? "f32" : "f64";
  return "#define kiln_gemm_packed_" + s + " (KILN_SUPPORT->gemm_packed_" + s + ")\n";
}

// Batched floating-point products run on kiln's packed kernel, split by whole matrices
// across the engine's workers; the others go to BLAS.
bool MatMul::packs_b(const Node& node) const {
  const DType dt = node.inputs[0]->type.dtype;
  return (dt == DType::kFloat32 || dt == DType::kFloat64) && c_split_unit(node) > 0;
}

// One floating-point matrix by another (a training step's weight gradients, X^T dY) also
// runs on kiln's kernel, its parts taking tiles of whole panels as a packed gemm's do, each
// packing its own columns of B: OpenBLAS, called from one engine thread, ran its own threads
// beside the engine's (105 GFLOP/s where the split kernel runs 240).
bool MatMul::tiles_2d(const Node& node) const {
  const DType dt = node.inputs[0]->type.dtype;
  return (dt == DType::kFloat32 || dt == DType::kFloat64) && operand_rank(node, 0) == 2 &&
         operand_rank(node, 1) == 2 && node.outputs[0]->type.rank() == 2 && out_perm_.empty();
}

std::optional<SplitTiles> MatMul::c_split_tiles(const Node& node, const CodeNames& names,
                                                const Sub&) const {
  if (!tiles_2d(node)) return std::nullopt;
  const std::string& C = names.outputs[0];
  return SplitTiles{C + "->shape[0]", C + "->shape[1]", "6",
                    std::to_string(gemm_panel_width(node.outputs[0]->type.dtype))};
}

// Batched products split into runs of whole matrices: one matrix of the output is the unit.
// A 2-D product's unit (tiles_2d) only caps its parts: about 256 KB of B's panels each.
int64_t MatMul::c_split_unit(const Node& node) const {
  const auto& out = node.outputs[0]->type;
  if (tiles_2d(node)) {
    const DType dt = out.dtype;
    const auto at = operand_types({node.inputs[0]->type, node.inputs[1]->type})[0];
    const int64_t pw = gemm_panel_width(dt), k = std::max<int64_t>(at.dims[1], 1);
    const int64_t elements = (int64_t(1) << 18) / static_cast<int64_t>(dtype_size(dt));
    return pw * std::max<int64_t>(1, (elements + k * pw - 1) / (k * pw));
  }
  const int nb =
      out.rank() - (operand_rank(node, 0) > 1 ? 1 : 0) - (operand_rank(node, 1) > 1 ? 1 : 0);
  if (nb <= 0) return 0;
  int64_t unit = 1;
  for (int d = nb; d < out.rank(); ++d) {
    if (out.dims[static_cast<size_t>(d)] == kDynamic) return 0;
    unit *= out.dims[static_cast<size_t>(d)];
  }
  return unit;
}

bool MatMul::c_splittable(const Node& node) const { return c_split_unit(node) > 0; }

std::string MatMul::c_code(const Node& node, const CodeNames& names, const Sub& sub) const {
  const auto types = operand_types({node.inputs[0]->type, node.inputs[1]->type});
  const auto& at = types[0];
  const auto& bt = types[1];
  const int ra = at.rank(), rb = bt.rank();
  const int ro = node.outputs[0]->type.rank();
  const int nb = ro - (ra > 1 ? 1 : 0) - (rb > 1 ? 1 : 0);  // batch rank of the output
  const std::string T(dtype_c_type(at.dtype));
  const std::string& A = names.inputs[0];
  const std::string& B = names.inputs[1];
  const std::string& C = names.outputs[0];
  auto i2s = [](int v) { return std::to_string(v); };
  // An operand's sizes and strides: the input's own, or its view's (compile-time values
  // over the input's contiguous elements).
  const std::string X[2] = {A, B};
  auto dim = [&](int k, int d) { return c_operand_dim(views_[k], X[k], d); };
  auto stride = [&](int k, int d) { return c_operand_stride(views_[k], X[k], d); };
  std::string s = "{\n";
  for (int k = 0; k < 2; ++k) {
    if (views_[k])
      s += c_view_contiguity_checks("matmul", X[k], node.inputs[static_cast<size_t>(k)]->type.dims,
                                    sub.fail);
  }
  auto base = [&](int k) {
    std::string p = "(const " + T + " *)" + X[k] + "->data";
    return views_[k] && views_[k]->offset ? p + " + " + std::to_string(views_[k]->offset) : p;
  };
  s += "  const " + T + " *pa = " + base(0) + ";\n";
  s += "  const " + T + " *pb = " + base(1) + ";\n";
  s += "  " + T + " *pc = (" + T + " *)" + C + "->data;\n";
  if (ra == 1) {
    s += "  const int64_t M = 1, K = " + dim(0, 0) + ", rsa = 0, csa = " + stride(0, 0) + ";\n";
  } else {
    s += "  const int64_t M = " + dim(0, ra - 2) + ", K = " + dim(0, ra - 1) + ";\n";
    s += "  const int64_t rsa = " + stride(0, ra - 2) + ", csa = " + stride(0, ra - 1) + ";\n";
  }
  if (rb == 1) {
    s += "  const int64_t N = 1, rsb = " + stride(1, 0) + ", csb = 0;\n";
  } else {
    s += "  const int64_t N = " + dim(1, rb - 1) + ";\n";
    s += "  const int64_t rsb = " + stride(1, rb - 2) + ", csb = " + stride(1, rb - 1) + ";\n";
  }
  const bool perm = !out_perm_.empty();
  // The output axis holding product axis d: d itself, or where out_perm put it. C's matrices
  // then sit at its strides (the default: one after another, rows of N).
  std::vector<int> at_axis(static_cast<size_t>(ro));
  for (int d = 0; d < ro; ++d) at_axis[static_cast<size_t>(d)] = d;
  for (size_t i = 0; i < out_perm_.size(); ++i) {
    at_axis[static_cast<size_t>(out_perm_[i])] = static_cast<int>(i);
  }
  const std::string ldc =
      out_perm_.empty() ? "N" : C + "->strides[" + i2s(at_axis[static_cast<size_t>(ro - 2)]) + "]";
  // One product: A at offset `oa`, B at `ob`, C at `c`.
  const bool packed = packs_b(node);
  const std::string S = at.dtype == DType::kFloat32 ? "f32" : "f64";
  auto product = [&](const std::string& oa, const std::string& ob, const std::string& c) {
    if (packed) {
      return "kiln_gemm_packed_" + S + "(M, N, K, " + c_literal(at.dtype, alpha_) + ", pa" + oa +
             ", rsa, csa, bp, (" + T + ")0, " + c + ", " + ldc + ", 0, 0, 0, -(" + T +
             ")__builtin_inf(), (" + T + ")__builtin_inf());\n";
    }
    return "if (" + gemm_fn_name(at.dtype) + "(ctx, M, N, K, " +
           (is_float(at.dtype) ? c_literal(at.dtype, alpha_) : "(" + T + ")1") + ", pa" + oa +
           ", rsa, csa, pb" + ob + ", rsb, csb, (" + T + ")0, " + c + ", " + ldc + ") != 0) " +
           sub.fail + "(\"matmul failed\");\n";
  };
  if (packed) {
    // Each matrix of B copied into the panels of kiln's GEMM kernel (any strides, so a
    // transposed view costs nothing more), in this part's thread: BLAS would start threads
    // of its own beside the engine's.
    s += "  const int64_t P = KILN_GEMM_PANEL_BYTES / (int64_t)sizeof(" + T +
         "), np = (N + P - 1) / P;\n";
    s += c_workspace(T, "bp", "np * K * P", "matmul's packed B");
  }
  if (nb == 0 && packed) {  // one matrix, this part's tile (tiles_2d)
    s += "  int64_t lo, hi, c0, c1;\n";
    s += "  kiln_tile_part(M, N, 6, P, " + sub.ctx + "->part, " + sub.ctx +
         "->n_parts, &lo, &hi, &c0, &c1);\n";
    s += "  if (lo < hi && c0 < c1) {\n";
    s += c_pack_b_panels(T, "bp", "(pb + c0 * csb)", "K", "(c1 - c0)", "rsb", "csb", "    ");
    s += "    kiln_gemm_packed_" + S + "(hi - lo, c1 - c0, K, " + c_literal(at.dtype, alpha_) +
         ", pa + lo * rsa, rsa, csa, bp, (" + T + ")0, pc + lo * " + ldc + " + c0, " + ldc +
         ", 0, 0, 0, -(" + T + ")__builtin_inf(), (" + T + ")__builtin_inf());\n";
    s += "  }\n";
    return s + "}\n";
  }
  if (nb == 0) return s + product("", "", "pc") + "}\n";  // BLAS
  // Batch loop over the output's leading dimensions; a broadcast batch dimension of an
  // operand has stride 0.
  const std::string NB = i2s(nb);
  s += "  int64_t bshape[" + NB + "], bsa[" + NB + "], bsb[" + NB + "];\n";
  if (perm) s += "  int64_t bsc[" + NB + "], oc = 0;\n";
  s += "  int64_t nbatch = 1;\n";
  const int a_nb = ra > 1 ? ra - 2 : 0, b_nb = rb > 1 ? rb - 2 : 0;
  for (int d = 0; d < nb; ++d) {
    std::string ds = i2s(d);
    int ea = d - (nb - a_nb), eb = d - (nb - b_nb);
    s += "  bshape[" + ds + "] = " + C + "->shape[" + i2s(at_axis[static_cast<size_t>(d)]) + "];\n";
    if (perm) {
      s +=
          "  bsc[" + ds + "] = " + C + "->strides[" + i2s(at_axis[static_cast<size_t>(d)]) + "];\n";
    }
    s += "  bsa[" + ds + "] = " +
         (ea < 0 ? std::string("0") : "(" + dim(0, ea) + " == 1 ? 0 : " + stride(0, ea) + ")") +
         ";\n";
    s += "  bsb[" + ds + "] = " +
         (eb < 0 ? std::string("0") : "(" + dim(1, eb) + " == 1 ? 0 : " + stride(1, eb) + ")") +
         ";\n";
    s += "  nbatch *= bshape[" + ds + "];\n";
  }
  s += "  int64_t bidx[" + NB + "] = {0};\n";
  s += "  int64_t oa = 0, ob = 0, lo = 0, hi = nbatch;\n";
  // A split call's part takes a run of whole matrices (c_split_unit), starting from the
  // operands' offsets of its first one.
  s += "  if (" + sub.ctx + "->n_parts > 1) {\n";
  s += "    kiln_part_range(nbatch, " + sub.ctx + "->part, " + sub.ctx +
       "->n_parts, 1, &lo, &hi);\n";
  s += "    for (int64_t d = " + i2s(nb - 1) + ", rem = lo; d >= 0; --d) {\n";
  s += "      bidx[d] = rem % bshape[d];\n";
  s += "      rem /= bshape[d];\n";
  s += "      oa += bidx[d] * bsa[d];\n";
  s += "      ob += bidx[d] * bsb[d];\n";
  if (perm) s += "      oc += bidx[d] * bsc[d];\n";
  s += "    }\n";
  s += "  }\n";
  if (packed) s += "  int64_t packed_ob = -1;\n";
  s += "  for (int64_t bi = lo; bi < hi; ++bi) {\n";
  if (packed) {
    // A broadcast B (batch stride 0) is packed once, not once per matrix of A.
    s += "    if (ob != packed_ob) {\n";
    s += c_pack_b_panels(T, "bp", "(pb + ob)", "K", "N", "rsb", "csb", "");
    s += "    }\n";
    s += "    packed_ob = ob;\n";
  }
  s += product(" + oa", " + ob", perm ? "pc + oc" : "pc + bi * M * N");
  s += "    for (int d = " + i2s(nb - 1) + "; d >= 0; --d) {\n";
  s += "      oa += bsa[d];\n";
  s += "      ob += bsb[d];\n";
  if (perm) s += "      oc += bsc[d];\n";
  s += "      if (++bidx[d] < bshape[d]) break;\n";
  s += "      oa -= bsa[d] * bshape[d];\n";
  s += "      ob -= bsb[d] * bshape[d];\n";
  if (perm) s += "      oc -= bsc[d] * bshape[d];\n";
  s += "      bidx[d] = 0;\n";
  s += "    }\n";
  s += "  }\n";
  s += "}\n";
  return s;
}

// Any ranks: 1-D operands as a row or a column, batch dimensions broadcast.
// Not with operand views or a scale: the CUDA GEMM reads its operands whole (the views pass
// makes them for CPU graphs; a CUDA graph keeps them on the CPU).

}  // namespace kiln
