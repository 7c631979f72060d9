#pragma once
// The derivative language of the scalar table (ops/scalar_table.h): an expression per input
// over g (the gradient of the output), y (the output), x0, x1, x2 (the inputs) and the op's
// params, built into graph nodes. Numbers are constants of g's dtype; + - * / and the
// comparisons < <= > >= == != are the elementwise ops; f(a, b, ...) applies any op by name.
//   "g * cos(x0)"   "where(x0 > 0, g, g * alpha)"
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "ops/builders.h"

namespace kiln {

struct DerivativeEnv {
  Var g, y;
  std::vector<Var> x;
  std::map<std::string, double> params;
};

// One input's gradient (the output's shape; the caller sums broadcasting away). Throws
// InternalError naming the text and the offset of what does not parse: the table is code.
Var build_derivative(std::string_view expr, const DerivativeEnv& env);
// The entry's per-input expressions (split at ';', trimmed).
std::vector<std::string> split_derivatives(std::string_view text);

}  // namespace kiln
