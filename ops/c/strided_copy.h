#pragma once
// The C that copies a strided view into a contiguous output, this part's share of it: parts
// split the output's first dimension longer than 1 (a transpose of attention heads splits by
// head, a matrix transpose or a weight's flip by rows). Transpose and slice share it.
#include <string>

namespace kiln {

// `out`: the output (kiln_tensor *, contiguous); `src`: a C expression of the view's first
// element (const char *); `strides`: a C array of the view's element strides, one per output
// dimension; `es`: the element size; `ctx`: the kiln_ctx * naming the part.
std::string c_split_strided_copy(const std::string& out, const std::string& src,
                                 const std::string& strides, int rank, const std::string& es,
                                 const std::string& ctx);

}  // namespace kiln
