#pragma once
// C snippets around kiln's packed GEMM (kiln_support.gemm_packed_*) that more than one op
// emits: the check that an input read through an OperandView is laid out as the view assumes,
// and the copy of a strided B matrix into the kernel's panels.
#include <cstdint>
#include <string>
#include <vector>

namespace kiln {

// Fails (through `fail`, naming `op`) unless `input` (a kiln_tensor *) of these static dims is
// contiguous: a view counts elements of a contiguous input.
std::string c_view_contiguity_checks(const std::string& op, const std::string& input,
                                     const std::vector<int64_t>& dims, const std::string& fail);

// Copies B (K rows x N columns of `T`, element (i, j) at src[i * rsb + j * csb]) into the
// panels of KILN_GEMM_PANEL_BYTES columns at dst (panel q: K rows of P elements, the last
// panel's columns past N zero). All arguments are C expressions; P must be defined.
std::string c_pack_b_panels(const std::string& T, const std::string& dst, const std::string& src,
                            const std::string& K, const std::string& N, const std::string& rsb,
                            const std::string& csb, const std::string& indent);

}  // namespace kiln
