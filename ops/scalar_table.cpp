#include "ops/scalar_table.h"

#include <cmath>
#include <limits>

namespace kiln {
namespace {

using P = const double*;
using I = const int64_t*;

double py_mod(double a, double b) {
  double r = std::fmod(a, b);
  return (r != 0 && ((r < 0) != (b < 0))) ? r + b : r;
}
int64_t int_div(int64_t a, int64_t b) { return b == 0 ? 0 : (b == -1 ? -a : a / b); }
int64_t int_mod(int64_t a, int64_t b) {
  if (b == 0 || b == -1) return 0;
  int64_t r = a % b;
  return (r != 0 && ((r < 0) != (b < 0))) ? r + b : r;
}
int64_t int_pow(int64_t a, int64_t b) {
  if (b < 0) return a == 1 ? 1 : (a == -1 ? ((b & 1) ? -1 : 1) : 0);
  uint64_t r = 1, x = static_cast<uint64_t>(a);
  while (b) {
    if (b & 1) r *= x;
    x *= x;
    b >>= 1;
  }
  return static_cast<int64_t>(r);
}
double nan_max(double a, double b) { return (a > b || a != a) ? a : b; }
double nan_min(double a, double b) { return (a < b || a != a) ? a : b; }
double gelu(double x) {
  if (x == -INFINITY) return -0.0;  // the limit, not -inf * 0
  return 0.5 * x * std::erfc(-x * 0.70710678118654752440);
}
double softplus(double x) { return x > 0 ? x + std::log1p(std::exp(-x)) : std::log1p(std::exp(x)); }
// x0 / x1 where x2 is x1's reciprocal (what the module computes then); for any other x2
// (the op tests' random operands), the corrected product itself.
double div_rcp(const double* x, const double*) {
  if (x[2] == 1.0 / x[1] || static_cast<float>(x[2]) == 1.0f / static_cast<float>(x[1]))
    return x[0] / x[1];
  const double q = x[0] * x[2], c = std::fma(std::fma(-q, x[1], x[0]), x[2], q);
  return std::copysign(std::isnan(c) ? q : c, q);
}
double sign(double x) { return x > 0 ? 1 : (x < 0 ? -1 : x); }

// clang-format off
const std::vector<ScalarOpDef> kOps = {
  // name        arity domain                  out             C (float)                                   C (int/bool)
  //   reference (float), reference (integer), params,
  //   derivative: per input, ';'-separated, the gradient in the language of ops/grad/derivative.h
  {"add",        2, Domain::kNumeric,       OutRule::kSame,  "(${0} + ${1})",                     "(${0} + ${1})",
   [](P x, P) { return x[0] + x[1]; }, [](I x, P) { return x[0] + x[1]; }, {},
   "g; g"},
  {"sub",        2, Domain::kNumeric,       OutRule::kSame,  "(${0} - ${1})",                     "(${0} - ${1})",
   [](P x, P) { return x[0] - x[1]; }, [](I x, P) { return x[0] - x[1]; }, {},
   "g; -g"},
  {"mul",        2, Domain::kNumeric,       OutRule::kSame,  "(${0} * ${1})",                     "(${0} * ${1})",
   [](P x, P) { return x[0] * x[1]; }, [](I x, P) { return x[0] * x[1]; }, {},
   "g * x1; g * x0"},
  {"div",        2, Domain::kNumeric,       OutRule::kSame,  "(${0} / ${1})",                     "kiln_div_${S}(${0}, ${1})",
   [](P x, P) { return x[0] / x[1]; }, [](I x, P) { return int_div(x[0], x[1]); }, {},
   "g / x1; -g * y / x1"},
  // x0 / x1 given x2 = RN(1/x1) (kiln_math.h's kiln_div_rcpf): q = x0 x2 corrected once by
  // its exact residual. The simplify pass writes it, only before a rounding to an integer.
  {"div_rcp",    3, Domain::kFloat,         OutRule::kSame,  "kiln_div_rcp${f}(${0}, ${1}, ${2})", "",
   div_rcp, nullptr, {},
   "g / x1; -g * y / x1; 0"},
  {"pow",        2, Domain::kNumeric,       OutRule::kSame,  "${m}pow${f}(${0}, ${1})",           "kiln_pow_${S}(${0}, ${1})",
   [](P x, P) { return std::pow(x[0], x[1]); }, [](I x, P) { return int_pow(x[0], x[1]); }, {},
   "where(x1 == 0, 0, g * x1 * pow(x0, x1 - 1)); where(x0 == 0, 0, g * y * log(x0))"},
  {"mod",        2, Domain::kNumeric,       OutRule::kSame,  "kiln_mod_${S}(${0}, ${1})",         "kiln_mod_${S}(${0}, ${1})",
   [](P x, P) { return py_mod(x[0], x[1]); }, [](I x, P) { return int_mod(x[0], x[1]); }, {},
   "g; -g * floor(x0 / x1)"},
  {"neg",        1, Domain::kSignedNumeric, OutRule::kSame,  "(-${0})",                           "(-${0})",
   [](P x, P) { return -x[0]; }, [](I x, P) { return -x[0]; }, {},
   "-g"},
  {"abs",        1, Domain::kNumeric,       OutRule::kSame,  "fabs${f}(${0})",                    "(${0} < 0 ? -${0} : ${0})",
   [](P x, P) { return std::fabs(x[0]); }, [](I x, P) { return x[0] < 0 ? -x[0] : x[0]; }, {},
   "g * sign(x0)"},
  {"sign",       1, Domain::kNumeric,       OutRule::kSame,  "(${0} > 0 ? (${T})1 : (${0} < 0 ? (${T})-1 : ${0}))", "((${0} > 0) - (${0} < 0))",
   [](P x, P) { return sign(x[0]); }, [](I x, P) { return int64_t(x[0] > 0) - int64_t(x[0] < 0); }, {},
   "0"},
  {"exp",        1, Domain::kFloat,         OutRule::kSame,  "${m}exp${f}(${0})",                 "",
   [](P x, P) { return std::exp(x[0]); }, nullptr, {},
   "g * y"},
  {"log",        1, Domain::kFloat,         OutRule::kSame,  "${m}log${f}(${0})",                 "",
   [](P x, P) { return std::log(x[0]); }, nullptr, {},
   "g / x0"},
  {"log1p",      1, Domain::kFloat,         OutRule::kSame,  "${m}log1p${f}(${0})",               "",
   [](P x, P) { return std::log1p(x[0]); }, nullptr, {},
   "g / (x0 + 1)"},
  {"expm1",      1, Domain::kFloat,         OutRule::kSame,  "${m}expm1${f}(${0})",               "",
   [](P x, P) { return std::expm1(x[0]); }, nullptr, {},
   "g * (y + 1)"},
  {"sqrt",       1, Domain::kFloat,         OutRule::kSame,  "sqrt${f}(${0})",                    "",
   [](P x, P) { return std::sqrt(x[0]); }, nullptr, {},
   "g / (y * 2)"},
  {"reciprocal", 1, Domain::kFloat,         OutRule::kSame,  "((${T})1 / ${0})",                  "",
   [](P x, P) { return 1.0 / x[0]; }, nullptr, {},
   "-g * y * y"},
  {"sin",        1, Domain::kFloat,         OutRule::kSame,  "sin${f}(${0})",                     "",
   [](P x, P) { return std::sin(x[0]); }, nullptr, {},
   "g * cos(x0)"},
  {"cos",        1, Domain::kFloat,         OutRule::kSame,  "cos${f}(${0})",                     "",
   [](P x, P) { return std::cos(x[0]); }, nullptr, {},
   "-g * sin(x0)"},
  {"tanh",       1, Domain::kFloat,         OutRule::kSame,  "${m}tanh${f}(${0})",                "",
   [](P x, P) { return std::tanh(x[0]); }, nullptr, {},
   "g * (1 - y * y)"},
  {"sigmoid",    1, Domain::kFloat,         OutRule::kSame,  "kiln_sigmoid${f}(${0})", "",
   [](P x, P) { return 1.0 / (1.0 + std::exp(-x[0])); }, nullptr, {},
   "g * y * (1 - y)"},
  {"relu",       1, Domain::kNumeric,       OutRule::kSame,  "(${0} < 0 ? (${T})0 : ${0})",       "(${0} < 0 ? (${T})0 : ${0})",
   [](P x, P) { return x[0] < 0 ? 0.0 : x[0]; }, [](I x, P) { return x[0] < 0 ? int64_t(0) : x[0]; }, {},
   "where(x0 > 0, g, 0)"},
  {"leaky_relu", 1, Domain::kFloat,         OutRule::kSame,  "(${0} < 0 ? ${alpha} * ${0} : ${0})", "",
   [](P x, P p) { return x[0] < 0 ? p[0] * x[0] : x[0]; }, nullptr, {{"alpha", 0.01}},
   "where(x0 > 0, g, g * alpha)"},
  {"elu",        1, Domain::kFloat,         OutRule::kSame,  "(${0} < 0 ? ${alpha} * ${m}expm1${f}(${0}) : ${0})", "",
   [](P x, P p) { return x[0] < 0 ? p[0] * std::expm1(x[0]) : x[0]; }, nullptr, {{"alpha", 1.0}},
   "where(x0 < 0, g * (y + alpha), g)"},
  {"softplus",   1, Domain::kFloat,         OutRule::kSame,  "kiln_softplus${f}(${0})", "",
   [](P x, P) { return softplus(x[0]); }, nullptr, {},
   "g * sigmoid(x0)"},
  {"erf",        1, Domain::kFloat,         OutRule::kSame,  "${m}erf${f}(${0})",                 "",
   [](P x, P) { return std::erf(x[0]); }, nullptr, {},
   "g * 1.1283791670955126 * exp(-(x0 * x0))"},
  {"gelu",       1, Domain::kFloat,         OutRule::kSame,  "kiln_gelu${f}(${0})", "",
   [](P x, P) { return gelu(x[0]); }, nullptr, {},
   "g * (0.5 * (1 + erf(x0 * 0.7071067811865476)) + x0 * 0.3989422804014327 * exp(-0.5 * x0 * x0))"},
  {"floor",      1, Domain::kFloat,         OutRule::kSame,  "floor${f}(${0})",                   "",
   [](P x, P) { return std::floor(x[0]); }, nullptr, {},
   "0"},
  {"ceil",       1, Domain::kFloat,         OutRule::kSame,  "ceil${f}(${0})",                    "",
   [](P x, P) { return std::ceil(x[0]); }, nullptr, {},
   "0"},
  // Half-way cases round to even, as in NumPy and ONNX.
  {"round",      1, Domain::kFloat,         OutRule::kSame,  "nearbyint${f}(${0})",               "",
   [](P x, P) { return std::nearbyint(x[0]); }, nullptr, {},
   "0"},
  // C fmod: the result has the dividend's sign (ONNX Mod with fmod=1).
  {"fmod",       2, Domain::kFloat,         OutRule::kSame,  "fmod${f}(${0}, ${1})",              "",
   [](P x, P) { return std::fmod(x[0], x[1]); }, nullptr, {},
   "g; -g * sign(x0 / x1) * floor(abs(x0 / x1))"},
  {"sinh",       1, Domain::kFloat,         OutRule::kSame,  "sinh${f}(${0})",                          "",
   [](P x, P) { return std::sinh(x[0]); }, nullptr, {},
   "g * cosh(x0)"},
  {"cosh",       1, Domain::kFloat,         OutRule::kSame,  "cosh${f}(${0})",                          "",
   [](P x, P) { return std::cosh(x[0]); }, nullptr, {},
   "g * sinh(x0)"},
  {"asin",       1, Domain::kFloat,         OutRule::kSame,  "asin${f}(${0})",                          "",
   [](P x, P) { return std::asin(x[0]); }, nullptr, {},
   "g / sqrt(1 - x0 * x0)"},
  {"acos",       1, Domain::kFloat,         OutRule::kSame,  "acos${f}(${0})",                          "",
   [](P x, P) { return std::acos(x[0]); }, nullptr, {},
   "-g / sqrt(1 - x0 * x0)"},
  {"atan",       1, Domain::kFloat,         OutRule::kSame,  "atan${f}(${0})",                          "",
   [](P x, P) { return std::atan(x[0]); }, nullptr, {},
   "g / (1 + x0 * x0)"},
  {"asinh",      1, Domain::kFloat,         OutRule::kSame,  "asinh${f}(${0})",                         "",
   [](P x, P) { return std::asinh(x[0]); }, nullptr, {},
   "g / sqrt(x0 * x0 + 1)"},
  {"acosh",      1, Domain::kFloat,         OutRule::kSame,  "acosh${f}(${0})",                         "",
   [](P x, P) { return std::acosh(x[0]); }, nullptr, {},
   "g / sqrt(x0 * x0 - 1)"},
  {"atanh",      1, Domain::kFloat,         OutRule::kSame,  "atanh${f}(${0})",                         "",
   [](P x, P) { return std::atanh(x[0]); }, nullptr, {},
   "g / (1 - x0 * x0)"},
  {"maximum",    2, Domain::kNumeric,       OutRule::kSame,  "((${0} > ${1} || ${0} != ${0}) ? ${0} : ${1})", "(${0} > ${1} ? ${0} : ${1})",
   [](P x, P) { return nan_max(x[0], x[1]); }, [](I x, P) { return x[0] > x[1] ? x[0] : x[1]; }, {},
   "where(x0 > x1, g, where(x0 == x1, g * 0.5, 0)); where(x1 > x0, g, where(x0 == x1, g * 0.5, 0))"},
  {"minimum",    2, Domain::kNumeric,       OutRule::kSame,  "((${0} < ${1} || ${0} != ${0}) ? ${0} : ${1})", "(${0} < ${1} ? ${0} : ${1})",
   [](P x, P) { return nan_min(x[0], x[1]); }, [](I x, P) { return x[0] < x[1] ? x[0] : x[1]; }, {},
   "where(x0 < x1, g, where(x0 == x1, g * 0.5, 0)); where(x1 < x0, g, where(x0 == x1, g * 0.5, 0))"},
  // min(max(x, lo), hi), as ONNX defines it (so lo > hi gives hi).
  {"clip",       3, Domain::kNumeric,       OutRule::kSame,  "((${0} < ${1} ? ${1} : ${0}) > ${2} ? ${2} : (${0} < ${1} ? ${1} : ${0}))", "((${0} < ${1} ? ${1} : ${0}) > ${2} ? ${2} : (${0} < ${1} ? ${1} : ${0}))",
   [](P x, P) { double m = x[0] < x[1] ? x[1] : x[0]; return m > x[2] ? x[2] : m; },
   [](I x, P) { int64_t m = x[0] < x[1] ? x[1] : x[0]; return m > x[2] ? x[2] : m; }, {},
   "where(logical_and(x0 >= x1, x0 <= x2), g, 0); where(logical_and(x0 < x1, x1 <= x2), g, 0); where(maximum(x0, x1) > x2, g, 0)"},
  {"lt",         2, Domain::kAny,           OutRule::kBool,  "(${0} < ${1})",                     "(${0} < ${1})",
   [](P x, P) { return double(x[0] < x[1]); }, [](I x, P) { return int64_t(x[0] < x[1]); }, {},
   ""},
  {"le",         2, Domain::kAny,           OutRule::kBool,  "(${0} <= ${1})",                    "(${0} <= ${1})",
   [](P x, P) { return double(x[0] <= x[1]); }, [](I x, P) { return int64_t(x[0] <= x[1]); }, {},
   ""},
  {"gt",         2, Domain::kAny,           OutRule::kBool,  "(${0} > ${1})",                     "(${0} > ${1})",
   [](P x, P) { return double(x[0] > x[1]); }, [](I x, P) { return int64_t(x[0] > x[1]); }, {},
   ""},
  {"ge",         2, Domain::kAny,           OutRule::kBool,  "(${0} >= ${1})",                    "(${0} >= ${1})",
   [](P x, P) { return double(x[0] >= x[1]); }, [](I x, P) { return int64_t(x[0] >= x[1]); }, {},
   ""},
  {"eq",         2, Domain::kAny,           OutRule::kBool,  "(${0} == ${1})",                    "(${0} == ${1})",
   [](P x, P) { return double(x[0] == x[1]); }, [](I x, P) { return int64_t(x[0] == x[1]); }, {},
   ""},
  {"ne",         2, Domain::kAny,           OutRule::kBool,  "(${0} != ${1})",                    "(${0} != ${1})",
   [](P x, P) { return double(x[0] != x[1]); }, [](I x, P) { return int64_t(x[0] != x[1]); }, {},
   ""},
  {"logical_and", 2, Domain::kBool,         OutRule::kSame,  "",                                  "(${0} && ${1})",
   nullptr, [](I x, P) { return int64_t(x[0] && x[1]); }, {},
   ""},
  {"logical_or", 2, Domain::kBool,          OutRule::kSame,  "",                                  "(${0} || ${1})",
   nullptr, [](I x, P) { return int64_t(x[0] || x[1]); }, {},
   ""},
  {"logical_not", 1, Domain::kBool,         OutRule::kSame,  "",                                  "(!${0})",
   nullptr, [](I x, P) { return int64_t(!x[0]); }, {},
   ""},
  {"where",      3, Domain::kAny,           OutRule::kWhere, "(${0} ? ${1} : ${2})",              "(${0} ? ${1} : ${2})",
   [](P x, P) { return x[0] != 0 ? x[1] : x[2]; }, [](I x, P) { return x[0] ? x[1] : x[2]; }, {},
   "0; where(x0, g, 0); where(x0, 0, g)"},
  // Integer ops on the bits as unsigned 64-bit values: ONNX's BitShift (unsigned types; a
  // shift by 64 or more gives 0), and the orders and remainder of uint64 values, which kiln
  // stores as int64 (narrower unsigned values are non-negative there, so the same code serves).
  {"shift_left",  2, Domain::kInteger,      OutRule::kSame,  "",                                  "((${1}) < 0 || (${1}) > 63 ? (${T})0 : (${T})((uint64_t)(${0}) << (${1})))",
   nullptr, [](I x, P) { return x[1] < 0 || x[1] > 63 ? int64_t{0} : static_cast<int64_t>(static_cast<uint64_t>(x[0]) << x[1]); }, {},
   ""},
  {"shift_right", 2, Domain::kInteger,      OutRule::kSame,  "",                                  "((${1}) < 0 || (${1}) > 63 ? (${T})0 : (${T})((uint64_t)(${0}) >> (${1})))",
   nullptr, [](I x, P) { return x[1] < 0 || x[1] > 63 ? int64_t{0} : static_cast<int64_t>(static_cast<uint64_t>(x[0]) >> x[1]); }, {},
   ""},
  {"minimum_u",   2, Domain::kInteger,      OutRule::kSame,  "",                                  "((uint64_t)(${0}) < (uint64_t)(${1}) ? ${0} : ${1})",
   nullptr, [](I x, P) { return static_cast<uint64_t>(x[0]) < static_cast<uint64_t>(x[1]) ? x[0] : x[1]; }, {},
   ""},
  {"maximum_u",   2, Domain::kInteger,      OutRule::kSame,  "",                                  "((uint64_t)(${0}) > (uint64_t)(${1}) ? ${0} : ${1})",
   nullptr, [](I x, P) { return static_cast<uint64_t>(x[0]) > static_cast<uint64_t>(x[1]) ? x[0] : x[1]; }, {},
   ""},
  {"mod_u",       2, Domain::kInteger,      OutRule::kSame,  "",                                  "((${1}) == 0 ? (${T})0 : (${T})((uint64_t)(${0}) % (uint64_t)(${1})))",
   nullptr, [](I x, P) { return x[1] == 0 ? int64_t{0} : static_cast<int64_t>(static_cast<uint64_t>(x[0]) % static_cast<uint64_t>(x[1])); }, {},
   ""},
  // Conversion to bool tests against zero; other conversions follow C.
  {"cast",       1, Domain::kAny,           OutRule::kCast,  "((${T})${0})",                      "((${T})${0})",
   [](P x, P) { return x[0]; }, [](I x, P) { return x[0]; }, {},
   "g"},
};
// clang-format on

}  // namespace

const std::vector<ScalarOpDef>& scalar_ops() { return kOps; }

bool uses_math_prelude(const ScalarOpDef& def) {
  return def.c_float.find("${m}") != std::string_view::npos ||
         def.c_float.find("kiln_") != std::string_view::npos;
}

const ScalarOpDef* find_scalar_op(std::string_view name) {
  for (const auto& op : kOps) {
    if (op.name == name) return &op;
  }
  return nullptr;
}

}  // namespace kiln
