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

std::string emit_reduce_loop(const ReduceLoop& spec, const std::vector<LoopOperand>& inputs,
                             const std::string& expr, const std::vector<std::string>& lets,
                             const std::string& out, const std::string& ctx) {
  const int rank = static_cast<int>(spec.mask.size());
  const std::string R = std::to_string(rank);
  const std::string T(dtype_c_type(spec.dtype));
  const std::string identity = "(" + T + ")" + identity_of(spec.kind, spec.dtype);
  // Operand 0 is the output; operand slot[k] is input k. Literals and single elements are
  // hoisted and take no slot.
  std::vector<int> slot(inputs.size(), -1);
  int nops = 1;
  for (size_t k = 0; k < inputs.size(); ++k) {
    if (!inputs[k].literal && !inputs[k].single) slot[k] = nops++;
  }
  const std::string N = std::to_string(nops);
  // Input dimension d maps to output dimension out_dim[d] (-1 when reduced).
  std::vector<int> out_dim(static_cast<size_t>(rank), -1);
  for (int d = 0, od = 0; d < rank; ++d) {
    if (!spec.mask[static_cast<size_t>(d)]) {
      out_dim[static_cast<size_t>(d)] = od++;
    } else if (spec.keepdims) {
      ++od;
    }
  }
  std::string s = "{\n";
  s += "  " + T + " *restrict p0 = (" + T + " *)" + out + "->data;\n";
  s += "  int64_t shp[KILN_MAX_DIMS], st[" + N + "][KILN_MAX_DIMS], ost[KILN_MAX_DIMS];\n";
  s += "  int64_t n_out = 1, n_in = 1;\n";
  s += "  for (int d = 0; d < " + out + "->ndim; ++d) n_out *= " + out + "->shape[d];\n";
  // The iteration space is the operands' broadcast shape.
  s += "  for (int d = 0; d < " + R + "; ++d) shp[d] = 1;\n";
  for (size_t k = 0; k < inputs.size(); ++k) {
    if (slot[k] < 0) continue;
    const auto& in = inputs[k];
    std::string sk = std::to_string(slot[k]);
    s += "  for (int d = 0; d < " + R + "; ++d) {\n";
    const int lead = rank - in.rank;
    s += "    const int e = " + (lead == 0 ? std::string("d") : "d - " + std::to_string(lead)) +
         ";\n";
    s += "    if (e >= 0 && " + in.tensor + "->shape[e] != 1) shp[d] = " + in.tensor +
         "->shape[e];\n";
    s += "    st[" + sk + "][d] = (e < 0 || " + in.tensor + "->shape[e] == 1) ? 0 : " + in.tensor +
         "->strides[e];\n";
    s += "  }\n";
  }
  s += "  for (int d = 0; d < " + R + "; ++d) n_in *= shp[d];\n";
  // [ob, oe): the outputs this part owns; it initialises, accumulates and scales only those.
  s += "  int64_t ob = 0, oe = 0;\n";
  s += "  if (n_in == 0 || n_out == 0) {\n";
  s += "    if (" + ctx + "->part == 0) oe = n_out;\n";
  s += "    for (int64_t i = ob; i < oe; ++i) p0[i] = " + identity + ";\n";
  s += "  } else {\n";
  s += "    int64_t c = 1;\n";
  s += "    for (int d = " + out + "->ndim - 1; d >= 0; --d) {\n";
  s += "      ost[d] = c;\n";
  s += "      c *= " + out + "->shape[d];\n";
  s += "    }\n";
  for (int d = 0; d < rank; ++d) {
    int o = out_dim[static_cast<size_t>(d)];
    s += "    st[0][" + std::to_string(d) +
         "] = " + (o < 0 ? std::string("0") : "ost[" + std::to_string(o) + "]") + ";\n";
  }
  if (rank == 0) s += "    (void)ost;\n";
  for (size_t k = 0; k < inputs.size(); ++k) {
    std::string ct(dtype_c_type(inputs[k].dtype));
    if (slot[k] >= 0) {
      std::string sk = std::to_string(slot[k]);
      s += "    const " + ct + " *restrict p" + sk + " = (const " + ct + " *)" + inputs[k].tensor +
           "->data;\n";
    } else if (!inputs[k].literal) {
      s += "    const " + ct + " c" + std::to_string(k) + " = *(const " + ct + " *)" +
           inputs[k].tensor + "->data;\n";
    }
  }
  s += "    const int r = kiln_collapse(" + R + ", " + N + ", shp, st);\n";
  // Parts split the outermost kept dimension: each index along it owns a contiguous block
  // of st[0][k] outputs that no other index touches. A full reduction is one part's work.
  std::string offsets = "    int64_t ";
  for (int k = 0; k < nops; ++k) offsets += (k ? ", o" : "o") + std::to_string(k) + " = 0";
  s += offsets + ";\n";
  s += "    int k = 0;\n";
  s += "    while (k < r && st[0][k] == 0) ++k;\n";
  s += "    if (k < r) {\n";
  s += "      int64_t lo = 0, hi = 0;\n";
  s += "      kiln_part_range(shp[k], " + ctx + "->part, " + ctx + "->n_parts, 1, &lo, &hi);\n";
  for (int k = 0; k < nops; ++k) {
    std::string sk = std::to_string(k);
    s += "      o" + sk + " = lo * st[" + sk + "][k];\n";
  }
  s += "      ob = o0;\n";
  s += "      oe = hi * st[0][k];\n";
  s += "      shp[k] = hi - lo;\n";
  s += "    } else if (" + ctx + "->part == 0) {\n";
  s += "      oe = n_out;\n";
  s += "    }\n";
  s += "    for (int64_t i = ob; i < oe; ++i) p0[i] = " + identity + ";\n";
  s += "    int64_t n_part = 1;\n";
  s += "    for (int d = 0; d < r; ++d) n_part *= shp[d];\n";
  s += "    const int64_t inner = shp[r - 1];\n";
  // "every input's inner stride is 1", as a C condition ("1" with no input to test).
  std::vector<std::string> unit_conds;
  for (int k = 0; k < nops; ++k) {
    std::string sk = std::to_string(k);
    s += "    const int64_t s" + sk + " = st[" + sk + "][r - 1];\n";
    if (k) unit_conds.push_back("s" + sk + " == 1");
  }
  const std::string unit_inputs = unit_conds.empty() ? "1" : join(unit_conds, " && ");
  // ... and the output's too.
  unit_conds.insert(unit_conds.begin(), "s0 == 1");
  const std::string all_unit = join(unit_conds, " && ");
  s += "    int64_t idx[KILN_MAX_DIMS] = {0};\n";
  s += "    const int64_t outer = oe > ob ? n_part / inner : 0;\n";

  // The value at inner index `j` (an expression in j), given each operand's access.
  auto value = [&](bool unit, const std::string& j) {
    TemplateValues args;
    for (size_t k = 0; k < inputs.size(); ++k) {
      std::string key = std::to_string(k);
      if (inputs[k].literal) {
        args[key] = *inputs[k].literal;
      } else if (slot[k] < 0) {
        args[key] = "c" + key;
      } else {
        std::string sk = std::to_string(slot[k]);
        args[key] = unit ? "q" + sk + "[" + j + "]"
                         : "p" + sk + "[o" + sk + " + (" + j + ") * s" + sk + "]";
      }
    }
    std::string b;
    for (const auto& let : lets) b += render_template(let, args, "reduced expression") + " ";
    return b + "const " + T + " x = (" + T + ")" +
           render_template(expr, args, "reduced expression") + ";";
  };
  std::string unit_ptrs;
  for (size_t k = 0; k < inputs.size(); ++k) {
    if (slot[k] < 0) continue;
    std::string ct(dtype_c_type(inputs[k].dtype));
    std::string sk = std::to_string(slot[k]);
    unit_ptrs += "          const " + ct + " *restrict q" + sk + " = p" + sk + " + o" + sk + ";\n";
  }
  const std::string comb = combine(spec.kind, spec.dtype, "a", "x");
  s += "    for (int64_t it = 0; it < outer; ++it) {\n";
  s += "      if (s0 == 0) {\n";
  s += "        " + T + " a = p0[o0];\n";
  // (No input to test: only the unit-stride branch.)
  const bool inputs_vary = unit_inputs != "1";
  s += inputs_vary ? "        if (" + unit_inputs + ") {\n" : "        {\n";
  s += unit_ptrs;
  // Sixteen independent accumulators: the loop vectorizes without reassociating one sum.
  s += "          " + T + " lane[16];\n";
  s += "          for (int l = 0; l < 16; ++l) lane[l] = " + identity + ";\n";
  s += "          int64_t j = 0;\n";
  s += "          for (; j + 16 <= inner; j += 16) {\n";
  s += "            KILN_LANES for (int l = 0; l < 16; ++l) { " + value(true, "j + l") +
       " lane[l] = " + combine(spec.kind, spec.dtype, "lane[l]", "x") + "; }\n";
  s += "          }\n";
  s += "          for (; j < inner; ++j) { " + value(true, "j") + " a = " + comb + "; }\n";
  s += "          for (int l = 0; l < 16; ++l) a = " +
       combine(spec.kind, spec.dtype, "a", "lane[l]") + ";\n";
  if (inputs_vary) {
    s += "        } else {\n";
    s += "          KILN_NOVEC for (int64_t j = 0; j < inner; ++j) { " + value(false, "j") +
         " a = " + comb + "; }\n";
  }
  s += "        }\n";
  s += "        p0[o0] = a;\n";
  // A short kept row under a reduced dimension (a blocked layout's global pool: 8 channels
  // of each position): the whole reduced run in one go, the row's sums held locally, not
  // one odometer step per row of 8 (0.88 ms for EfficientNet's first 112 x 112 pool).
  auto run_ptrs_at = [&](const std::string& i2) {
    std::string ptrs;
    for (size_t k = 0; k < inputs.size(); ++k) {
      if (slot[k] < 0) continue;
      std::string ct(dtype_c_type(inputs[k].dtype));
      std::string sk = std::to_string(slot[k]);
      ptrs += "            const " + ct + " *restrict q" + sk + " = p" + sk + " + o" + sk + " + (" +
              i2 + ") * st[" + sk + "][r - 2];\n";
    }
    return ptrs;
  };
  const std::string run_ptrs = run_ptrs_at("i2");
  // The same as if the run's rows had been stepped through one by one: the odometer below
  // carries.
  std::string run_skip;
  for (int k = 0; k < nops; ++k) {
    std::string sk = std::to_string(k);
    run_skip += "        o" + sk + " += st[" + sk + "][r - 2] * (m2 - 1);\n";
  }
  run_skip += "        idx[r - 2] = m2 - 1;\n";
  run_skip += "        it += m2 - 1;\n";
  // Rows of 8 (the blocked layout's channel block): four rows' sums in registers at once.
  // Through a local array, each row's sums waited on the last row's stores (14 GB/s on
  // EfficientNet's squeeze-excite pools).
  auto acc_step = [&](const std::string& u) {
    return "          {\n" + run_ptrs_at("i2 + " + u) +
           "            KILN_LANES for (int j = 0; j < 8; ++j) { " + value(true, "j") + " const " +
           T + " a = acc[" + u + "][j]; acc[" + u + "][j] = " + comb + "; }\n" + "          }\n";
  };
  s += "      } else if (" + all_unit +
       " && inner == 8 && r >= 2 && st[0][r - 2] == 0 && idx[r - 2] == 0) {\n";
  s += "        " + T + " acc[4][8];\n";
  s += "        KILN_LANES for (int j = 0; j < 8; ++j) {\n";
  s += "          acc[0][j] = p0[o0 + j];\n";
  s += "          acc[1][j] = acc[2][j] = acc[3][j] = " + identity + ";\n";
  s += "        }\n";
  s += "        const int64_t m2 = shp[r - 2];\n";
  s += "        int64_t i2 = 0;\n";
  s += "        for (; i2 + 4 <= m2; i2 += 4) {\n";
  s += acc_step("0") + acc_step("1") + acc_step("2") + acc_step("3");
  s += "        }\n";
  s += "        for (; i2 < m2; ++i2) {\n" + acc_step("0") + "        }\n";
  s += "        KILN_LANES for (int j = 0; j < 8; ++j) {\n";
  s += "          KILN_LANES for (int u = 1; u < 4; ++u) { const " + T + " a = acc[0][j]; const " +
       T + " x = acc[u][j]; acc[0][j] = " + comb + "; }\n";
  s += "          p0[o0 + j] = acc[0][j];\n";
  s += "        }\n";
  s += run_skip;
  s += "      } else if (" + all_unit +
       " && inner <= 32 && r >= 2 && st[0][r - 2] == 0 && idx[r - 2] == 0) {\n";
  s += "        " + T + " run[32];\n";
  s += "        for (int64_t j = 0; j < inner; ++j) run[j] = p0[o0 + j];\n";
  s += "        const int64_t m2 = shp[r - 2];\n";
  s += "        for (int64_t i2 = 0; i2 < m2; ++i2) {\n";
  s += run_ptrs;
  s += "          for (int64_t j = 0; j < inner; ++j) { " + value(true, "j") + " const " + T +
       " a = run[j]; run[j] = " + comb + "; }\n";
  s += "        }\n";
  s += "        for (int64_t j = 0; j < inner; ++j) p0[o0 + j] = run[j];\n";
  s += run_skip;
  s += "      } else if (" + all_unit + ") {\n";
  s += "        " + T + " *restrict q0 = p0 + o0;\n";
  s += unit_ptrs;
  s += "        for (int64_t j = 0; j < inner; ++j) { " + value(true, "j") + " const " + T +
       " a = q0[j]; q0[j] = " + comb + "; }\n";
  s += "      } else {\n";
  s += "        KILN_NOVEC for (int64_t j = 0; j < inner; ++j) {\n";
  s += "          " + value(false, "j") + "\n";
  s += "          const " + T + " a = p0[o0 + j * s0];\n";
  s += "          p0[o0 + j * s0] = " + comb + ";\n";
  s += "        }\n";
  s += "      }\n";
  s += emit_odometer_step(nops, "      ");
  s += "    }\n";
  s += "  }\n";
  if (spec.kind == ReduceKind::kMean) {
    // Mean over an empty set is 0/0 = NaN, as in NumPy.
    s += "  if (n_out > 0) {\n";
    s += "    const " + T + " count = (" + T + ")(n_in / n_out);\n";
    s += "    for (int64_t i = ob; i < oe; ++i) p0[i] = p0[i] / count;\n";
    s += "  }\n";
  }
  s += "}\n";
  return s;
}

}  // namespace kiln
