#include "ops/c/reduce_loop.h"

#include "ctemplate/template.h"
#include "util/strings.h"

namespace kiln {

std::string identity_of(ReduceKind kind, DType dt) {
  const bool fl = is_float(dt);
  switch (kind) {
    case ReduceKind::kSum:
    case ReduceKind::kMean:
      return "0";
    case ReduceKind::kProd:
      return "1";
    case ReduceKind::kMax:
      if (fl) return "-INFINITY";
      if (dt == DType::kUInt8) return "0";
      return dt == DType::kInt8 ? "INT8_MIN" : dt == DType::kInt32 ? "INT32_MIN" : "INT64_MIN";
    case ReduceKind::kMin:
      if (fl) return "INFINITY";
      if (dt == DType::kUInt8) return "UINT8_MAX";
      return dt == DType::kInt8 ? "INT8_MAX" : dt == DType::kInt32 ? "INT32_MAX" : "INT64_MAX";
  }
  return "0";
}

// The accumulator `a` combined with value `x`; max and min propagate NaN, as NumPy does.
std::string combine(ReduceKind kind, DType dt, const std::string& a, const std::string& x) {
  const bool fl = is_float(dt);
  switch (kind) {
    case ReduceKind::kSum:
    case ReduceKind::kMean:
      return a + " + " + x;
    case ReduceKind::kProd:
      return a + " * " + x;
    case ReduceKind::kMax:
      return fl ? "((" + x + " > " + a + " || " + x + " != " + x + ") ? " + x + " : " + a + ")"
                : "(" + x + " > " + a + " ? " + x + " : " + a + ")";
    case ReduceKind::kMin:
      return fl ? "((" + x + " < " + a + " || " + x + " != " + x + ") ? " + x + " : " + a + ")"
                : "(" + x + " < " + a + " ? " + x + " : " + a + ")";
  }
  return a;
}

namespace {

// One reduction's loop, piece by piece. Operand 0 is the output; operand slot[k] is input k.
// Literals and single elements are hoisted and take no slot.
class ReduceEmitter {
 public:
  ReduceEmitter(const ReduceLoop& spec, const std::vector<LoopOperand>& inputs,
                const std::string& expr, const std::vector<std::string>& lets,
                const std::string& out, const std::string& ctx)
      : spec_(spec), inputs_(inputs), expr_(expr), lets_(lets), out_(out), ctx_(ctx),
        rank_(static_cast<int>(spec.mask.size())), T_(dtype_c_type(spec.dtype)),
        identity_("(" + T_ + ")" + identity_of(spec.kind, spec.dtype)),
        comb_(combine(spec.kind, spec.dtype, "a", "x")), slot_(inputs.size(), -1) {
    for (size_t k = 0; k < inputs.size(); ++k) {
      if (!inputs[k].literal && !inputs[k].single) slot_[k] = nops_++;
    }
    // "every input's inner stride is 1", as a C condition ("1" with no input to test), and
    // the same with the output's.
    std::vector<std::string> unit_conds;
    for (int k = 1; k < nops_; ++k) unit_conds.push_back("s" + std::to_string(k) + " == 1");
    unit_inputs_ = unit_conds.empty() ? "1" : join(unit_conds, " && ");
    unit_conds.insert(unit_conds.begin(), "s0 == 1");
    all_unit_ = join(unit_conds, " && ");
  }

  std::string code() const {
    std::string s = "{\n" + iteration_space();
    s += "if (n_in == 0 || n_out == 0) {\n";
    s += "if (" + ctx_ + "->part == 0) oe = n_out;\n";
    s += "for (int64_t i = ob; i < oe; ++i) p0[i] = " + identity_ + ";\n";
    s += "} else {\n";
    s += strides_and_part();
    s += "for (int64_t it = 0; it < outer; ++it) {\n";
    s += "if (s0 == 0) {\n" + into_one();
    s += "} else if (" + all_unit_ +
         " && inner == 8 && r >= 2 && st[0][r - 2] == 0 && idx[r - 2] == 0) {\n" + rows_of_eight();
    s += "} else if (" + all_unit_ +
         " && inner <= 4096 && r >= 2 && st[0][r - 2] == 0 && idx[r - 2] == 0) {\n" + short_rows();
    s += "} else if (" + all_unit_ + ") {\n" + unit_row();
    s += "} else {\n" + strided_row();
    s += "}\n";
    s += emit_odometer_step(nops_);
    s += "}\n";
    s += "}\n";
    if (spec_.kind == ReduceKind::kMean) {
      // Mean over an empty set is 0/0 = NaN, as in NumPy.
      s += "if (n_out > 0) {\n";
      s += "const " + T_ + " count = (" + T_ + ")(n_in / n_out);\n";
      s += "for (int64_t i = ob; i < oe; ++i) p0[i] = p0[i] / count;\n";
      s += "}\n";
    }
    return s + "}\n";
  }

 private:
  // The operands' broadcast shape, each input's strides over it, and the element counts.
  std::string iteration_space() const {
    const std::string R = std::to_string(rank_);
    std::string s;
    s += T_ + " *restrict p0 = (" + T_ + " *)" + out_ + "->data;\n";
    s += "int64_t shp[KILN_MAX_DIMS], st[" + std::to_string(nops_) +
         "][KILN_MAX_DIMS], ost[KILN_MAX_DIMS];\n";
    s += "int64_t n_out = 1, n_in = 1;\n";
    s += "for (int d = 0; d < " + out_ + "->ndim; ++d) n_out *= " + out_ + "->shape[d];\n";
    s += "for (int d = 0; d < " + R + "; ++d) shp[d] = 1;\n";
    for (size_t k = 0; k < inputs_.size(); ++k) {
      if (slot_[k] < 0) continue;
      const auto& in = inputs_[k];
      const std::string sk = std::to_string(slot_[k]);
      s += "for (int d = 0; d < " + R + "; ++d) {\n";
      const int lead = rank_ - in.rank;
      s += "const int e = " + (lead == 0 ? std::string("d") : "d - " + std::to_string(lead)) +
           ";\n";
      s += "if (e >= 0 && " + in.tensor + "->shape[e] != 1) shp[d] = " + in.tensor +
           "->shape[e];\n";
      s += "st[" + sk + "][d] = (e < 0 || " + in.tensor + "->shape[e] == 1) ? 0 : " + in.tensor +
           "->strides[e];\n";
      s += "}\n";
    }
    s += "for (int d = 0; d < " + R + "; ++d) n_in *= shp[d];\n";
    // [ob, oe): the outputs this part owns; it initialises, accumulates and scales only those.
    s += "int64_t ob = 0, oe = 0;\n";
    return s;
  }

  // The output's strides over the iteration space (0 along reduced dimensions), the
  // operands' pointers, the collapsed space, and this part's share of it: parts split the
  // outermost kept dimension, each index along it owning a contiguous block of st[0][k]
  // outputs that no other index touches. A full reduction is one part's work.
  std::string strides_and_part() const {
    const std::string R = std::to_string(rank_), N = std::to_string(nops_);
    std::string s;
    s += "int64_t c = 1;\n";
    s += "for (int d = " + out_ + "->ndim - 1; d >= 0; --d) {\n";
    s += "ost[d] = c;\n";
    s += "c *= " + out_ + "->shape[d];\n";
    s += "}\n";
    // Input dimension d maps to output dimension od (-1 when reduced).
    for (int d = 0, od = 0; d < rank_; ++d) {
      const bool reduced = spec_.mask[static_cast<size_t>(d)];
      s += "st[0][" + std::to_string(d) +
           "] = " + (reduced ? std::string("0") : "ost[" + std::to_string(od) + "]") + ";\n";
      if (!reduced || spec_.keepdims) ++od;
    }
    if (rank_ == 0) s += "(void)ost;\n";
    for (size_t k = 0; k < inputs_.size(); ++k) {
      const std::string ct(dtype_c_type(inputs_[k].dtype));
      if (slot_[k] >= 0) {
        const std::string sk = std::to_string(slot_[k]);
        s += "const " + ct + " *restrict p" + sk + " = (const " + ct + " *)" + inputs_[k].tensor +
             "->data;\n";
      } else if (!inputs_[k].literal) {
        s += "const " + ct + " c" + std::to_string(k) + " = *(const " + ct + " *)" +
             inputs_[k].tensor + "->data;\n";
      }
    }
    s += "const int r = kiln_collapse(" + R + ", " + N + ", shp, st);\n";
    std::string offsets = "int64_t ";
    for (int k = 0; k < nops_; ++k) offsets += (k ? ", o" : "o") + std::to_string(k) + " = 0";
    s += offsets + ";\n";
    s += "int k = 0;\n";
    s += "while (k < r && st[0][k] == 0) ++k;\n";
    s += "if (k < r) {\n";
    s += "int64_t lo = 0, hi = 0;\n";
    s += "kiln_part_range(shp[k], " + ctx_ + "->part, " + ctx_ + "->n_parts, 1, &lo, &hi);\n";
    for (int k = 0; k < nops_; ++k) {
      const std::string sk = std::to_string(k);
      s += "o" + sk + " = lo * st[" + sk + "][k];\n";
    }
    s += "ob = o0;\n";
    s += "oe = hi * st[0][k];\n";
    s += "shp[k] = hi - lo;\n";
    s += "} else if (" + ctx_ + "->part == 0) {\n";
    s += "oe = n_out;\n";
    s += "}\n";
    s += "for (int64_t i = ob; i < oe; ++i) p0[i] = " + identity_ + ";\n";
    s += "int64_t n_part = 1;\n";
    s += "for (int d = 0; d < r; ++d) n_part *= shp[d];\n";
    s += "const int64_t inner = shp[r - 1];\n";
    for (int k = 0; k < nops_; ++k) {
      const std::string sk = std::to_string(k);
      s += "const int64_t s" + sk + " = st[" + sk + "][r - 1];\n";
    }
    s += "int64_t idx[KILN_MAX_DIMS] = {0};\n";
    s += "const int64_t outer = oe > ob ? n_part / inner : 0;\n";
    return s;
  }

  // The value at inner index `j` (an expression in j), given each operand's access.
  std::string value(bool unit, const std::string& j) const {
    TemplateValues args;
    for (size_t k = 0; k < inputs_.size(); ++k) {
      const std::string key = std::to_string(k);
      if (inputs_[k].literal) {
        args[key] = *inputs_[k].literal;
      } else if (slot_[k] < 0) {
        args[key] = "c" + key;
      } else {
        const std::string sk = std::to_string(slot_[k]);
        args[key] = unit ? "q" + sk + "[" + j + "]"
                         : "p" + sk + "[o" + sk + " + (" + j + ") * s" + sk + "]";
      }
    }
    std::string b;
    for (const auto& let : lets_) b += render_template(let, args, "reduced expression") + " ";
    return b + "const " + T_ + " x = (" + T_ + ")" +
           render_template(expr_, args, "reduced expression") + ";";
  }

  // Each input's row at offset `shift` (rows of the second-innermost dimension) as q<k>.
  std::string row_pointers(const std::string& shift = "") const {
    std::string s;
    for (size_t k = 0; k < inputs_.size(); ++k) {
      if (slot_[k] < 0) continue;
      const std::string ct(dtype_c_type(inputs_[k].dtype));
      const std::string sk = std::to_string(slot_[k]);
      s += "const " + ct + " *restrict q" + sk + " = p" + sk + " + o" + sk +
           (shift.empty() ? "" : " + (" + shift + ") * st[" + sk + "][r - 2]") + ";\n";
    }
    return s;
  }

  // A whole row into one output (s0 == 0). Sixteen independent accumulators: the loop
  // vectorizes without reassociating one sum.
  std::string into_one() const {
    const std::string lane = combine(spec_.kind, spec_.dtype, "lane[l]", "x");
    std::string s;
    s += T_ + " a = p0[o0];\n";
    // (No input to test: only the unit-stride branch.)
    const bool inputs_vary = unit_inputs_ != "1";
    s += inputs_vary ? "if (" + unit_inputs_ + ") {\n" : "{\n";
    s += row_pointers();
    s += T_ + " lane[16];\n";
    s += "for (int l = 0; l < 16; ++l) lane[l] = " + identity_ + ";\n";
    s += "int64_t j = 0;\n";
    s += "for (; j + 16 <= inner; j += 16) {\n";
    s += "KILN_LANES for (int l = 0; l < 16; ++l) { " + value(true, "j + l") + " lane[l] = " + lane +
         "; }\n";
    s += "}\n";
    s += "for (; j < inner; ++j) { " + value(true, "j") + " a = " + comb_ + "; }\n";
    s += "for (int l = 0; l < 16; ++l) a = " + combine(spec_.kind, spec_.dtype, "a", "lane[l]") +
         ";\n";
    if (inputs_vary) {
      s += "} else {\n";
      s += "KILN_NOVEC for (int64_t j = 0; j < inner; ++j) { " + value(false, "j") + " a = " +
           comb_ + "; }\n";
    }
    s += "}\n";
    s += "p0[o0] = a;\n";
    return s;
  }

  // After a run of rows done in one go: the same as if they had been stepped through one by
  // one (the odometer carries).
  std::string skip_run() const {
    std::string s;
    for (int k = 0; k < nops_; ++k) {
      const std::string sk = std::to_string(k);
      s += "o" + sk + " += st[" + sk + "][r - 2] * (m2 - 1);\n";
    }
    s += "idx[r - 2] = m2 - 1;\n";
    s += "it += m2 - 1;\n";
    return s;
  }

  // A short kept row under a reduced dimension (a blocked layout's global pool: 8 channels of
  // each position): the whole reduced run in one go, the row's sums held locally, not one
  // odometer step per row of 8 (0.88 ms for EfficientNet's first 112 x 112 pool). Rows of 8
  // (the blocked layout's channel block): four rows' sums in registers at once. Through a
  // local array, each row's sums waited on the last row's stores (14 GB/s on EfficientNet's
  // squeeze-excite pools).
  std::string rows_of_eight() const {
    auto step = [&](const std::string& u) {
      return "{\n" + row_pointers("i2 + " + u) + "KILN_LANES for (int j = 0; j < 8; ++j) { " +
             value(true, "j") + " const " + T_ + " a = acc[" + u + "][j]; acc[" + u +
             "][j] = " + comb_ + "; }\n" + "}\n";
    };
    std::string s;
    s += T_ + " acc[4][8];\n";
    s += "KILN_LANES for (int j = 0; j < 8; ++j) {\n";
    s += "acc[0][j] = p0[o0 + j];\n";
    s += "acc[1][j] = acc[2][j] = acc[3][j] = " + identity_ + ";\n";
    s += "}\n";
    s += "const int64_t m2 = shp[r - 2];\n";
    s += "int64_t i2 = 0;\n";
    s += "for (; i2 + 4 <= m2; i2 += 4) {\n";
    s += step("0") + step("1") + step("2") + step("3");
    s += "}\n";
    s += "for (; i2 < m2; ++i2) {\n" + step("0") + "}\n";
    s += "KILN_LANES for (int j = 0; j < 8; ++j) {\n";
    s += "KILN_LANES for (int u = 1; u < 4; ++u) { const " + T_ + " a = acc[0][j]; const " + T_ +
         " x = acc[u][j]; acc[0][j] = " + comb_ + "; }\n";
    s += "p0[o0 + j] = acc[0][j];\n";
    s += "}\n";
    return s + skip_run();
  }

  // Rows under a reduced dimension, in blocks of 32 columns each summed over every row in a
  // local run: a channels-last global pool (EfficientNet's squeeze-and-excite, 96-1152
  // channels) read and wrote its output row once per input row.
  std::string short_rows() const {
    std::string s;
    s += "const int64_t m2 = shp[r - 2];\n";
    s += "for (int64_t j0 = 0; j0 < inner; j0 += 32) {\n";
    s += "const int64_t w = inner - j0 < 32 ? inner - j0 : 32;\n";
    s += T_ + " run[32];\n";
    s += "for (int64_t j = 0; j < w; ++j) run[j] = p0[o0 + j0 + j];\n";
    s += "for (int64_t i2 = 0; i2 < m2; ++i2) {\n";
    s += row_pointers("i2");
    s += "for (int64_t j = 0; j < w; ++j) { " + value(true, "j0 + j") + " const " + T_ +
         " a = run[j]; run[j] = " + comb_ + "; }\n";
    s += "}\n";
    s += "for (int64_t j = 0; j < w; ++j) p0[o0 + j0 + j] = run[j];\n";
    s += "}\n";
    return s + skip_run();
  }

  // A row of outputs, every operand at unit stride.
  std::string unit_row() const {
    return T_ + " *restrict q0 = p0 + o0;\n" + row_pointers() +
           "for (int64_t j = 0; j < inner; ++j) { " + value(true, "j") + " const " + T_ +
           " a = q0[j]; q0[j] = " + comb_ + "; }\n";
  }

  // Any strides.
  std::string strided_row() const {
    std::string s;
    s += "KILN_NOVEC for (int64_t j = 0; j < inner; ++j) {\n";
    s += value(false, "j") + "\n";
    s += "const " + T_ + " a = p0[o0 + j * s0];\n";
    s += "p0[o0 + j * s0] = " + comb_ + ";\n";
    s += "}\n";
    return s;
  }

  const ReduceLoop& spec_;
  const std::vector<LoopOperand>& inputs_;
  const std::string& expr_;
  const std::vector<std::string>& lets_;
  const std::string& out_;
  const std::string& ctx_;
  int rank_;
  std::string T_, identity_, comb_;
  std::vector<int> slot_;
  int nops_ = 1;
  std::string unit_inputs_, all_unit_;
};

}  // namespace

std::string emit_reduce_loop(const ReduceLoop& spec, const std::vector<LoopOperand>& inputs,
                             const std::string& expr, const std::vector<std::string>& lets,
                             const std::string& out, const std::string& ctx) {
  return ReduceEmitter(spec, inputs, expr, lets, out, ctx).code();
}

}  // namespace kiln
