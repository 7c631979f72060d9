// The ONNX importer's scalar ops applied elementwise, their composites (HardSwish, Selu, ...),
// casts and clips.
#include <onnx/onnx_pb.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <functional>
#include <limits>
#include <map>
#include <tuple>

#include "frontend/onnx/nonzero.h"
#include "frontend/onnx/onnx_model.h"
#include "frontend/onnx/onnx_op_support.h"
#include "frontend/onnx/onnx_tensor.h"
#include "ops/broadcast.h"
#include "ops/registry.h"
#include "ops/window.h"
#include "util/error.h"
#include "util/strings.h"

namespace kiln::onnx_import {
namespace {

// Variadic Max / Min / Sum / Mean: a left fold of the binary op.
OnnxOpSpec variadic(const std::string& op, bool mean) {
  return {{}, nullptr, [op, mean](OnnxImporter& im, const onnx::NodeProto& n, const Attrs&) {
            Var acc = im.in(n, 0);
            for (int i = 1; i < n.input_size(); ++i) acc = apply(op, {acc, im.in(n, i)});
            if (n.input_size() == 1) acc = reshape(acc, Ints(static_cast<size_t>(acc.rank()), 0));
            if (mean) acc = acc / static_cast<double>(n.input_size());
            return Outs{acc};
          }};
}

std::optional<DType> cast_target(const Attrs& a) {
  return dtype_from_onnx(static_cast<int>(attr_int(a, "to")));
}

std::vector<std::string> check_cast(const Attrs& a, const onnx::NodeProto&, int) {
  auto dt = cast_target(a);
  if (!dt) {
    return {attr_problem("to", onnx_dtype_name(static_cast<int>(attr_int(a, "to"))),
                         "(element type not supported)")};
  }
  return {};
}

// ONNX Cast of input 0 to `to`, storage types included: a storage-type source is first
// restored to its own bits (uint64 past 2^63 stays unsigned), and a storage-type target is
// produced in that type (the loader then takes it into its compute type).
Var cast_logical(OnnxImporter& im, const onnx::NodeProto& n, DType to) {
  Var x = im.in(n, 0);
  const DType from = im.logical_dtype(n, 0);
  if (OnnxImporter::compute_type(from)) {
    x = apply("convert", {x}, {{"to", std::string(dtype_name(from))}});
  }
  if (x.dtype() == to) return x;
  if (OnnxImporter::compute_type(to) || OnnxImporter::compute_type(x.dtype()))
    return apply("convert", {x}, {{"to", std::string(dtype_name(to))}});
  return cast(x, to);
}

Var clip_bound(OnnxImporter& im, const onnx::NodeProto& n, int i, Var x, bool upper,
               const Attrs& a) {
  if (im.opset() < 11) {
    const double inf = std::numeric_limits<double>::infinity();
    return scalar_like(x, attr_float(a, upper ? "max" : "min", upper ? inf : -inf));
  }
  if (OnnxImporter::has_input(n, i)) return im.in(n, i);
  if (is_float(x.dtype())) return scalar_like(x, upper ? INFINITY : -INFINITY);
  // Integer bounds: the type's own limits, kept exact as int64 literals.
  Tensor lim = Tensor::empty(x.dtype(), {});
  switch (x.dtype()) {
    case DType::kInt8:
      lim.store_int(0, upper ? 127 : -128);
      break;
    case DType::kUInt8:
      lim.store_int(0, upper ? 255 : 0);
      break;
    case DType::kInt32:
      lim.store_int(0, upper ? INT32_MAX : INT32_MIN);
      break;
    default:
      lim.store_int(0, upper ? INT64_MAX : INT64_MIN);
      break;
  }
  return constant(x.graph(), lim);
}

Outs convert_pow(OnnxImporter& im, const onnx::NodeProto& n, const Attrs&) {
  Var base = im.in(n, 0), e = im.in(n, 1);
  if (im.storage(n.input(0)) == DType::kUInt64) {
    throw UnsupportedError(
        "Pow of uint64 values (computed as int64, so values past 2^63 would be wrong)");
  }
  if (base.dtype() == e.dtype()) return Outs{pow(base, e)};
  // Mixed types: the result has the base's type; a float exponent of an integer base is
  // evaluated in floating point.
  if (!is_float(base.dtype()) && is_float(e.dtype()))
    return Outs{cast(pow(cast(base, e.dtype()), e), base.dtype())};
  if (is_float(base.dtype()) && im.storage(n.input(1)) == DType::kUInt64) {
    // A uint64 exponent is stored as int64: past 2^63 it reads negative, so 2^64 is added back
    // (in float64, as exact as the float result can use).
    Var e64 = cast(e, DType::kFloat64);
    e64 = where(lt(e, e * 0.0), e64 + 18446744073709551616.0, e64);
    return Outs{pow(base, cast(e64, base.dtype()))};
  }
  return Outs{pow(base, cast(e, base.dtype()))};
}

Outs convert_mod(OnnxImporter& im, const onnx::NodeProto& n, const Attrs& a) {
  Var x = im.in(n, 0), y = im.in(n, 1);
  // uint64 values are stored as int64; unsigned, both remainders are the same.
  if (im.storage(n.input(0)) == DType::kUInt64) return Outs{apply("mod_u", {x, y})};
  if (attr_int(a, "fmod", 0) == 0) return Outs{mod(x, y)};
  // C fmod: the sign of the dividend. Integer: x - trunc(x / y) * y.
  if (is_float(x.dtype())) return Outs{apply("fmod", {x, y})};
  return Outs{x - div(x, y) * y};
}

}  // namespace

void add_elementwise_ops(OpTable& t) {
  const std::map<std::string, std::string> same{{"Add", "add"},
                                                {"Sub", "sub"},
                                                {"Mul", "mul"},
                                                {"Div", "div"},
                                                {"Neg", "neg"},
                                                {"Abs", "abs"},
                                                {"Sign", "sign"},
                                                {"Exp", "exp"},
                                                {"Log", "log"},
                                                {"Sqrt", "sqrt"},
                                                {"Reciprocal", "reciprocal"},
                                                {"Sin", "sin"},
                                                {"Cos", "cos"},
                                                {"Tanh", "tanh"},
                                                {"Sigmoid", "sigmoid"},
                                                {"Relu", "relu"},
                                                {"Softplus", "softplus"},
                                                {"Erf", "erf"},
                                                {"Floor", "floor"},
                                                {"Ceil", "ceil"},
                                                {"Round", "round"},
                                                {"Less", "lt"},
                                                {"LessOrEqual", "le"},
                                                {"Greater", "gt"},
                                                {"GreaterOrEqual", "ge"},
                                                {"Equal", "eq"},
                                                {"And", "logical_and"},
                                                {"Or", "logical_or"},
                                                {"Not", "logical_not"},
                                                {"Xor", "ne"},
                                                {"Where", "where"},
                                                {"Sinh", "sinh"},
                                                {"Cosh", "cosh"},
                                                {"Asin", "asin"},
                                                {"Acos", "acos"},
                                                {"Atan", "atan"},
                                                {"Asinh", "asinh"},
                                                {"Acosh", "acosh"},
                                                {"Atanh", "atanh"}};
  for (const auto& [onnx_name, kiln_name] : same) t[onnx_name] = elementwise(kiln_name);
  t["LeakyRelu"] = elementwise("leaky_relu", {"alpha"});
  t["Elu"] = elementwise("elu", {"alpha"});
  // uint64 values are stored as int64: their orders compare the bits as unsigned.
  auto unsigned_aware = [](const std::string& op, OnnxOpSpec as_signed) {
    OnnxOpSpec as_unsigned = variadic(op + "_u", false);
    return OnnxOpSpec{{}, nullptr, [=](OnnxImporter& im, const onnx::NodeProto& n, const Attrs& a) {
                        return im.storage(n.input(0)) == DType::kUInt64
                                   ? as_unsigned.convert(im, n, a)
                                   : as_signed.convert(im, n, a);
                      }};
  };
  t["Max"] = unsigned_aware("maximum", variadic("maximum", false));
  t["Min"] = unsigned_aware("minimum", variadic("minimum", false));
  t["BitShift"] = {
      {"direction"}, nullptr, [](OnnxImporter& im, const onnx::NodeProto& n, const Attrs& a) {
        const std::string dir = attr_string(a, "direction", std::string());
        if (dir != "LEFT" && dir != "RIGHT")
          throw UserError("direction must be LEFT or RIGHT, got '" + dir + "'");
        for (int k = 0; k < 2; ++k) {
          const DType dt = im.logical_dtype(n, k);
          if (dt != DType::kUInt8 && dt != DType::kUInt16 && dt != DType::kUInt32 &&
              dt != DType::kUInt64) {
            throw UserError("BitShift takes unsigned integers; input " + std::to_string(k) +
                            " is " + std::string(dtype_name(dt)));
          }
        }
        return Outs{
            apply(dir == "LEFT" ? "shift_left" : "shift_right", {im.in(n, 0), im.in(n, 1)})};
      }};
  t["Sum"] = variadic("add", false);
  t["Mean"] = variadic("add", true);
  t["Pow"] = {{}, nullptr, convert_pow};
  t["Mod"] = {{"fmod"}, nullptr, convert_mod};
  t["Cast"] = {{"to"}, check_cast, [](OnnxImporter& im, const onnx::NodeProto& n, const Attrs& a) {
                 return Outs{cast_logical(im, n, *cast_target(a))};
               }};
  t["CastLike"] = {{}, nullptr, [](OnnxImporter& im, const onnx::NodeProto& n, const Attrs&) {
                     return Outs{cast_logical(im, n, im.logical_dtype(n, 1))};
                   }};
  t["Clip"] = {
      {"min", "max"}, nullptr, [](OnnxImporter& im, const onnx::NodeProto& n, const Attrs& a) {
        Var x = im.in(n, 0);
        return Outs{clip(x, clip_bound(im, n, 1, x, false, a), clip_bound(im, n, 2, x, true, a))};
      }};
  t["Identity"] = {{}, nullptr, [](OnnxImporter& im, const onnx::NodeProto& n, const Attrs&) {
                     return Outs{im.in(n, 0)};
                   }};
  // Composites of scalar ops.
  t["HardSigmoid"] = {
      {"alpha", "beta"}, nullptr, [](OnnxImporter& im, const onnx::NodeProto& n, const Attrs& a) {
        Var x = im.in(n, 0);
        return Outs{clip(x * attr_float(a, "alpha", 0.2) + attr_float(a, "beta", 0.5), 0.0, 1.0)};
      }};
  t["HardSwish"] = {{}, nullptr, [](OnnxImporter& im, const onnx::NodeProto& n, const Attrs&) {
                      Var x = im.in(n, 0);
                      return Outs{x * clip(x * (1.0 / 6.0) + 0.5, 0.0, 1.0)};
                    }};
  t["Selu"] = {
      {"alpha", "gamma"}, nullptr, [](OnnxImporter& im, const onnx::NodeProto& n, const Attrs& a) {
        Var x = im.in(n, 0);
        return Outs{elu(x, attr_float(a, "alpha", 1.67326319217681884765625)) *
                    attr_float(a, "gamma", 1.05070102214813232421875)};
      }};
  t["Celu"] = {{"alpha"}, nullptr, [](OnnxImporter& im, const onnx::NodeProto& n, const Attrs& a) {
                 Var x = im.in(n, 0);
                 const double alpha = attr_float(a, "alpha", 1.0);
                 return Outs{relu(x) + minimum(scalar_like(x, 0.0), expm1(x / alpha) * alpha)};
               }};
  t["Softsign"] = {{}, nullptr, [](OnnxImporter& im, const onnx::NodeProto& n, const Attrs&) {
                     Var x = im.in(n, 0);
                     return Outs{x / (abs(x) + 1.0)};
                   }};
  t["ThresholdedRelu"] = {
      {"alpha"}, nullptr, [](OnnxImporter& im, const onnx::NodeProto& n, const Attrs& a) {
        Var x = im.in(n, 0);
        return Outs{
            where(gt(x, scalar_like(x, attr_float(a, "alpha", 1.0))), x, scalar_like(x, 0.0))};
      }};
  t["PRelu"] = {{}, nullptr, [](OnnxImporter& im, const onnx::NodeProto& n, const Attrs&) {
                  Var x = im.in(n, 0);
                  return Outs{where(lt(x, scalar_like(x, 0.0)), x * im.in(n, 1), x)};
                }};
  t["Tan"] = {{}, nullptr, [](OnnxImporter& im, const onnx::NodeProto& n, const Attrs&) {
                Var x = im.in(n, 0);
                return Outs{sin(x) / cos(x)};
              }};
  t["IsNaN"] = {{}, nullptr, [](OnnxImporter& im, const onnx::NodeProto& n, const Attrs&) {
                  Var x = im.in(n, 0);
                  return Outs{ne(x, x)};
                }};
  t["IsInf"] = {{"detect_positive", "detect_negative"},
                nullptr,
                [](OnnxImporter& im, const onnx::NodeProto& n, const Attrs& a) {
                  Var x = im.in(n, 0);
                  Var pos = eq(x, scalar_like(x, INFINITY)),
                      neg_inf = eq(x, scalar_like(x, -INFINITY));
                  const bool p = attr_int(a, "detect_positive", 1) != 0,
                             q = attr_int(a, "detect_negative", 1) != 0;
                  if (p && q) return Outs{logical_or(pos, neg_inf)};
                  if (p) return Outs{pos};
                  if (q) return Outs{neg_inf};
                  return Outs{logical_and(pos, neg_inf)};  // never both: all false
                }};
  t["Shrink"] = {
      {"lambd", "bias"}, nullptr, [](OnnxImporter& im, const onnx::NodeProto& n, const Attrs& a) {
        Var x = im.in(n, 0);
        const double l = attr_float(a, "lambd", 0.5), b = attr_float(a, "bias", 0.0);
        Var zero = scalar_like(x, 0.0);
        return Outs{where(lt(x, scalar_like(x, -l)), x + scalar_like(x, b),
                          where(gt(x, scalar_like(x, l)), x - scalar_like(x, b), zero))};
      }};
}

}  // namespace kiln::onnx_import
