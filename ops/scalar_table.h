#pragma once
// The scalar-op table: one entry per elementwise op, giving its arity, the dtypes it
// accepts, its output dtype rule, its C expression and its reference semantics. The
// generic Elementwise op turns any entry into broadcasting loops.
#include <cstdint>
#include <string_view>
#include <vector>

#include "graph/attrs.h"

namespace kiln {

enum class Domain { kAny, kNumeric, kSignedNumeric, kFloat, kBool, kInteger };
enum class OutRule { kSame, kBool, kWhere, kCast };

struct ScalarParam {
  std::string_view name;
  double fallback;
};

// C templates: ${0} ${1} ${2} are the arguments, ${T} the output C type, ${f} the libm
// suffix ("f" for float32), ${m} the prefix of kiln's vectorizable float32 transcendentals
// ("kiln_" for float32, "" for libm's float64), ${S} the type tag (i8 u8 i32 i64 f32 f64),
// ${<param>} a param.
struct ScalarOpDef {
  std::string_view name;
  int arity;
  Domain domain;
  OutRule out;
  std::string_view c_float;  // for float dtypes
  std::string_view c_int;    // for integer and bool dtypes ("" when the op is float-only)
  double (*ref)(const double* x, const double* params);
  int64_t (*ref_int)(const int64_t* x, const double* params);  // exact integer semantics
  std::vector<ScalarParam> params;
  // The vector-Jacobian product per input, ';'-separated, over g (the output's gradient),
  // y (the output), x0.. (the inputs) and the params (ops/grad/derivative.h); "0": a zero
  // gradient; "" for the whole entry: not differentiable (boolean results).
  std::string_view derivative;
};

const std::vector<ScalarOpDef>& scalar_ops();
const ScalarOpDef* find_scalar_op(std::string_view name);
// True when the op's float code calls kiln_math.h.
bool uses_math_prelude(const ScalarOpDef& def);

}  // namespace kiln
