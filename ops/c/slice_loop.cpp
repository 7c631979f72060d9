#include "ops/c/slice_loop.h"

namespace kiln {

int64_t static_slice_size(const TensorType& t, int axis) {
  int64_t unit = 1;
  for (int d = axis; d < t.rank(); ++d) {
    if (t.dims[static_cast<size_t>(d)] == kDynamic) return 0;
    unit *= t.dims[static_cast<size_t>(d)];
  }
  return unit;
}

std::string c_open_slice_loop(const CodeNames& names, const Sub& sub, int rank, int axis,
                              const std::string& T, const std::string& decls) {
  const std::string& in = names.inputs[0];
  const std::string& out = names.outputs[0];
  const std::string ra = std::to_string(rank), ax = std::to_string(axis);
  std::string s = "{\n";
  s += "  int64_t outer = 1, slice = 1, cst[KILN_MAX_DIMS];\n";
  s += "  for (int d = 0; d < " + ra + "; ++d) {\n";
  s += "    if (d < " + ax + ") outer *= " + out + "->shape[d];\n";
  s += "    else slice *= " + out + "->shape[d];\n";
  s += "  }\n";
  s += decls;
  s += "  int contiguous = 1;\n";
  s += "  for (int64_t d = " + std::to_string(rank - 1) + ", c = 1; d >= 0; c *= " + in +
       "->shape[d], --d) {\n";
  s += "    cst[d] = c;\n";
  s += "    if (" + in + "->shape[d] != 1 && " + in + "->strides[d] != c) contiguous = 0;\n";
  s += "  }\n";
  s += "  const " + T + " *x = (const " + T + " *)" + in + "->data;\n";
  s += "  " + T + " *y = (" + T + " *)" + out + "->data;\n";
  s += "  int64_t lo, hi;\n";
  s += "  kiln_part_range(outer, " + sub.ctx + "->part, " + sub.ctx + "->n_parts, 1, &lo, &hi);\n";
  s += "  for (int64_t o = lo; o < hi; ++o) {\n";
  s += "    " + T + " *yo = y + o * slice;\n";
  s += "    const " + T + " *xo = x + o * slice;\n";
  s += "    if (!contiguous) {\n";
  s += "      int64_t off = 0;\n";
  if (axis > 0) {  // the slice's offset in the input: o's index over the outer dimensions
    s += "      for (int64_t d = " + std::to_string(axis - 1) + ", r = o; d >= 0; --d) {\n";
    s += "        off += r % " + in + "->shape[d] * " + in + "->strides[d];\n";
    s += "        r /= " + in + "->shape[d];\n";
    s += "      }\n";
  }
  s += "      kiln_copy_nd(yo, cst + " + ax + ", x + off, " + in + "->strides + " + ax + ", " +
       std::to_string(rank - axis) + ", " + in + "->shape + " + ax + ", sizeof(" + T + "));\n";
  s += "      xo = yo;\n";
  s += "    }\n";
  return s;
}

}  // namespace kiln
