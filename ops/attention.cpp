#include "ops/attention.h"

#include "ops/c/elementwise_loop.h"
#include "ops/c/packed_gemm_code.h"
#include "ops/c/workspace.h"
#include "ops/matmul.h"
#include "ops/softmax.h"
#include "util/error.h"
#include "util/strings.h"

namespace kiln {
namespace {

const char* const kViewNames[3] = {"q_view", "k_view", "v_view"};

}  // namespace

Attention::Attention(Attrs props) : COp("attention", std::move(props)) {
  check_known_attrs(this->props(), {"q_view", "k_view", "v_view", "alpha", "out_perm", "mask_fill",
                                    "mask_keeps", "safe"});
  for (int k = 0; k < 3; ++k) views_[k] = OperandView::from_props(this->props(), kViewNames[k]);
  alpha_ = attr_float(this->props(), "alpha", 1.0);
  out_perm_ = out_perm_from_props(this->props(), "out_perm");
  mask_fill_ = attr_float(this->props(), "mask_fill", 0.0);
  const int64_t keeps = attr_int(this->props(), "mask_keeps", 0);
  if (keeps != 0 && keeps != 1) throw AttrError("mask_keeps", "must be 0 or 1");
  mask_keeps_ = keeps == 1;
  const int64_t safe = attr_int(this->props(), "safe", 0);
  if (safe != 0 && safe != 1) throw AttrError("safe", "must be 0 or 1");
  safe_ = safe == 1;
}

std::vector<std::vector<int64_t>> Attention::operand_dims(const std::vector<Shape>& inputs) const {
  std::vector<std::vector<int64_t>> dims(3);
  for (size_t k = 0; k < 3; ++k) dims[k] = views_[k] ? views_[k]->dims : inputs[k];
  return dims;
}

std::vector<TensorType> Attention::infer_type(const std::vector<TensorType>& inputs) const {
  if (inputs.size() != 3 && inputs.size() != 4) {
    throw UserError("attention takes 3 inputs (q, k, v) or 4 (q, k, v, mask)");
  }
  std::vector<Shape> given;
  for (size_t k = 0; k < 3; ++k) {
    if (inputs[k].dtype != DType::kFloat32) {
      throw UserError(std::string("attention: ") + "qkv"[k] + " is " +
                      std::string(dtype_name(inputs[k].dtype)) + ", not float32");
    }
    if (views_[k]) views_[k]->check_within(inputs[k], std::string("attention: ") + kViewNames[k]);
    given.push_back(inputs[k].dims);
  }
  if (inputs.size() == 4 && inputs[3].dtype != DType::kBool) {
    throw UserError("attention: the mask must be bool, got " + inputs[3].to_string());
  }
  check_operands(operand_dims(given), inputs.size() == 4 ? &inputs[3].dims : nullptr);
  return {TensorType{DType::kFloat32, infer_shape(given)[0]}};
}

void Attention::check_operands(const std::vector<std::vector<int64_t>>& ops,
                               const Shape* mask) const {
  const size_t r = ops[0].size();
  if (r < 2 || ops[1].size() != r || ops[2].size() != r) {
    throw UserError("attention: q, k and v need one rank of 2 or more, got " +
                    dims_to_string(ops[0]) + ", " + dims_to_string(ops[1]) + ", " +
                    dims_to_string(ops[2]));
  }
  auto differ = [](int64_t a, int64_t b) { return a != b && a != kDynamic && b != kDynamic; };
  for (size_t d = 0; d + 2 < r; ++d) {
    if (differ(ops[1][d], ops[0][d]) || differ(ops[2][d], ops[0][d])) {
      throw UserError("attention: batch dimensions differ: q " + dims_to_string(ops[0]) + ", k " +
                      dims_to_string(ops[1]) + ", v " + dims_to_string(ops[2]));
    }
  }
  if (differ(ops[0][r - 1], ops[1][r - 2]) || differ(ops[1][r - 1], ops[2][r - 2])) {
    throw UserError("attention: inner dimensions differ: q " + dims_to_string(ops[0]) + " @ k " +
                    dims_to_string(ops[1]) + " @ v " + dims_to_string(ops[2]));
  }
  if (mask) {
    const std::vector<int64_t> mn{ops[0][r - 2], ops[1][r - 1]};
    if (mask->size() != 2 || differ((*mask)[0], mn[0]) || differ((*mask)[1], mn[1])) {
      throw UserError("attention: the mask must be bool " + dims_to_string(mn) + ", got " +
                      dims_to_string(*mask));
    }
  }
  if (!out_perm_.empty() && out_perm_.size() != r) {
    throw UserError("attention: out_perm has " + std::to_string(out_perm_.size()) +
                    " axes, the output " + std::to_string(r));
  }
}

std::vector<Shape> Attention::infer_shape(const std::vector<Shape>& inputs) const {
  const auto ops = operand_dims(inputs);
  check_operands(ops, inputs.size() == 4 ? &inputs[3] : nullptr);
  const size_t r = ops[0].size();
  Shape product(ops[0].begin(), ops[0].end() - 1);
  product.push_back(ops[2][r - 1]);
  if (out_perm_.empty()) return {product};
  Shape out;
  for (int64_t d : out_perm_) out.push_back(product[static_cast<size_t>(d)]);
  return {out};
}

double Attention::flops(const std::vector<Shape>& inputs, const std::vector<Shape>& outputs) const {
  const auto ops = operand_dims(inputs);
  const size_t r = ops[0].size();
  const double d = static_cast<double>(ops[0][r - 1]), n = static_cast<double>(ops[1][r - 1]);
  // Per output element: its row's N scores over D (shared by the row's Dv elements), then
  // N multiply-adds of the weighted sum.
  const double out = static_cast<double>(shape_numel(outputs.at(0)));
  const double dv = static_cast<double>(ops[2][r - 1]);
  return 2.0 * out * n + (dv > 0 ? 2.0 * out / dv * n * d : 0.0);
}

void Attention::perform(const std::vector<Tensor>& inputs, std::vector<Tensor>& outputs) const {
  Attrs scores_props{{"alpha", alpha_}};
  if (views_[0]) scores_props["a_view"] = views_[0]->encode();
  if (views_[1]) scores_props["b_view"] = views_[1]->encode();
  const MatMul scores_op(scores_props);
  Tensor scores = Tensor::empty(DType::kFloat32,
                                scores_op.infer_shape({inputs[0].shape(), inputs[1].shape()})[0]);
  std::vector<Tensor> s{scores};
  scores_op.perform({inputs[0], inputs[1]}, s);
  if (inputs.size() == 4) {
    const Tensor& mask = inputs[3];
    const int64_t mn = mask.numel();
    for (int64_t i = 0; i < scores.numel(); ++i) {
      if ((mask.load(i % mn) != 0) != mask_keeps_) scores.store(i, mask_fill_);
    }
  }
  Tensor weights = Tensor::empty(DType::kFloat32, scores.shape());
  std::vector<Tensor> w{weights};
  Softmax(false, Attrs{{"axis", int64_t{-1}}, {"safe", int64_t{safe_ ? 1 : 0}}})
      .perform({scores}, w);
  Attrs out_props;
  if (views_[2]) out_props["b_view"] = views_[2]->encode();
  if (!out_perm_.empty()) out_props["out_perm"] = out_perm_;
  MatMul(out_props).perform({weights, inputs[2]}, outputs);
}

int64_t Attention::c_split_unit(const Node& node) const {
  std::vector<Shape> given;
  for (const auto* in : node.inputs) given.push_back(in->type.dims);
  const auto ops = operand_dims(given);
  const size_t r = ops[0].size();
  if (r < 3 || ops[0][r - 2] < 0 || ops[2][r - 1] < 0) return 0;
  return ops[0][r - 2] * ops[2][r - 1];
}

std::string Attention::c_support_code_apply(const Node&, const std::string&) const {
  return "#define kiln_gemm_packed_f32 (KILN_SUPPORT->gemm_packed_f32)\n";
}

std::string Attention::c_code(const Node& node, const CodeNames& names, const Sub& sub) const {
  const int r = node.outputs[0]->type.rank();
  const int nb = r - 2;
  const std::string& C = names.outputs[0];
  auto i2s = [](int v) { return std::to_string(v); };
  const std::string* X = names.inputs.data();
  auto dim = [&](int k, int d) { return c_operand_dim(views_[k], X[k], d); };
  auto stride = [&](int k, int d) { return c_operand_stride(views_[k], X[k], d); };
  std::string s = "{\n";
  for (int k = 0; k < 3; ++k) {
    if (views_[k])
      s += c_view_contiguity_checks("attention", X[k],
                                    node.inputs[static_cast<size_t>(k)]->type.dims, sub.fail);
  }
  for (int k = 0; k < 3; ++k) {
    std::string p = "(const float *)" + X[k] + "->data";
    if (views_[k] && views_[k]->offset) p += " + " + std::to_string(views_[k]->offset);
    s += "  const float *p" + std::string(1, "qkv"[k]) + " = " + p + ";\n";
  }
  s += "  float *pc = (float *)" + C + "->data;\n";
  const bool masked = node.inputs.size() == 4;
  if (masked) {
    s += "  const uint8_t *pm = (const uint8_t *)" + X[3] + "->data;\n";
    s += "  const int64_t rsm = " + X[3] + "->strides[0], csm = " + X[3] + "->strides[1];\n";
  }
  s += "  const int64_t M = " + dim(0, r - 2) + ", D = " + dim(0, r - 1) +
       ", N = " + dim(1, r - 1) + ", DV = " + dim(2, r - 1) + ";\n";
  s += "  const int64_t rsq = " + stride(0, r - 2) + ", csq = " + stride(0, r - 1) + ";\n";
  s += "  const int64_t rsk = " + stride(1, r - 2) + ", csk = " + stride(1, r - 1) + ";\n";
  s += "  const int64_t rsv = " + stride(2, r - 2) + ", csv = " + stride(2, r - 1) + ";\n";
  // The output axis holding product axis d (out_perm's inverse); the output is contiguous,
  // so its strides place every matrix and row.
  std::vector<int> at_axis(static_cast<size_t>(r));
  for (int d = 0; d < r; ++d) at_axis[static_cast<size_t>(d)] = d;
  for (size_t i = 0; i < out_perm_.size(); ++i) {
    at_axis[static_cast<size_t>(out_perm_[i])] = static_cast<int>(i);
  }
  s += "  const int64_t ldc = " + C + "->strides[" + i2s(at_axis[static_cast<size_t>(r - 2)]) +
       "];\n";
  s += "  int64_t bshape[KILN_MAX_DIMS + 1], bs[4][KILN_MAX_DIMS + 1], off[4] = {0, 0, 0, 0};\n";
  s += "  int64_t nbatch = 1;\n";
  for (int d = 0; d < nb; ++d) {
    const std::string ds = i2s(d);
    s += "  bshape[" + ds + "] = " + C + "->shape[" + i2s(at_axis[static_cast<size_t>(d)]) + "];\n";
    for (int k = 0; k < 3; ++k) s += "  bs[" + i2s(k) + "][" + ds + "] = " + stride(k, d) + ";\n";
    s +=
        "  bs[3][" + ds + "] = " + C + "->strides[" + i2s(at_axis[static_cast<size_t>(d)]) + "];\n";
    s += "  nbatch *= bshape[" + ds + "];\n";
  }
  // A block of rows' scores (RB x N) is written, normalized and read back while it is in
  // L2. Blocks of near-equal rows, a multiple of the kernel's 6, scores of at most 128 KB: a
  // short last block (128 rows as 126 + 2) runs the kernel's narrow row forms.
  s += "  const int64_t P = KILN_GEMM_PANEL_BYTES / (int64_t)sizeof(float);\n";
  s += "  const int64_t kpack_n = (N + P - 1) / P * D * P, vp_n = (DV + P - 1) / P * N * P;\n";
  s += "  int64_t RB = 32768 / (N > 0 ? N : 1) / 6 * 6;\n";
  s += "  if (RB < 6) RB = 6;\n";
  s += "  if (M > 0) {\n";
  s += "    const int64_t blocks = (M + RB - 1) / RB;\n";
  s += "    RB = ((M + blocks - 1) / blocks + 5) / 6 * 6;\n";
  s += "  }\n";
  s += "  if (RB > M) RB = M;\n";
  // The parts share the (matrix, row block) pairs: split by matrices alone, DeiT-tiny's three
  // heads went two to one thread and one to the other. A part packs the K and V of each matrix
  // it meets (twice in all for a matrix two parts share); a row's result is the same in any.
  s += "  const int64_t nblocks = RB > 0 ? (M + RB - 1) / RB : 0;\n";
  s += "  int64_t lo = 0, hi = nbatch * nblocks;\n";
  s += "  kiln_part_range(nbatch * nblocks, " + sub.ctx + "->part, " + sub.ctx +
       "->n_parts, 1, &lo, &hi);\n";
  s += c_workspace("float", "kpack", "kpack_n + vp_n + RB * N", "attention's packed K and V");
  s += "  float *vp = kpack + kpack_n, *sc = vp + vp_n;\n";
  s += "  for (int64_t u = lo, cur = -1; u < hi; ++u) {\n";
  s += "    const int64_t bi = u / nblocks, r0 = u % nblocks * RB;\n";
  s += "    if (bi != cur) {\n";
  s += "      cur = bi;\n";
  s += "      for (int k = 0; k < 4; ++k) off[k] = 0;\n";
  s += "      for (int64_t d = " + i2s(nb - 1) + ", rem = bi; d >= 0; --d) {\n";
  s += "        const int64_t at = rem % bshape[d];\n";
  s += "        rem /= bshape[d];\n";
  s += "        for (int k = 0; k < 4; ++k) off[k] += at * bs[k][d];\n";
  s += "      }\n";
  s += c_pack_b_panels("float", "kpack", "(pk + off[1])", "D", "N", "rsk", "csk", "      ");
  s += c_pack_b_panels("float", "vp", "(pv + off[2])", "N", "DV", "rsv", "csv", "      ");
  s += "    }\n";
  s += "    {\n";
  s += "      const int64_t rows = M - r0 < RB ? M - r0 : RB;\n";
  s += "      kiln_gemm_packed_f32(rows, N, D, " + c_literal(DType::kFloat32, alpha_) +
       ", pq + off[0] + r0 * rsq, rsq, csq, kpack, 0.0f, sc, N, 0, 0, 0, -__builtin_inff(), "
       "__builtin_inff());\n";
  if (node.inputs.size() == 4) {  // the mask, shared by every matrix; rows vectorize as selects
    const std::string keep = mask_keeps_ ? "1" : "0";
    const std::string fill = c_literal(DType::kFloat32, mask_fill_);
    s += "      for (int64_t i = 0; i < rows; ++i) {\n";
    s += "        const uint8_t *mr = pm + (r0 + i) * rsm;\n";
    s += "        float *restrict sr = sc + i * N;\n";
    s += "        if (csm == 1)\n";
    s += "          for (int64_t j = 0; j < N; ++j) sr[j] = (mr[j] != 0) != " + keep + " ? " +
         fill + " : sr[j];\n";
    s += "        else\n";
    s += "          for (int64_t j = 0; j < N; ++j) sr[j] = (mr[j * csm] != 0) != " + keep + " ? " +
         fill + " : sr[j];\n";
    s += "      }\n";
  }
  s += std::string("      for (int64_t i = 0; i < rows; ++i) ") +
       (safe_ ? "kiln_softmax_row_safe_f32" : "kiln_softmax_row_f32") +
       "(sc + i * N, sc + i * N, N);\n";
  s += "      kiln_gemm_packed_f32(rows, DV, N, 1.0f, sc, N, 1, vp, 0.0f, pc + off[3] + r0 * ldc, "
       "ldc, 0, 0, 0, -__builtin_inff(), __builtin_inff());\n";
  s += "    }\n";
  s += "  }\n";
  s += "}\n";
  return s;
}

}  // namespace kiln
