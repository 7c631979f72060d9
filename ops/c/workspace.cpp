#include "ops/c/workspace.h"

#include "util/escape.h"

namespace kiln {

std::string c_workspace(const std::string& type, const std::string& var, const std::string& count,
                        const std::string& what) {
  return type + " *" + var + ";\nKILN_WORKSPACE(" + var + ", " + count + ", " +
         c_string_literal(what) + ");\n";
}

std::string c_workspace_macro() {
  // The count is read once; sizeof(*(p)) gives the element size, so the type is written once.
  return "#define KILN_WORKSPACE(p, count, what) do { const size_t kiln_n_ = (size_t)(count); "
         "(p) = ctx->workspace(ctx, kiln_n_ * sizeof(*(p))); if (!(p) && kiln_n_ > 0) "
         "KILN_FAIL(\"out of memory for %s (%llu bytes)\", what, "
         "(unsigned long long)(kiln_n_ * sizeof(*(p)))); } while (0)";
}

}  // namespace kiln
