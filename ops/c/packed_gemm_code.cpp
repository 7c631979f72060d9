#include "ops/c/packed_gemm_code.h"

namespace kiln {

std::string c_view_contiguity_checks(const std::string& op, const std::string& input,
                                     const std::vector<int64_t>& dims, const std::string& fail) {
  std::string s;
  int64_t step = 1;
  for (int d = static_cast<int>(dims.size()) - 1; d >= 0; --d) {
    if (dims[static_cast<size_t>(d)] > 1) {
      s += "  if (" + input + "->strides[" + std::to_string(d) + "] != " + std::to_string(step) +
           ") " + fail + "(\"" + op + ": a viewed operand is not contiguous\");\n";
    }
    step *= dims[static_cast<size_t>(d)];
  }
  return s;
}

std::string c_pack_b_panels(const std::string& T, const std::string& dst, const std::string& src,
                            const std::string& K, const std::string& N, const std::string& rsb,
                            const std::string& csb, const std::string& in) {
  std::string s;
  s += in + "for (int64_t q = 0; q < (" + N + " + P - 1) / P; ++q) {\n";
  s += in + "  const int64_t n = " + N + " - q * P < P ? " + N + " - q * P : P;\n";
  s += in + "  for (int64_t i = 0; i < " + K + "; ++i) {\n";
  s += in + "    " + T + " *restrict d_ = " + dst + " + (q * " + K + " + i) * P;\n";
  s += in + "    const " + T + " *s_ = " + src + " + i * " + rsb + " + q * P * " + csb + ";\n";
  s += in + "    if (" + csb + " == 1)\n";
  s += in + "      for (int64_t j = 0; j < n; ++j) d_[j] = s_[j];\n";
  s += in + "    else\n";
  s += in + "      for (int64_t j = 0; j < n; ++j) d_[j] = s_[j * " + csb + "];\n";
  s += in + "    for (int64_t j = n; j < P; ++j) d_[j] = 0;\n";
  s += in + "  }\n";
  s += in + "}\n";
  return s;
}

}  // namespace kiln
