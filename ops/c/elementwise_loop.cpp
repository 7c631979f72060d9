#include "ops/c/elementwise_loop.h"

#include <cmath>

#include "ctemplate/template.h"
#include "ops/cop.h"
#include "util/strings.h"

namespace kiln {

std::string c_literal(DType dtype, double value) {
  std::string type(dtype_c_type(dtype));
  if (is_float(dtype)) return "((" + type + ")" + format_double(value) + ")";
  if (dtype == DType::kBool) return value != 0 ? "((uint8_t)1)" : "((uint8_t)0)";
  return "((" + type + ")" + std::to_string(static_cast<int64_t>(value)) + "LL)";
}

std::string c_literal_of(DType dtype, double as_double, int64_t as_int) {
  if (!is_integer(dtype)) return c_literal(dtype, as_double);
  // INT64_MIN has no literal form: write it as an expression.
  if (as_int == INT64_MIN) return "((int64_t)(-9223372036854775807LL - 1))";
  return "((" + std::string(dtype_c_type(dtype)) + ")" + std::to_string(as_int) + "LL)";
}

LoopOperand loop_operand(const Variable* v, const std::string& tensor, const TensorType& out) {
  LoopOperand op;
  op.tensor = tensor;
  op.dtype = v->type.dtype;
  op.rank = v->type.rank();
  // Scalar constants are part of the graph signature, so inlining them is safe.
  if (is_inlined_scalar(v)) {
    op.literal = c_literal_of(v->type.dtype, v->value->load(0), v->value->load_int(0));
  }
  op.single = true;
  for (int64_t d : v->type.dims) op.single = op.single && d == 1;
  // The output's last dimension, static and > 1, survives collapsing as part of the inner
  // one, where an operand whose own last dimension is 1 has stride 0.
  const int64_t out_last = out.rank() > 0 ? out.dims.back() : 1;
  op.row_invariant = !op.single && op.rank > 0 && v->type.dims.back() == 1 && out_last != 1 &&
                     out_last != kDynamic;
  return op;
}

std::string emit_versioned_on(
    const std::vector<LoopOperand>& inputs, size_t k, const std::vector<double>& values,
    const std::function<std::string(const std::vector<LoopOperand>&)>& emit) {
  const LoopOperand& op = inputs.at(k);
  const std::string ct(dtype_c_type(op.dtype));
  std::string s =
      "{\nconst " + ct + " kiln_version_on = *(const " + ct + " *)" + op.tensor + "->data;\n";
  for (double value : values) {
    std::vector<LoopOperand> fixed = inputs;
    fixed[k].literal = c_literal_of(op.dtype, value, static_cast<int64_t>(value));
    s += "if (kiln_version_on == " + *fixed[k].literal + ") {\n" + emit(fixed) + "} else ";
  }
  return s + "{\n" + emit(inputs) + "}\n}\n";
}

std::string emit_odometer_step(int nops) {
  std::string advance, rewind;
  for (int k = 0; k < nops; ++k) {
    std::string sk = std::to_string(k);
    advance += "o" + sk + " += st[" + sk + "][d];\n";
    rewind += "o" + sk + " -= st[" + sk + "][d] * shp[d];\n";
  }
  return "for (int d = r - 2; d >= 0; --d) {\n" + advance + "if (++idx[d] < shp[d]) break;\n" +
         rewind + "idx[d] = 0;\n}\n";
}

namespace {

// One elementwise loop, piece by piece. Operand 0 is the output; operand slot[k] is input k.
// Literals, single elements and the output read back take no slot.
class ElementwiseEmitter {
 public:
  ElementwiseEmitter(const std::vector<LoopOperand>& inputs, const std::string& out,
                     DType out_dtype, int out_rank, const std::string& expr,
                     const std::string& ctx, const std::vector<std::string>& lets)
      : inputs_(inputs), out_(out), rank_(out_rank), T_(dtype_c_type(out_dtype)), expr_(expr),
        ctx_(ctx), lets_(lets), slot_(inputs.size(), -1) {
    for (size_t k = 0; k < inputs.size(); ++k) {
      if (!inputs[k].literal && !inputs[k].reads_output && !inputs[k].single) slot_[k] = nops_++;
    }
  }

  std::string code(bool interleave, const std::string& split_unit, const SplitTiles* tiles) const {
    std::string s = "{\n" + iteration_space();
    s += "if (n > 0) {\n";
    s += operands();
    s += share(split_unit, tiles);
    s += "kiln_seek(r, " + std::to_string(nops_) + ", shp, st, lo / inner, idx, off);\n";
    std::string offsets;
    for (int k = 0; k < nops_; ++k) {
      const std::string sk = std::to_string(k);
      offsets += (k ? ", o" : "o") + sk + " = off[" + sk + "]";
    }
    s += "int64_t " + offsets + ";\n";
    s += "int64_t j0 = lo % inner;\n";
    s += "for (int64_t pos = lo; pos < hi;) {\n";
    s += "const int64_t j1 = hi - pos < inner - j0 ? j0 + (hi - pos) : inner;\n";
    s += "if (" + unit_test() + ") {\n";
    s += rank_ >= 5 ? "if (inner == 8 && r >= 2 && j0 == 0 && j1 == 8) {\n" + rows_of_eight() +
                          "} else {\n"
                    : "{\n";
    s += unit_run(interleave);
    s += "}\n";
    s += "} else {\n";
    s += "KILN_NOVEC for (int64_t j = j0; j < j1; ++j) { " +
         body(access(false), "p0[o0 + j * s0]") + " }\n";
    s += "}\n";
    s += "pos += j1 - j0;\n";
    s += "j0 = 0;\n";
    s += emit_odometer_step(nops_);
    s += "}\n";
    if (tiles) s += "}\n";  // the segment loop
    s += "}\n";
    return s + "}\n";
  }

 private:
  // The output's shape and element count.
  std::string iteration_space() const {
    std::string s;
    s += "int64_t shp[KILN_MAX_DIMS];\n";
    s += "int64_t st[" + std::to_string(nops_) + "][KILN_MAX_DIMS];\n";
    s += "int64_t n = 1;\n";
    s += "for (int d = 0; d < " + std::to_string(rank_) + "; ++d) {\n";
    s += "shp[d] = " + out_ + "->shape[d];\n";
    s += "n *= shp[d];\n";
    s += "}\n";
    return s;
  }

  // Each operand's strides over the output's shape (broadcast dimensions 0), pointers and
  // hoisted single elements, the collapsed space and its inner strides.
  std::string operands() const {
    const std::string R = std::to_string(rank_);
    std::string s;
    s += "int64_t c = 1;\n";
    s += "for (int d = " + std::to_string(rank_ - 1) + "; d >= 0; --d) {\n";
    s += "st[0][d] = c;\n";
    s += "c *= shp[d];\n";
    s += "}\n";
    for (size_t k = 0; k < inputs_.size(); ++k) {
      if (slot_[k] < 0) continue;
      const auto& in = inputs_[k];
      const std::string sk = std::to_string(slot_[k]);
      // Input dimension e = d - (rank - in.rank) broadcasts against output dimension d.
      const int lead = rank_ - in.rank;
      const std::string e = lead == 0 ? "d" : "e";
      s += "for (int d = 0; d < " + R + "; ++d) {\n";
      if (lead != 0) s += "const int e = d - " + std::to_string(lead) + ";\n";
      s += "st[" + sk + "][d] = (" + (lead != 0 ? std::string("e < 0 || ") : "") + in.tensor +
           "->shape[" + e + "] == 1) ? 0 : " + in.tensor + "->strides[" + e + "];\n";
      s += "}\n";
    }
    s += T_ + " *restrict p0 = (" + T_ + " *)" + out_ + "->data;\n";
    for (size_t k = 0; k < inputs_.size(); ++k) {
      if (slot_[k] < 0) continue;
      const std::string ct(dtype_c_type(inputs_[k].dtype));
      const std::string sk = std::to_string(slot_[k]);
      s += "const " + ct + " *restrict p" + sk + " = (const " + ct + " *)" + inputs_[k].tensor +
           "->data;\n";
    }
    for (size_t k = 0; k < inputs_.size(); ++k) {
      if (inputs_[k].single && !inputs_[k].literal && !inputs_[k].reads_output) {
        const std::string ct(dtype_c_type(inputs_[k].dtype));
        s += "const " + ct + " c" + std::to_string(k) + " = *(const " + ct + " *)" +
             inputs_[k].tensor + "->data;\n";
      }
    }
    s += "const int r = kiln_collapse(" + R + ", " + std::to_string(nops_) + ", shp, st);\n";
    s += "const int64_t inner = shp[r - 1];\n";
    for (int k = 0; k < nops_; ++k) {
      const std::string sk = std::to_string(k);
      s += "const int64_t s" + sk + " = st[" + sk + "][r - 1];\n";
    }
    return s;
  }

  // This call's share [lo, hi) of the flat output range (the output is contiguous, so a flat
  // index is an output offset); with n_parts == 1 it is the whole range. Over a tile-split
  // op's tiles: one segment per (image, row) of this part's tile, each a run of its columns
  // (the segment loop stays open).
  std::string share(const std::string& split_unit, const SplitTiles* tiles) const {
    std::string s;
    s += "int64_t lo, hi, idx[KILN_MAX_DIMS] = {0}, off[" + std::to_string(nops_) + "];\n";
    if (tiles) {
      s += "const int64_t t_rows = " + tiles->rows + ", t_cols = " + tiles->cols + ";\n";
      if (tiles->piece_in_scope) {
        // One image's piece, given by the op running this epilogue inside its loops.
        s += "const int64_t t_r0 = e_r0, t_r1 = e_r1, t_c0 = e_c0, t_c1 = e_c1;\n";
        s += "const int64_t t_n = t_c1 > t_c0 ? t_r1 - t_r0 : 0, t_img = e_n;\n";
      } else {
        s += "int64_t t_r0, t_r1, t_c0, t_c1;\n";
        s += "kiln_tile_part(t_rows, t_cols, " + tiles->row_unit + ", " + tiles->col_unit + ", " +
             ctx_ + "->part, " + ctx_ + "->n_parts, &t_r0, &t_r1, &t_c0, &t_c1);\n";
        s += "const int64_t t_n = t_c1 > t_c0 ? (t_r1 - t_r0) * (n / (t_rows * t_cols)) : 0, "
             "t_img = 0;\n";
      }
      s += "for (int64_t seg = 0; seg < t_n; ++seg) {\n";
      s += "const int64_t t_base = ((t_img + seg / (t_r1 - t_r0)) * t_rows + t_r0 + seg % (t_r1 - "
           "t_r0)) * t_cols;\n";
      s += "lo = t_base + t_c0;\nhi = t_base + t_c1;\n";
    } else if (split_unit.empty()) {
      s += "kiln_part_range(n, " + ctx_ + "->part, " + ctx_ + "->n_parts, 64, &lo, &hi);\n";
    } else {
      s += "{\nconst int64_t unit = " + split_unit + ";\n";
      s += "kiln_part_range(n / unit, " + ctx_ + "->part, " + ctx_ + "->n_parts, 1, &lo, &hi);\n";
      s += "lo *= unit;\nhi *= unit;\n}\n";
    }
    return s;
  }

  // The row is unit-stride for every operand (a row-invariant one: stride 0).
  std::string unit_test() const {
    std::vector<bool> invariant(static_cast<size_t>(nops_), false);
    for (size_t k = 0; k < inputs_.size(); ++k) {
      if (slot_[k] > 0 && inputs_[k].row_invariant) invariant[static_cast<size_t>(slot_[k])] = true;
    }
    std::string test;
    for (int k = 0; k < nops_; ++k) {
      test += (k ? " && s" : "s") + std::to_string(k) +
              (invariant[static_cast<size_t>(k)] ? " == 0" : " == 1");
    }
    return test;
  }

  // How the expression reads each input at index j: through restrict-qualified row pointers
  // (unit, which lets the compiler vectorize) or with strides.
  TemplateValues access(bool unit) const {
    TemplateValues args;
    for (size_t k = 0; k < inputs_.size(); ++k) {
      const std::string key = std::to_string(k);
      const std::string sk = std::to_string(slot_[k]);
      const std::string strided = "p" + sk + "[o" + sk + " + j * s" + sk + "]";
      if (inputs_[k].reads_output) {
        args[key] = unit ? "q0[j]" : "p0[o0 + j * s0]";
      } else if (inputs_[k].literal) {
        args[key] = *inputs_[k].literal;
      } else if (inputs_[k].single) {
        args[key] = "c" + key;
      } else if (inputs_[k].row_invariant) {
        args[key] = unit ? "r" + sk : strided;
      } else {
        args[key] = unit ? "q" + sk + "[j]" : strided;
      }
    }
    return args;
  }

  std::string body(const TemplateValues& args, const std::string& store) const {
    std::string b;
    for (const auto& let : lets_) b += render_template(let, args, "elementwise expression") + " ";
    return b + store + " = (" + T_ + ")" + render_template(expr_, args, "elementwise expression") +
           ";";
  }

  // Each operand's row pointer (or row-invariant value), `row` rows of dimension r - 2 on.
  std::string row_pointers(const std::string& row) const {
    std::string b = T_ + " *restrict q0 = p0 + o0" + row + ";\n";
    for (size_t k = 0; k < inputs_.size(); ++k) {
      if (slot_[k] < 0) continue;
      const std::string ct(dtype_c_type(inputs_[k].dtype));
      const std::string sk = std::to_string(slot_[k]);
      const std::string at = row.empty() ? "" : " + i2 * st[" + sk + "][r - 2]";
      if (inputs_[k].row_invariant) {
        b += "const " + ct + " r" + sk + " = p" + sk + "[o" + sk + at + "];\n";
        continue;
      }
      b += "const " + ct + " *restrict q" + sk + " = p" + sk + " + o" + sk + at + ";\n";
    }
    return b;
  }

  // Rows of 8 (the blocked layout's channel block, e.g. x * s with s per channel): a run of
  // rows along dimension r - 2 in one loop of fixed-length rows, not one odometer step per
  // row of 8 (27 GB/s on EfficientNet's squeeze-excite products).
  std::string rows_of_eight() const {
    std::string s;
    s += "int64_t rows = shp[r - 2] - idx[r - 2];\n";
    s += "if (rows > (hi - pos) / 8) rows = (hi - pos) / 8;\n";
    s += "for (int64_t i2 = 0; i2 < rows; ++i2) {\n";
    s += row_pointers(" + i2 * st[0][r - 2]");
    s += "KILN_SAME_INDEX for (int64_t j = 0; j < 8; ++j) { " + body(access(true), "q0[j]") +
         " }\n";
    s += "}\n";
    // As if the rows before the last had been stepped through: the step below carries.
    s += "rows -= 1;\n";
    for (int k = 0; k < nops_; ++k) {
      const std::string sk = std::to_string(k);
      s += "o" + sk + " += st[" + sk + "][r - 2] * rows;\n";
    }
    s += "idx[r - 2] += rows;\n";
    s += "pos += rows * 8;\n";
    return s;
  }

  // One run [j0, j1) of a row, every operand at unit stride.
  std::string unit_run(bool interleave) const {
    return row_pointers("") + "KILN_SAME_INDEX " + (interleave ? "KILN_ILP " : "") +
           "for (int64_t j = j0; j < j1; ++j) { " + body(access(true), "q0[j]") + " }\n";
  }

  const std::vector<LoopOperand>& inputs_;
  const std::string& out_;
  int rank_;
  std::string T_;
  const std::string& expr_;
  const std::string& ctx_;
  const std::vector<std::string>& lets_;
  std::vector<int> slot_;
  int nops_ = 1;
};

}  // namespace

std::string emit_elementwise_loop(const std::vector<LoopOperand>& inputs, const std::string& out,
                                  DType out_dtype, int out_rank, const std::string& expr,
                                  const std::string& ctx, const std::vector<std::string>& lets,
                                  bool interleave, const std::string& split_unit,
                                  const SplitTiles* tiles) {
  return ElementwiseEmitter(inputs, out, out_dtype, out_rank, expr, ctx, lets)
      .code(interleave, split_unit, tiles);
}

}  // namespace kiln
