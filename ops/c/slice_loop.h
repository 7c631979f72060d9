#pragma once
// The opening of a row-wise op's C code (softmax, layer_norm): this part's range of the
// slices o over the axes from `axis` on. It declares outer (the slices), slice (elements per
// slice), x and y (input and output data), and in the loop xo and yo (slice o's). A
// contiguous input is read in place; another layout is first copied, slice by slice, into
// the output, and read there. `decls` goes before the loop; the caller writes the loop's body
// and closes it and the block ("  }\n}\n").
#include <string>

#include "ops/cop.h"

namespace kiln {

// Elements per slice over the axes from `axis` on (a split unit), 0 when one is dynamic.
int64_t static_slice_size(const TensorType& t, int axis);

std::string c_open_slice_loop(const CodeNames& names, const Sub& sub, int rank, int axis,
                              const std::string& T, const std::string& decls);

}  // namespace kiln
