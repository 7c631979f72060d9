#include "ops/c/strided_copy.h"

namespace kiln {

std::string c_split_strided_copy(const std::string& out, const std::string& src,
                                 const std::string& strides, int rank, const std::string& es,
                                 const std::string& ctx) {
  if (rank == 0) {
    return "  kiln_copy_strided(" + out + "->data, " + src + ", 0, " + out + "->shape, " + strides +
           ", " + es + ");\n";
  }
  const std::string r = std::to_string(rank);
  std::string s = "  {\n  int64_t shp[KILN_MAX_DIMS];\n";
  s += "  for (int d = 0; d < " + r + "; ++d) shp[d] = " + out + "->shape[d];\n";
  s += "  int sd = 0;\n  while (sd < " + std::to_string(rank - 1) + " && shp[sd] == 1) ++sd;\n";
  s += "  int64_t lo, hi;\n";
  s += "  kiln_part_range(shp[sd], " + ctx + "->part, " + ctx + "->n_parts, 1, &lo, &hi);\n";
  s += "  if (lo < hi) {\n    shp[sd] = hi - lo;\n";
  s += "    kiln_copy_nd((char *)" + out + "->data + lo * " + out + "->strides[sd] * " + es + ", " +
       out + "->strides, " + src + " + lo * " + strides + "[sd] * " + es + ", " + strides + ", " +
       r + ", shp, " + es + ");\n  }\n  }\n";
  return s;
}

}  // namespace kiln
