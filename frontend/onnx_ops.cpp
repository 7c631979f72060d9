#include "frontend/onnx_ops.h"

#include <onnx/onnx_pb.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <functional>
#include <limits>
#include <map>
#include <tuple>

#include "frontend/nonzero.h"
#include "frontend/onnx_model.h"
#include "frontend/onnx_tensor.h"
#include "ops/broadcast.h"
#include "ops/registry.h"
#include "ops/window.h"
#include "util/error.h"
#include "util/strings.h"

namespace kiln {
namespace {

using Outs = std::vector<Var>;
using Ints = std::vector<int64_t>;

int64_t rank_axis(int64_t axis, int rank) { return normalize_axis(axis, rank, "axis"); }

const onnx::AttributeProto* tensor_attr(const onnx::NodeProto& n, const std::string& name) {
  for (const auto& a : n.attribute()) {
    if (a.name() == name) return &a;
  }
  return nullptr;
}

std::string attr_problem(const std::string& name, const std::string& value,
                         const std::string& why) {
  return "attribute " + name + "=" + value + " " + why;
}

// A check that allows at most `n` outputs.
std::vector<std::string> max_outputs(const onnx::NodeProto& n, int count, const std::string& why) {
  for (int i = count; i < n.output_size(); ++i) {
    if (!n.output(i).empty())
      return {"output " + std::to_string(i) + " '" + n.output(i) + "' " + why};
  }
  return {};
}

// Reshape whose target may hold dynamic dimensions: each output dimension is static, the
// input's dimension at the same index (0), or the single inferred one (-1).
Var reshape_to(Var x, const Ints& dims, const std::vector<int>& source) {
  Ints shape;
  int inferred = 0;
  for (size_t i = 0; i < dims.size(); ++i) {
    if (dims[i] != kDynamic) {
      shape.push_back(dims[i]);
    } else if (source[i] == static_cast<int>(i)) {
      shape.push_back(0);
    } else {
      shape.push_back(-1);
      ++inferred;
    }
  }
  if (inferred > 1) {
    throw UnsupportedError("reshaping " + x.type().to_string() + " to " + dims_to_string(dims) +
                           " needs more than one dynamic dimension inferred");
  }
  // A static 0 in the target must not be read as "copy the input's dimension".
  for (size_t i = 0; i < dims.size(); ++i) {
    if (dims[i] == 0) {
      throw UnsupportedError("reshaping " + x.type().to_string() +
                             " to a shape with a 0-sized dimension");
    }
  }
  return reshape(x, shape);
}

// ---- Consumers of symbolic shape values (onnx_sym.h) --------------------------------------

// A symbolic input of a node that reads run-time dimensions: nullopt unless the input is
// symbolic (known values take the ordinary, constant path).
std::optional<SymValue> symbolic_in(OnnxImporter& im, const onnx::NodeProto& n, int i) {
  if (!OnnxImporter::has_input(n, i) || !im.sym(n.input(i))) return std::nullopt;
  return *im.sym(n.input(i));
}

// Bounds far past any dimension clamp the same way; these fit a dimension expression.
int64_t clamp_bound(int64_t v) {
  constexpr int64_t kFar = int64_t{1} << 62;
  return std::clamp(v, -kFar, kFar);
}

// The op `name` on `data` (may be null) plus the variables the expressions read, with
// `props` and each expression list in `lists` written as a prop string.
Var apply_with_dims(OnnxImporter& im, const std::string& name, std::optional<Var> data, Attrs props,
                    const std::vector<std::pair<std::string, std::vector<DimExpr>>>& lists) {
  std::vector<Var> ins;
  if (data) ins.push_back(*data);
  for (const auto& [prop, exprs] : lists)
    props[prop] = dim_exprs_to_string(im.to_node_inputs(exprs, ins));
  std::vector<Variable*> vars;
  for (const Var& v : ins) vars.push_back(v.var());
  Node* node = im.graph().add_node(OpRegistry::instance().create(name, props), vars);
  return Var(&im.graph(), node->outputs[0]);
}

Var reshape_symbolic(OnnxImporter& im, Var x, const SymValue& target, bool allowzero) {
  const int xs = im.sym_source(x.var());
  const auto& xd = x.type().dims;
  auto x_dim = [&](size_t k) {
    return xd[k] == kDynamic ? DimExpr::dim(xs, static_cast<int>(k)) : DimExpr::constant(xd[k]);
  };
  // ONNX's 0 (copy the input's dimension) and -1 (infer one) first become expressions.
  std::vector<DimExpr> dims;
  int inferred = -1;
  for (size_t i = 0; i < target.elems.size(); ++i) {
    DimExpr e = target.elems[i];
    if (e.value() == 0 && !allowzero) {
      if (i >= xd.size())
        throw UserError("shape entry " + std::to_string(i) + " is 0 (copy) but the input " +
                        x.type().to_string() + " has no such dimension");
      e = x_dim(i);
    } else if (e.value() == -1) {
      if (inferred >= 0) throw UserError("the shape has more than one -1");
      inferred = static_cast<int>(i);
    }
    dims.push_back(e);
  }
  // The plain reshape when at most one entry is not a constant or the input's own dimension
  // at the same place (that one is inferred).
  Ints plain;
  int unresolved = inferred;
  bool fits = true;
  for (size_t i = 0; i < dims.size() && fits; ++i) {
    if (static_cast<int>(i) == inferred) {
      plain.push_back(-1);
    } else if (auto v = dims[i].value(); v && *v > 0) {
      plain.push_back(*v);
    } else if (i < xd.size() && dims[i] == x_dim(i)) {
      plain.push_back(0);
    } else if (unresolved < 0 && !dims[i].value()) {
      unresolved = static_cast<int>(i);
      plain.push_back(-1);
    } else {
      fits = false;
    }
  }
  if (fits) return reshape(x, plain);
  if (inferred >= 0) {
    DimExpr numel = DimExpr::constant(1), rest = DimExpr::constant(1);
    for (size_t k = 0; k < xd.size(); ++k) numel = DimExpr::binary('*', numel, x_dim(k));
    for (size_t i = 0; i < dims.size(); ++i) {
      if (static_cast<int>(i) != inferred) rest = DimExpr::binary('*', rest, dims[i]);
    }
    dims[static_cast<size_t>(inferred)] = DimExpr::binary('/', numel, rest);
  }
  return apply_with_dims(im, "reshape", x, {}, {{"dims", dims}});
}

Var expand_symbolic(OnnxImporter& im, Var x, const SymValue& target) {
  const int xs = im.sym_source(x.var());
  const int lead = static_cast<int>(target.elems.size()) - x.rank();
  std::vector<DimExpr> dims;
  Ints plain;
  bool constant = true;
  for (size_t i = 0; i < target.elems.size(); ++i) {
    DimExpr e = target.elems[i];
    // The input's own dimension at this place broadcasts to itself: 1 says the same.
    const int k = static_cast<int>(i) - lead;
    if (k >= 0 && e.leaf() == std::make_pair(xs, k)) e = DimExpr::constant(1);
    constant = constant && e.value().has_value();
    plain.push_back(e.value().value_or(0));
    dims.push_back(e);
  }
  if (constant) return apply("expand", {x}, {{"shape", plain}});
  return apply_with_dims(im, "expand", x, {}, {{"dims", dims}});
}

// Slice whose starts or ends follow dynamic dimensions; nullopt when axes or steps do too.
std::optional<Var> slice_symbolic(OnnxImporter& im, const onnx::NodeProto& n, Var x) {
  auto starts = im.sym_in(n, 1), ends = im.sym_in(n, 2);
  if (!starts || !ends) return std::nullopt;
  Attrs p;
  if (OnnxImporter::has_input(n, 3)) p["axes"] = im.const_ints(n, 3, "axes");
  if (OnnxImporter::has_input(n, 4)) p["steps"] = im.const_ints(n, 4, "steps");
  const int xs = im.sym_source(x.var());
  auto axes = p.count("axes") ? attr_ints(p, "axes") : Ints{};
  auto steps = p.count("steps") ? attr_ints(p, "steps") : Ints{};
  auto bounds = [&](const SymValue& v, bool is_end) {
    std::vector<DimExpr> out;
    for (size_t i = 0; i < v.elems.size(); ++i) {
      const DimExpr& e = v.elems[i];
      const int64_t axis = axes.empty() ? static_cast<int64_t>(i) : rank_axis(axes.at(i), x.rank());
      const int64_t step = steps.empty() ? 1 : steps.at(i);
      // An end at the axis' own size is the end of the axis.
      if (is_end && step > 0 && e.leaf() == std::make_pair(xs, static_cast<int>(axis))) {
        out.push_back(DimExpr::constant(int64_t{1} << 62));
      } else {
        out.push_back(e.value() ? DimExpr::constant(clamp_bound(*e.value())) : e);
      }
    }
    return out;
  };
  return apply_with_dims(
      im, "slice", x, p,
      {{"starts_dims", bounds(*starts, false)}, {"ends_dims", bounds(*ends, true)}});
}

// A known or symbolic integral scalar for Range (a float value must be a whole number).
std::optional<DimExpr> range_bound(OnnxImporter& im, const onnx::NodeProto& n, int i) {
  if (const Tensor* t = im.known(n.input(i)); t && t->numel() == 1) {
    const double v = t->load(0);
    if (v != std::floor(v) || std::abs(v) > 1e15) return std::nullopt;
    return DimExpr::constant(static_cast<int64_t>(v));
  }
  if (const SymValue* s = im.sym(n.input(i)); s && s->elems.size() == 1) return s->elems[0];
  return std::nullopt;
}

OnnxOpSpec elementwise(const std::string& op, std::vector<std::string> attrs = {}) {
  return {attrs, nullptr, [op](OnnxImporter& im, const onnx::NodeProto& n, const Attrs& a) {
            std::vector<Var> ins;
            for (int i = 0; i < n.input_size(); ++i) ins.push_back(im.in(n, i));
            return Outs{apply(op, ins, a)};
          }};
}

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

Var scalar_like(Var x, double v) { return scalar(x.graph(), x.dtype(), v); }

// Axes of a Reduce*: attribute before opset 13 (18 for all but ReduceSum), input after.
Ints reduce_axes(OnnxImporter& im, const onnx::NodeProto& n, const Attrs& a) {
  if (OnnxImporter::has_input(n, 1)) return im.const_ints(n, 1, "axes");
  return attr_ints(a, "axes", Ints{});
}

OnnxOpSpec reduction(const std::string& kind) {
  return {{"axes", "keepdims", "noop_with_empty_axes"},
          nullptr,
          [kind](OnnxImporter& im, const onnx::NodeProto& n, const Attrs& a) {
            Var x = im.in(n, 0);
            Ints axes = reduce_axes(im, n, a);
            const bool keep = attr_int(a, "keepdims", 1) != 0;
            if (axes.empty() && attr_int(a, "noop_with_empty_axes", 0) != 0) {
              return Outs{reshape(x, Ints(static_cast<size_t>(x.rank()), 0))};
            }
            if (axes.empty()) {
              for (int d = 0; d < x.rank(); ++d) axes.push_back(d);
            }
            auto red = [&](const std::string& op, Var v) {
              return apply(op, {v}, {{"axes", axes}, {"keepdims", int64_t{keep}}});
            };
            if (kind == "L1") return Outs{red("reduce_sum", abs(x))};
            if (kind == "L2") return Outs{sqrt(red("reduce_sum", x * x))};
            if (kind == "SumSquare") return Outs{red("reduce_sum", x * x)};
            if (kind == "LogSum") return Outs{log(red("reduce_sum", x))};
            if (kind == "LogSumExp") {
              Var m = apply("reduce_max", {x}, {{"axes", axes}, {"keepdims", int64_t{1}}});
              Var s = log(apply("reduce_sum", {exp(x - m)},
                                {{"axes", axes}, {"keepdims", int64_t{1}}})) +
                      m;
              return Outs{
                  keep ? s : apply("reduce_sum", {s}, {{"axes", axes}, {"keepdims", int64_t{0}}})};
            }
            return Outs{red(kind, x)};
          }};
}

Ints static_dims(const TensorType& t, const std::string& what) {
  for (int64_t d : t.dims) {
    if (d == kDynamic)
      throw UnsupportedError(what + " needs static dimensions, got " + t.to_string());
  }
  return t.dims;
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

Outs softmax_like(OnnxImporter& im, const onnx::NodeProto& n, const Attrs& a, bool log) {
  Var x = im.in(n, 0);
  const std::string op = log ? "log_softmax" : "softmax";
  if (im.opset() >= 13) return Outs{apply(op, {x}, {{"axis", attr_int(a, "axis", -1)}})};
  // Before opset 13 the input is coerced to 2-D at `axis` and normalised per row.
  const int axis = static_cast<int>(rank_axis(attr_int(a, "axis", 1), x.rank()));
  if (axis == x.rank() - 1) return Outs{apply(op, {x}, {{"axis", int64_t{-1}}})};
  Var y = apply(op, {flatten(x, axis)}, {{"axis", int64_t{1}}});
  std::vector<int> src(static_cast<size_t>(x.rank()), -1);
  return Outs{reshape_to(y, x.type().dims, src)};
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

Outs convert_slice(OnnxImporter& im, const onnx::NodeProto& n, const Attrs& a) {
  Var x = im.in(n, 0);
  if (im.opset() >= 10 && (symbolic_in(im, n, 1) || symbolic_in(im, n, 2))) {
    if (auto y = slice_symbolic(im, n, x)) return Outs{*y};
  }
  Attrs p;
  if (im.opset() < 10) {
    p["starts"] = attr_ints(a, "starts");
    p["ends"] = attr_ints(a, "ends");
    if (a.count("axes")) p["axes"] = attr_ints(a, "axes");
  } else {
    p["starts"] = im.const_ints(n, 1, "starts");
    p["ends"] = im.const_ints(n, 2, "ends");
    if (OnnxImporter::has_input(n, 3)) p["axes"] = im.const_ints(n, 3, "axes");
    if (OnnxImporter::has_input(n, 4)) p["steps"] = im.const_ints(n, 4, "steps");
  }
  return Outs{apply("slice", {x}, p)};
}

Outs convert_split(OnnxImporter& im, const onnx::NodeProto& n, const Attrs& a) {
  Var x = im.in(n, 0);
  const int64_t axis = rank_axis(attr_int(a, "axis", 0), x.rank());
  const int64_t dim = x.type().dims[static_cast<size_t>(axis)];
  Ints split =
      OnnxImporter::has_input(n, 1) ? im.const_ints(n, 1, "split") : attr_ints(a, "split", Ints{});
  const int64_t parts = n.output_size();
  if (split.empty()) {
    if (dim == kDynamic)
      throw UnsupportedError("Split into equal parts needs a static dimension, got " +
                             x.type().to_string());
    const int64_t each = (dim + parts - 1) / parts;  // the last part may be smaller
    for (int64_t i = 0; i < parts; ++i) split.push_back(std::min(each, dim - i * each));
  }
  if (static_cast<int64_t>(split.size()) != parts) {
    throw UserError("split has " + std::to_string(split.size()) + " sizes for " +
                    std::to_string(parts) + " outputs");
  }
  Outs outs;
  int64_t start = 0;
  for (int64_t s : split) {
    int64_t end = 0;
    // A crafted size must not overflow the running sum (libFuzzer found this).
    if (s < 0 || __builtin_add_overflow(start, s, &end))
      throw UserError("split size " + std::to_string(s) + " is negative or too large");
    outs.push_back(
        apply("slice", {x}, {{"starts", Ints{start}}, {"ends", Ints{end}}, {"axes", Ints{axis}}}));
    start = end;
  }
  if (dim != kDynamic && start != dim) {
    throw UserError("split sizes add up to " + std::to_string(start) + ", the axis has " +
                    std::to_string(dim));
  }
  return outs;
}

Outs convert_squeeze(OnnxImporter& im, const onnx::NodeProto& n, const Attrs& a) {
  Var x = im.in(n, 0);
  Ints axes =
      OnnxImporter::has_input(n, 1) ? im.const_ints(n, 1, "axes") : attr_ints(a, "axes", Ints{});
  const auto& dims = x.type().dims;
  std::vector<bool> drop(dims.size(), false);
  for (int64_t ax : axes) {
    auto d = static_cast<size_t>(rank_axis(ax, x.rank()));
    if (dims[d] != 1 && dims[d] != kDynamic) {
      throw UserError("cannot squeeze axis " + std::to_string(ax) + " of " + x.type().to_string() +
                      " (size is not 1)");
    }
    drop[d] = true;
  }
  if (axes.empty()) {
    static_dims(x.type(), "Squeeze without axes");
    for (size_t d = 0; d < dims.size(); ++d) drop[d] = dims[d] == 1;
  }
  Ints out;
  std::vector<int> src;
  for (size_t d = 0; d < dims.size(); ++d) {
    if (drop[d]) continue;
    out.push_back(dims[d]);
    src.push_back(static_cast<int>(d));
  }
  return Outs{reshape_to(x, out, src)};
}

Outs convert_unsqueeze(OnnxImporter& im, const onnx::NodeProto& n, const Attrs& a) {
  Var x = im.in(n, 0);
  Ints axes = OnnxImporter::has_input(n, 1) ? im.const_ints(n, 1, "axes") : attr_ints(a, "axes");
  const int out_rank = x.rank() + static_cast<int>(axes.size());
  std::vector<bool> added(static_cast<size_t>(out_rank), false);
  for (int64_t ax : axes) {
    auto d = static_cast<size_t>(rank_axis(ax, out_rank));
    if (added[d]) throw UserError("axis " + std::to_string(ax) + " given twice");
    added[d] = true;
  }
  Ints out;
  std::vector<int> src;
  int k = 0;
  for (int d = 0; d < out_rank; ++d) {
    if (added[static_cast<size_t>(d)]) {
      out.push_back(1);
      src.push_back(-1);
    } else {
      out.push_back(x.type().dims[static_cast<size_t>(k)]);
      src.push_back(k++);
    }
  }
  return Outs{reshape_to(x, out, src)};
}

Outs convert_reshape(OnnxImporter& im, const onnx::NodeProto& n, const Attrs& a) {
  Var x = im.in(n, 0);
  if (auto target = im.opset() >= 5 ? symbolic_in(im, n, 1) : std::nullopt)
    return Outs{reshape_symbolic(im, x, *target, attr_int(a, "allowzero", 0) != 0)};
  Ints shape = im.opset() < 5 ? attr_ints(a, "shape") : im.const_ints(n, 1, "shape");
  if (attr_int(a, "allowzero", 0) != 0 && std::count(shape.begin(), shape.end(), 0) > 0) {
    throw UnsupportedError("Reshape with allowzero=1 and a 0 in the shape");
  }
  return Outs{reshape(x, shape)};
}

Outs convert_flatten(OnnxImporter& im, const onnx::NodeProto& n, const Attrs& a) {
  Var x = im.in(n, 0);
  int64_t axis = attr_int(a, "axis", 1);
  if (axis < 0) axis += x.rank();
  return Outs{flatten(x, axis)};
}

Outs convert_gemm(OnnxImporter& im, const onnx::NodeProto& n, const Attrs& a) {
  std::vector<Var> ins{im.in(n, 0), im.in(n, 1)};
  if (OnnxImporter::has_input(n, 2)) ins.push_back(im.in(n, 2));
  Attrs p{{"alpha", attr_float(a, "alpha", 1.0)},
          {"beta", attr_float(a, "beta", 1.0)},
          {"transA", attr_int(a, "transA", 0)},
          {"transB", attr_int(a, "transB", 0)}};
  return Outs{apply("gemm", ins, p)};
}

// The window attributes of the spatial dimensions `dims` (indices among the spatial ones),
// with pads resolved (auto_pad and ceil_mode already applied to `w`).
Attrs window_subset(const std::vector<WindowDims>& w, const std::vector<size_t>& dims,
                    bool ceil_mode) {
  Ints kernel, strides, dilations, begin, end;
  for (size_t d : dims) {
    kernel.push_back(w[d].kernel);
    strides.push_back(w[d].stride);
    dilations.push_back(w[d].dilation);
    begin.push_back(w[d].pad_begin);
    end.push_back(w[d].pad_end);
  }
  begin.insert(begin.end(), end.begin(), end.end());
  return {{"kernel_shape", kernel},
          {"strides", strides},
          {"dilations", dilations},
          {"pads", begin},
          {"ceil_mode", int64_t{ceil_mode}}};
}

// 3-D convolution as 2-D ones: for each kernel depth offset, the depth slices it reads
// (zero-padded in depth, strided) fold into the batch, a 2-D convolution with that depth's
// weights runs over them, and the results add up.
Var conv3d(Var x, Var w, std::optional<Var> bias, const Attrs& a) {
  const Ints xd = static_dims(x.type(), "3-D Conv"), wd = static_dims(w.type(), "3-D Conv weights");
  const auto win = resolve_window(WindowAttrs::from_props(a, "conv"), {xd[2], xd[3], xd[4]},
                                  {wd[2], wd[3], wd[4]}, "conv");
  const int64_t N = xd[0], C = xd[1], M = wd[0], Dout = win[0].out, Hout = win[1].out,
                Wout = win[2].out;
  Attrs p2 = window_subset(win, {1, 2}, false);
  p2.erase("ceil_mode");
  p2["group"] = attr_int(a, "group", 1);
  Var xp =
      apply("pad", {x}, {{"pads", Ints{0, 0, win[0].pad_begin, 0, 0, 0, 0, win[0].pad_end, 0, 0}}});
  std::optional<Var> acc;
  for (int64_t kd = 0; kd < wd[2]; ++kd) {
    const int64_t start = kd * win[0].dilation;
    Var xs = apply("slice", {xp},
                   {{"starts", Ints{start}},
                    {"ends", Ints{start + (Dout - 1) * win[0].stride + 1}},
                    {"axes", Ints{2}},
                    {"steps", Ints{win[0].stride}}});
    Var x2 = reshape(transpose(xs, {0, 2, 1, 3, 4}), {N * Dout, C, xd[3], xd[4]});
    Var w2 = reshape(
        apply("slice", {w}, {{"starts", Ints{kd}}, {"ends", Ints{kd + 1}}, {"axes", Ints{2}}}),
        {M, wd[1], wd[3], wd[4]});
    Var y2 = apply("conv", {x2, w2}, p2);
    acc = acc ? *acc + y2 : y2;
  }
  Var y = transpose(reshape(*acc, {N, Dout, M, Hout, Wout}), {0, 2, 1, 3, 4});
  if (bias) y = y + reshape(*bias, {1, M, 1, 1, 1});
  return y;
}

Outs convert_conv(OnnxImporter& im, const onnx::NodeProto& n, const Attrs& a) {
  std::vector<Var> ins{im.in(n, 0), im.in(n, 1)};
  if (OnnxImporter::has_input(n, 2)) ins.push_back(im.in(n, 2));
  if (ins[0].rank() == 5) {
    return Outs{
        conv3d(ins[0], ins[1], ins.size() > 2 ? std::optional<Var>(ins[2]) : std::nullopt, a)};
  }
  return Outs{apply("conv", ins, a)};
}

// 3-D pooling as a 2-D pool over (H, W) then a 1-D pool over D: max and average windows are
// boxes, so both separate (an average's count of real elements is the product of each
// dimension's count, whether or not pads count).
Var pool3d(Var x, const Attrs& a, bool is_max) {
  const Ints xd = static_dims(x.type(), "3-D pooling");
  const WindowAttrs wa = WindowAttrs::from_props(a, is_max ? "max_pool" : "average_pool");
  const auto win = resolve_window(wa, {xd[2], xd[3], xd[4]}, wa.kernel, "pool");
  const int64_t N = xd[0], C = xd[1], D = xd[2];
  const std::string op = is_max ? "max_pool" : "average_pool";
  Attrs hw = window_subset(win, {1, 2}, wa.ceil_mode), dd = window_subset(win, {0}, wa.ceil_mode);
  if (!is_max) {
    hw["count_include_pad"] = attr_int(a, "count_include_pad", 0);
    dd["count_include_pad"] = attr_int(a, "count_include_pad", 0);
  }
  const int64_t Ho = win[1].out, Wo = win[2].out, Do = win[0].out;
  Var y = apply(op, {reshape(x, {N, C * D, xd[3], xd[4]})}, hw);
  y = reshape(transpose(reshape(y, {N, C, D, Ho * Wo}), {0, 1, 3, 2}), {N, C * Ho * Wo, D});
  y = apply(op, {y}, dd);
  return transpose(reshape(y, {N, C, Ho, Wo, Do}), {0, 1, 4, 2, 3});
}

Outs convert_pool(OnnxImporter& im, const onnx::NodeProto& n, const Attrs& a, bool is_max) {
  Attrs p = a;
  p.erase("storage_order");
  Var x = im.in(n, 0);
  if (x.rank() == 5) return Outs{pool3d(x, p, is_max)};
  return Outs{apply(is_max ? "max_pool" : "average_pool", {x}, p)};
}

Outs convert_global_pool(OnnxImporter& im, const onnx::NodeProto& n, bool is_max) {
  Var x = im.in(n, 0);
  Ints axes;
  for (int d = 2; d < x.rank(); ++d) axes.push_back(d);
  return Outs{apply(is_max ? "reduce_max" : "reduce_mean", {x},
                    {{"axes", axes}, {"keepdims", int64_t{1}}})};
}

// Per-channel parameter of shape (C) broadcast against (N, C, d1, ...).
Var per_channel(Var p, int rank) {
  Ints shape{-1};
  for (int d = 2; d < rank; ++d) shape.push_back(1);
  return reshape(p, shape);
}

Outs convert_batch_norm(OnnxImporter& im, const onnx::NodeProto& n, const Attrs& a) {
  Var x = im.in(n, 0);
  const double eps = attr_float(a, "epsilon", 1e-5);
  Var scale = im.in(n, 1), bias = im.in(n, 2), mean_v = im.in(n, 3), var_v = im.in(n, 4);
  // y = x * k + (b - mean * k), k = scale / sqrt(var + eps): two per-channel vectors.
  Var k = scale / sqrt(var_v + eps);
  Var shift = bias - mean_v * k;
  if (x.rank() < 2) return Outs{x * k + shift};
  return Outs{x * per_channel(k, x.rank()) + per_channel(shift, x.rank())};
}

Outs convert_layer_norm(OnnxImporter& im, const onnx::NodeProto& n, const Attrs& a) {
  Var x = im.in(n, 0);
  const int axis = static_cast<int>(rank_axis(attr_int(a, "axis", -1), x.rank()));
  const double eps = attr_float(a, "epsilon", 1e-5);
  Ints axes;
  for (int d = axis; d < x.rank(); ++d) axes.push_back(d);
  Var mean_v = mean(x, axes, true);
  Var d = x - mean_v;
  Var inv = reciprocal(sqrt(mean(d * d, axes, true) + eps));
  Var y = d * inv * im.in(n, 1);
  if (OnnxImporter::has_input(n, 2)) y = y + im.in(n, 2);
  return Outs{y, mean_v, inv};
}

Outs convert_pad(OnnxImporter& im, const onnx::NodeProto& n, const Attrs& a) {
  Var x = im.in(n, 0);
  Ints pads;
  double value = 0;
  if (im.opset() < 11) {
    pads = attr_ints(a, "pads");
    value = attr_float(a, "value", 0.0);
  } else {
    pads = im.const_ints(n, 1, "pads");
    if (OnnxImporter::has_input(n, 2)) {
      const Tensor& v = im.const_in(n, 2, "constant_value");
      if (v.numel() != 1)
        throw UserError("constant_value must hold one value, got " + v.describe());
      value = v.load(0);
    }
    if (OnnxImporter::has_input(n, 3)) throw UnsupportedError("Pad with an axes input");
  }
  return Outs{apply("pad", {x}, {{"pads", pads}, {"value", value}})};
}

Outs convert_shape(OnnxImporter& im, const onnx::NodeProto& n, const Attrs& a) {
  TensorType t = im.type_of(n, 0);
  const int64_t r = t.rank();
  int64_t start = attr_int(a, "start", 0), end = attr_int(a, "end", r);
  if (start < 0) start += r;
  if (end < 0) end += r;
  start = std::clamp<int64_t>(start, 0, r);
  end = std::clamp<int64_t>(end, start, r);
  Ints dims(t.dims.begin() + start, t.dims.begin() + end);
  for (int64_t d : dims) {
    if (d == kDynamic)
      throw UnsupportedError("Shape of " + t.to_string() +
                             ": a dynamic dimension is not known at load time");
  }
  Tensor v = Tensor::empty(DType::kInt64, {static_cast<int64_t>(dims.size())});
  for (size_t i = 0; i < dims.size(); ++i) v.store_int(static_cast<int64_t>(i), dims[i]);
  return Outs{constant(im.graph(), v)};
}

Outs convert_size(OnnxImporter& im, const onnx::NodeProto& n, const Attrs&) {
  TensorType t = im.type_of(n, 0);
  int64_t size = 1;
  for (int64_t d : static_dims(t, "Size")) size *= d;
  Tensor v = Tensor::empty(DType::kInt64, {});
  v.store_int(0, size);
  return Outs{constant(im.graph(), v)};
}

Outs convert_constant(OnnxImporter& im, const onnx::NodeProto& n, const Attrs& a) {
  if (const auto* t = tensor_attr(n, "value"); t && t->has_t()) {
    return Outs{constant(im.graph(), tensor_from_onnx(t->t(), {}, "attribute 'value'"))};
  }
  auto make = [&](DType dt, Shape shape, const std::vector<double>& vals) {
    return Outs{constant(im.graph(), Tensor::from_doubles(dt, std::move(shape), vals))};
  };
  if (a.count("value_float")) return make(DType::kFloat32, {}, {attr_float(a, "value_float")});
  if (a.count("value_floats")) {
    auto v = std::get<std::vector<double>>(a.at("value_floats"));
    return make(DType::kFloat32, {static_cast<int64_t>(v.size())}, v);
  }
  if (a.count("value_int")) {
    Tensor t = Tensor::empty(DType::kInt64, {});
    t.store_int(0, attr_int(a, "value_int"));
    return Outs{constant(im.graph(), t)};
  }
  if (a.count("value_ints")) {
    Ints v = attr_ints(a, "value_ints");
    Tensor t = Tensor::empty(DType::kInt64, {static_cast<int64_t>(v.size())});
    for (size_t i = 0; i < v.size(); ++i) t.store_int(static_cast<int64_t>(i), v[i]);
    return Outs{constant(im.graph(), t)};
  }
  throw UnsupportedError("Constant without a value, value_float(s) or value_int(s) attribute");
}

Outs convert_constant_of_shape(OnnxImporter& im, const onnx::NodeProto& n, const Attrs&) {
  Tensor fill = Tensor::zeros(DType::kFloat32, {1});
  if (const auto* t = tensor_attr(n, "value"); t && t->has_t())
    fill = tensor_from_onnx(t->t(), {}, "attribute 'value'");
  if (fill.numel() != 1)
    throw UserError("attribute 'value' must hold one element, got " + fill.describe());
  if (auto shape = symbolic_in(im, n, 0)) {
    if (fill.dtype() == DType::kBool)
      throw UnsupportedError("ConstantOfShape of booleans with a dynamic shape");
    return Outs{
        apply_with_dims(im, "fill", std::nullopt,
                        {{"value", fill.load(0)}, {"dtype", std::string(dtype_name(fill.dtype()))}},
                        {{"dims", shape->elems}})};
  }
  Ints shape = im.const_ints(n, 0, "shape");
  Tensor out = Tensor::empty(fill.dtype(), shape);
  for (int64_t i = 0; i < out.numel(); ++i) {
    if (is_float(fill.dtype())) {
      out.store(i, fill.load(0));
    } else {
      out.store_int(i, fill.load_int(0));
    }
  }
  return Outs{constant(im.graph(), out)};
}

Outs convert_range(OnnxImporter& im, const onnx::NodeProto& n, const Attrs&) {
  if (symbolic_in(im, n, 0) || symbolic_in(im, n, 1) || symbolic_in(im, n, 2)) {
    auto start = range_bound(im, n, 0), limit = range_bound(im, n, 1),
         delta = range_bound(im, n, 2);
    if (start && limit && delta) {
      if (delta->value() == 0) throw UserError("Range with delta 0");
      const DType dt = im.type_of(n, 0).dtype;
      if (dt == DType::kBool) throw UserError("Range of booleans");
      return Outs{apply_with_dims(im, "arange", std::nullopt,
                                  {{"dtype", std::string(dtype_name(dt))}},
                                  {{"start", {*start}}, {"limit", {*limit}}, {"delta", {*delta}}})};
    }
  }
  const Tensor& s = im.const_in(n, 0, "start");
  const Tensor& l = im.const_in(n, 1, "limit");
  const Tensor& d = im.const_in(n, 2, "delta");
  const bool fl = is_float(s.dtype());
  const double start = s.load(0), limit = l.load(0), delta = d.load(0);
  if (delta == 0) throw UserError("Range with delta 0");
  const auto count = static_cast<int64_t>(std::max(0.0, std::ceil((limit - start) / delta)));
  Tensor out = Tensor::empty(s.dtype(), {count});
  for (int64_t i = 0; i < count; ++i) {
    if (fl) {
      out.store(i, start + static_cast<double>(i) * delta);
    } else {
      out.store_int(i, s.load_int(0) + i * d.load_int(0));
    }
  }
  return Outs{constant(im.graph(), out)};
}

Outs convert_dropout(OnnxImporter& im, const onnx::NodeProto& n, const Attrs&) {
  if (OnnxImporter::has_input(n, 2)) {
    const Tensor& mode = im.const_in(n, 2, "training_mode");
    // Training mode drops at random, except with ratio 0, where it is the identity.
    if (mode.numel() != 1 || mode.load(0) != 0) {
      const bool zero_ratio = OnnxImporter::has_input(n, 1) &&
                              im.const_in(n, 1, "ratio").numel() == 1 &&
                              im.const_in(n, 1, "ratio").load(0) == 0;
      if (!zero_ratio)
        throw UnsupportedError("Dropout in training mode (random) with a ratio above 0");
    }
  }
  Var x = im.in(n, 0);
  Outs outs{x};
  if (n.output_size() > 1 && !n.output(1).empty()) {
    // Inference: nothing is dropped, the mask is all true.
    Tensor mask = Tensor::empty(DType::kBool, static_dims(x.type(), "Dropout's mask"));
    for (int64_t i = 0; i < mask.numel(); ++i) mask.store_int(i, 1);
    outs.push_back(constant(im.graph(), mask));
  }
  return outs;
}

Outs convert_pow(OnnxImporter& im, const onnx::NodeProto& n, const Attrs&) {
  Var base = im.in(n, 0), e = im.in(n, 1);
  if (base.dtype() == e.dtype()) return Outs{pow(base, e)};
  // Mixed types: the result has the base's type; a float exponent of an integer base is
  // evaluated in floating point.
  if (!is_float(base.dtype()) && is_float(e.dtype()))
    return Outs{cast(pow(cast(base, e.dtype()), e), base.dtype())};
  return Outs{pow(base, cast(e, base.dtype()))};
}

Outs convert_mod(OnnxImporter& im, const onnx::NodeProto& n, const Attrs& a) {
  Var x = im.in(n, 0), y = im.in(n, 1);
  if (attr_int(a, "fmod", 0) == 0) return Outs{mod(x, y)};
  // C fmod: the sign of the dividend. Integer: x - trunc(x / y) * y.
  if (is_float(x.dtype())) return Outs{apply("fmod", {x, y})};
  return Outs{x - div(x, y) * y};
}

// Input x with a dimension of size 1 inserted at `axis` (static or dynamic dimensions).
Var unsqueeze_at(Var x, int axis) {
  Ints dims;
  std::vector<int> src;
  for (int d = 0; d <= x.rank(); ++d) {
    if (d == axis) {
      dims.push_back(1);
      src.push_back(-1);
    }
    if (d < x.rank()) {
      dims.push_back(x.type().dims[static_cast<size_t>(d)]);
      src.push_back(d);
    }
  }
  return reshape_to(x, dims, src);
}

// NegativeLogLikelihoodLoss on log-probabilities x (N, C, d1...) and targets (N, d1...):
// -x[n, t, d...] weighted by weight[t], ignored targets contributing nothing.
Var nll_loss(OnnxImporter& im, Var x, Var target, std::optional<Var> weight, const Attrs& a) {
  if (x.rank() < 2 || target.rank() != x.rank() - 1)
    throw UserError("input " + x.type().to_string() + " and target " + target.type().to_string() +
                    " must be (N, C, d1...) and (N, d1...)");
  const std::string reduction = attr_string(a, "reduction", std::string("mean"));
  if (reduction != "none" && reduction != "sum" && reduction != "mean")
    throw UserError(attr_problem("reduction", reduction, "(none, sum or mean)"));
  std::optional<Var> valid;
  Var t = target;
  if (a.count("ignore_index")) {
    Var ignore =
        scalar(im.graph(), target.dtype(), static_cast<double>(attr_int(a, "ignore_index")));
    valid = ne(target, ignore);
    // An ignored target may be out of range: gather at class 0 instead, then drop it.
    t = where(*valid, target, scalar(im.graph(), target.dtype(), 0));
  }
  Var picked = apply("gather_elements", {x, unsqueeze_at(t, 1)}, {{"axis", int64_t{1}}});
  Ints dims = target.type().dims;
  std::vector<int> src;
  for (int d = 0; d < target.rank(); ++d) src.push_back(d == 0 ? 0 : d + 1);
  Var loss = neg(reshape_to(picked, dims, src));
  std::optional<Var> w;
  if (weight) w = apply("gather", {*weight, t}, {{"axis", int64_t{0}}});
  if (valid) {
    Var zero = scalar_like(loss, 0.0);
    w = where(*valid, w ? *w : scalar_like(loss, 1.0), zero);
  }
  if (w) loss = loss * *w;
  if (reduction == "none") return loss;
  if (reduction == "sum") return sum(loss);
  if (!w) return mean(loss);
  // The mean weighs each element: sum(loss) / sum(weight of each counted target).
  return sum(loss) / sum(*w);
}

Outs convert_nll(OnnxImporter& im, const onnx::NodeProto& n, const Attrs& a) {
  std::optional<Var> weight;
  if (OnnxImporter::has_input(n, 2)) weight = im.in(n, 2);
  return Outs{nll_loss(im, im.in(n, 0), im.in(n, 1), weight, a)};
}

Outs convert_softmax_cross_entropy(OnnxImporter& im, const onnx::NodeProto& n, const Attrs& a) {
  Var scores = im.in(n, 0);
  Var log_prob = apply("log_softmax", {scores}, {{"axis", int64_t{1}}});
  std::optional<Var> weight;
  if (OnnxImporter::has_input(n, 2)) weight = im.in(n, 2);
  return Outs{nll_loss(im, log_prob, im.in(n, 1), weight, a), log_prob};
}

// ONNX's recurrent layers (LSTM, GRU, RNN) as kiln's lstm / gru / rnn op: optional inputs
// filled with zeros, layout 1 transposed to layout 0 and back, activations resolved with
// their alpha / beta (each consumed by an activation that takes one, in order; ONNX's
// operator defaults otherwise).
Outs convert_recurrent(OnnxImporter& im, const onnx::NodeProto& n, const Attrs& a,
                       const std::string& kind) {
  const bool lstm = kind == "lstm";
  const int gates = lstm ? 4 : kind == "gru" ? 3 : 1;
  const std::string direction = attr_string(a, "direction", std::string("forward"));
  const int64_t dirs = direction == "bidirectional" ? 2 : 1;
  const bool batch_first = attr_int(a, "layout", 0) != 0;
  Var x = im.in(n, 0), w = im.in(n, 1), r = im.in(n, 2);
  if (x.rank() != 3 || w.rank() != 3 || r.rank() != 3)
    throw UserError("X, W and R must be 3-D, got " + x.type().to_string() + ", " +
                    w.type().to_string() + ", " + r.type().to_string());
  if (batch_first) x = transpose(x, {1, 0, 2});
  const int64_t hidden = a.count("hidden_size") ? attr_int(a, "hidden_size") : r.type().dims[2];
  if (hidden == kDynamic || hidden < 1) throw UserError("hidden_size must be known and positive");
  // The names as given (case-insensitive), per direction.
  std::vector<std::string> names;
  if (const auto* at = tensor_attr(n, "activations")) {
    for (const auto& v : at->strings()) names.push_back(v);
  }
  const std::vector<std::string> defaults =
      lstm            ? std::vector<std::string>{"Sigmoid", "Tanh", "Tanh"}
      : kind == "gru" ? std::vector<std::string>{"Sigmoid", "Tanh"}
                      : std::vector<std::string>{"Tanh"};
  if (names.empty()) {
    for (int64_t d = 0; d < dirs; ++d) names.insert(names.end(), defaults.begin(), defaults.end());
  }
  const std::vector<double> alphas = a.count("activation_alpha")
                                         ? std::get<std::vector<double>>(a.at("activation_alpha"))
                                         : std::vector<double>{};
  const std::vector<double> betas = a.count("activation_beta")
                                        ? std::get<std::vector<double>>(a.at("activation_beta"))
                                        : std::vector<double>{};
  size_t next_alpha = 0, next_beta = 0;
  std::vector<std::string> canonical;
  std::vector<double> alpha, beta;
  // name -> (takes alpha, default alpha, takes beta, default beta)
  static const std::map<std::string, std::tuple<bool, double, bool, double>> kParams{
      {"Sigmoid", {false, 0, false, 0}},      {"Tanh", {false, 0, false, 0}},
      {"Relu", {false, 0, false, 0}},         {"Affine", {true, 1.0, true, 0.0}},
      {"LeakyRelu", {true, 0.01, false, 0}},  {"ThresholdedRelu", {true, 1.0, false, 0}},
      {"ScaledTanh", {true, 1.0, true, 1.0}}, {"HardSigmoid", {true, 0.2, true, 0.5}},
      {"Elu", {true, 1.0, false, 0}},         {"Softsign", {false, 0, false, 0}},
      {"Softplus", {false, 0, false, 0}}};
  for (const std::string& name : names) {
    auto it = std::find_if(kParams.begin(), kParams.end(), [&](const auto& kv) {
      if (kv.first.size() != name.size()) return false;
      for (size_t i = 0; i < name.size(); ++i) {
        if (std::tolower(static_cast<unsigned char>(kv.first[i])) !=
            std::tolower(static_cast<unsigned char>(name[i])))
          return false;
      }
      return true;
    });
    if (it == kParams.end()) throw UnsupportedError("activation '" + name + "' is not supported");
    const auto& [takes_a, def_a, takes_b, def_b] = it->second;
    canonical.push_back(it->first);
    alpha.push_back(takes_a && next_alpha < alphas.size() ? alphas[next_alpha++] : def_a);
    beta.push_back(takes_b && next_beta < betas.size() ? betas[next_beta++] : def_b);
  }
  const double zero = 0.0;
  auto zeros = [&](Ints dims) {
    return constant(im.graph(), Tensor::zeros(x.dtype(), std::move(dims)));
  };
  // Initial states default to zeros of (dirs, batch, hidden), batch possibly dynamic.
  auto initial_state = [&](int i) -> Var {
    if (OnnxImporter::has_input(n, i)) {
      Var v = im.in(n, i);
      return batch_first ? transpose(v, {1, 0, 2}) : v;
    }
    const int64_t batch = x.type().dims[1];
    if (batch != kDynamic) return zeros({dirs, batch, hidden});
    return apply_with_dims(im, "fill", std::nullopt,
                           {{"value", zero}, {"dtype", std::string(dtype_name(x.dtype()))}},
                           {{"dims",
                             {DimExpr::constant(dirs), DimExpr::dim(im.sym_source(x.var()), 1),
                              DimExpr::constant(hidden)}}});
  };
  std::vector<Var> ins{x, w, r};
  ins.push_back(OnnxImporter::has_input(n, 3) ? im.in(n, 3) : zeros({dirs, 2 * gates * hidden}));
  ins.push_back(initial_state(5));
  if (lstm) {
    ins.push_back(initial_state(6));
    ins.push_back(OnnxImporter::has_input(n, 7) ? im.in(n, 7) : zeros({dirs, 3 * hidden}));
  }
  const bool has_lens = OnnxImporter::has_input(n, 4);
  if (has_lens) ins.push_back(cast(im.in(n, 4), DType::kInt32));
  Attrs p{{"hidden_size", hidden},
          {"direction", direction},
          {"activations", join(canonical, ",")},
          {"activation_alpha", alpha},
          {"activation_beta", beta},
          {"clip", attr_float(a, "clip", 0.0)},
          {"has_lens", int64_t{has_lens}}};
  if (lstm) p["input_forget"] = attr_int(a, "input_forget", 0);
  if (kind == "gru") p["linear_before_reset"] = attr_int(a, "linear_before_reset", 0);
  std::vector<Variable*> vars;
  for (const Var& v : ins) vars.push_back(v.var());
  Node* node = im.graph().add_node(OpRegistry::instance().create(kind, p), vars);
  Outs outs;
  for (Variable* v : node->outputs) outs.push_back(Var(&im.graph(), v));
  if (batch_first) {
    outs[0] = transpose(outs[0], {2, 0, 1, 3});
    for (size_t k = 1; k < outs.size(); ++k) outs[k] = transpose(outs[k], {1, 0, 2});
  }
  return outs;
}

// ---- Composites of kiln ops --------------------------------------------------------------

// A constant tensor of `shape` whose element at `at` (row-major coordinates) is f(at).
Var index_constant(Graph& g, DType dt, const Ints& shape,
                   const std::function<double(const Ints&)>& f) {
  Tensor t = Tensor::empty(dt, shape);
  Ints at(shape.size(), 0);
  for (int64_t i = 0; i < t.numel(); ++i) {
    t.store(i, f(at));
    for (size_t d = at.size(); d-- > 0;) {
      if (++at[d] < shape[d]) break;
      at[d] = 0;
    }
  }
  return constant(g, t);
}

// Trilu: the upper (j - i >= k) or lower (j - i <= k) triangle of the last two dimensions.
Outs convert_trilu(OnnxImporter& im, const onnx::NodeProto& n, const Attrs& a) {
  Var x = im.in(n, 0);
  const int64_t k = OnnxImporter::has_input(n, 1) ? im.const_ints(n, 1, "k").at(0) : 0;
  const bool upper = attr_int(a, "upper", 1) != 0;
  if (x.rank() < 2) throw UserError("Trilu needs rank >= 2, got " + x.type().to_string());
  const int64_t rows = x.type().dims[static_cast<size_t>(x.rank() - 2)];
  const int64_t cols = x.type().dims[static_cast<size_t>(x.rank() - 1)];
  if (rows == kDynamic || cols == kDynamic)
    throw UnsupportedError("Trilu over dynamic matrix dimensions " + x.type().to_string());
  Var keep = index_constant(im.graph(), DType::kBool, {rows, cols}, [&](const Ints& at) {
    const int64_t diff = at[1] - at[0];
    return upper ? diff >= k : diff <= k;
  });
  return Outs{where(keep, x, scalar_like(x, 0.0))};
}

// Hardmax: 1 where the first maximum along axis is, 0 elsewhere.
Outs convert_hardmax(OnnxImporter& im, const onnx::NodeProto& n, const Attrs& a) {
  Var x = im.in(n, 0);
  const int axis =
      static_cast<int>(rank_axis(attr_int(a, "axis", im.opset() >= 13 ? -1 : 1), x.rank()));
  if (im.opset() < 13) throw UnsupportedError("Hardmax before opset 13 (2-D coercion)");
  const int64_t len = x.type().dims[static_cast<size_t>(axis)];
  if (len == kDynamic) throw UnsupportedError("Hardmax over a dynamic axis");
  Var idx = apply("arg_max", {x}, {{"axis", int64_t{axis}}, {"keepdims", int64_t{1}}});
  Ints shape(static_cast<size_t>(x.rank()), 1);
  shape[static_cast<size_t>(axis)] = len;
  Var iota = index_constant(im.graph(), DType::kInt64, shape, [&](const Ints& at) {
    return static_cast<double>(at[static_cast<size_t>(axis)]);
  });
  return Outs{cast(eq(iota, idx), x.dtype())};
}

// OneHot(indices, depth, values): values[1] where the index (negative from the end) is the
// position along the new axis, values[0] elsewhere.
Outs convert_one_hot(OnnxImporter& im, const onnx::NodeProto& n, const Attrs& a) {
  Var idx = im.in(n, 0);
  const Tensor& depth_t = im.const_in(n, 1, "depth");
  if (depth_t.numel() != 1) throw UserError("depth must hold one value, got " + depth_t.describe());
  const auto depth = static_cast<int64_t>(depth_t.load(0));
  if (depth < 1) throw UserError("depth must be at least 1, got " + std::to_string(depth));
  Var values = im.in(n, 2);
  const int out_rank = idx.rank() + 1;
  const int axis = static_cast<int>(rank_axis(attr_int(a, "axis", -1), out_rank));
  Var i = is_float(idx.dtype()) ? cast(floor(idx), DType::kInt64) : cast(idx, DType::kInt64);
  i = where(lt(i, scalar(im.graph(), DType::kInt64, 0)),
            i + scalar(im.graph(), DType::kInt64, static_cast<double>(depth)), i);
  Var ie = unsqueeze_at(i, axis);
  Ints shape(static_cast<size_t>(out_rank), 1);
  shape[static_cast<size_t>(axis)] = depth;
  Var iota = index_constant(im.graph(), DType::kInt64, shape, [&](const Ints& at) {
    return static_cast<double>(at[static_cast<size_t>(axis)]);
  });
  Var off = apply("slice", {values}, {{"starts", Ints{0}}, {"ends", Ints{1}}});
  Var on = apply("slice", {values}, {{"starts", Ints{1}}, {"ends", Ints{2}}});
  return Outs{where(eq(iota, ie), reshape(on, {}), reshape(off, {}))};
}

// DepthToSpace / SpaceToDepth: reshape, transpose, reshape (static dimensions).
Outs convert_depth_space(OnnxImporter& im, const onnx::NodeProto& n, const Attrs& a,
                         bool to_space) {
  Var x = im.in(n, 0);
  const Ints d = static_dims(x.type(), n.op_type());
  if (d.size() != 4)
    throw UserError(n.op_type() + " needs (N, C, H, W), got " + x.type().to_string());
  const int64_t b = attr_int(a, "blocksize");
  if (b < 1) throw UserError("blocksize must be at least 1");
  const int64_t N = d[0], C = d[1], H = d[2], W = d[3];
  if (to_space) {
    if (C % (b * b) != 0)
      throw UserError("channels " + std::to_string(C) + " do not divide by blocksize^2");
    const bool crd = attr_string(a, "mode", std::string("DCR")) == "CRD";
    Var t = crd ? transpose(reshape(x, {N, C / (b * b), b, b, H, W}), {0, 1, 4, 2, 5, 3})
                : transpose(reshape(x, {N, b, b, C / (b * b), H, W}), {0, 3, 4, 1, 5, 2});
    return Outs{reshape(t, {N, C / (b * b), H * b, W * b})};
  }
  if (H % b != 0 || W % b != 0) throw UserError("height and width must divide by blocksize");
  Var t = transpose(reshape(x, {N, C, H / b, b, W / b, b}), {0, 3, 5, 1, 2, 4});
  return Outs{reshape(t, {N, C * b * b, H / b, W / b})};
}

// Tile: each axis i repeated r_i times, as an expand over a new axis before it.
Outs convert_tile(OnnxImporter& im, const onnx::NodeProto& n, const Attrs&) {
  Var x = im.in(n, 0);
  const Ints reps = im.const_ints(n, 1, "repeats");
  const Ints d = static_dims(x.type(), "Tile");
  if (reps.size() != d.size())
    throw UserError("repeats has " + std::to_string(reps.size()) + " values for rank " +
                    std::to_string(d.size()));
  Ints split, wide, out;
  for (size_t i = 0; i < d.size(); ++i) {
    if (reps[i] < 0) throw UserError("repeats must not be negative");
    split.push_back(1);
    split.push_back(d[i]);
    wide.push_back(reps[i]);
    wide.push_back(d[i]);
    out.push_back(reps[i] * d[i]);
  }
  if (std::count(out.begin(), out.end(), 0) > 0) {
    return Outs{constant(im.graph(), Tensor::zeros(x.dtype(), out))};
  }
  return Outs{reshape(apply("expand", {reshape(x, split)}, {{"shape", wide}}), out)};
}

// EyeLike: ones on the k-th diagonal of a static 2-D shape.
Outs convert_eye_like(OnnxImporter& im, const onnx::NodeProto& n, const Attrs& a) {
  const TensorType t = im.type_of(n, 0);
  const Ints d = static_dims(t, "EyeLike");
  if (d.size() != 2) throw UserError("EyeLike needs a 2-D input, got " + t.to_string());
  DType dt = t.dtype;
  if (a.count("dtype")) {
    auto to = dtype_from_onnx(static_cast<int>(attr_int(a, "dtype")));
    if (!to)
      throw UnsupportedError("EyeLike dtype " +
                             onnx_dtype_name(static_cast<int>(attr_int(a, "dtype"))));
    dt = *to;
  }
  const int64_t k = attr_int(a, "k", 0);
  Tensor eye = Tensor::zeros(dt, d);
  for (int64_t i = 0; i < d[0]; ++i) {
    if (i + k >= 0 && i + k < d[1]) eye.store(i * d[1] + i + k, 1.0);
  }
  return Outs{constant(im.graph(), eye)};
}

// Einsum with one or two operands, as transposes, sums and one batched matmul: the
// operands' letters sort into batch (both and the output), contracted (both, not the
// output), and kept-from-one-side; letters only one operand has and the output lacks are
// summed first. "..." stands for the leading dimensions. Static dimensions; a letter
// repeated within one operand (a diagonal) is refused.
Outs convert_einsum(OnnxImporter& im, const onnx::NodeProto& n, const Attrs& a) {
  std::string eq;
  for (char c : attr_string(a, "equation")) {
    if (c != ' ') eq += c;
  }
  std::vector<Var> ops;
  for (int i = 0; i < n.input_size(); ++i) ops.push_back(im.in(n, i));
  if (ops.empty() || ops.size() > 2)
    throw UnsupportedError("Einsum with " + std::to_string(ops.size()) + " operands");
  const size_t arrow = eq.find("->");
  std::vector<std::string> terms;
  {
    const std::string lhs = eq.substr(0, arrow);
    size_t start = 0;
    for (;;) {
      const size_t comma = lhs.find(',', start);
      terms.push_back(
          lhs.substr(start, comma == std::string::npos ? std::string::npos : comma - start));
      if (comma == std::string::npos) break;
      start = comma + 1;
    }
  }
  if (terms.size() != ops.size())
    throw UserError("equation '" + eq + "' has " + std::to_string(terms.size()) + " terms for " +
                    std::to_string(ops.size()) + " inputs");
  // "..." becomes upper-case letters, aligned from the right across operands.
  int ell = 0;
  for (size_t i = 0; i < terms.size(); ++i) {
    if (terms[i].find("...") != std::string::npos)
      ell = std::max(ell, ops[i].rank() - static_cast<int>(terms[i].size()) + 3);
  }
  auto expand_ellipsis = [&](std::string t, int rank) {
    const size_t p = t.find("...");
    if (p == std::string::npos) return t;
    const int count = rank - static_cast<int>(t.size()) + 3;
    std::string fill;
    for (int k = ell - count; k < ell; ++k) fill += static_cast<char>('A' + k);
    return t.replace(p, 3, fill);
  };
  for (size_t i = 0; i < terms.size(); ++i) {
    terms[i] = expand_ellipsis(terms[i], ops[i].rank());
    if (static_cast<int>(terms[i].size()) != ops[i].rank())
      throw UserError("term '" + terms[i] + "' does not match input " + ops[i].type().to_string());
    for (size_t c = 0; c < terms[i].size(); ++c) {
      if (terms[i].find(terms[i][c]) != c)
        throw UnsupportedError("Einsum diagonals ('" + terms[i] + "')");
    }
  }
  std::string out;
  if (arrow != std::string::npos) {
    out = eq.substr(arrow + 2);
    if (out.find("...") != std::string::npos) {
      std::string fill;
      for (int k = 0; k < ell; ++k) fill += static_cast<char>('A' + k);
      out.replace(out.find("..."), 3, fill);
    }
  } else {
    std::string all = terms.size() == 2 ? terms[0] + terms[1] : terms[0];
    std::string ups, lows;
    for (char c : all) {
      if (std::count(all.begin(), all.end(), c) == 1)
        (std::isupper(static_cast<unsigned char>(c)) ? ups : lows) += c;
    }
    for (int k = 0; k < ell; ++k) ups = std::string(1, static_cast<char>('A' + k)) + ups;
    std::sort(lows.begin(), lows.end());
    out = ups + lows;
  }
  std::map<char, int64_t> size;
  for (size_t i = 0; i < terms.size(); ++i) {
    const Ints d = static_dims(ops[i].type(), "Einsum");
    for (size_t c = 0; c < terms[i].size(); ++c) {
      auto [it, fresh] = size.emplace(terms[i][c], d[c]);
      if (!fresh && it->second != d[c])
        throw UnsupportedError("Einsum letter '" + std::string(1, terms[i][c]) + "' is " +
                               std::to_string(it->second) + " and " + std::to_string(d[c]) +
                               " (broadcasting)");
    }
  }
  auto has = [](const std::string& t, char c) { return t.find(c) != std::string::npos; };
  // Sums the letters of term i that nothing else needs.
  auto sum_private = [&](size_t i, const std::string& other) {
    Ints axes;
    std::string kept;
    for (size_t c = 0; c < terms[i].size(); ++c) {
      const char l = terms[i][c];
      if (!has(out, l) && !has(other, l))
        axes.push_back(static_cast<int64_t>(c));
      else
        kept += l;
    }
    if (!axes.empty()) {
      ops[i] = sum(ops[i], axes, false);
      terms[i] = kept;
    }
  };
  auto permute_to = [](Var x, const std::string& from, const std::string& to) {
    Ints perm;
    bool identity = true;
    for (char c : to) {
      perm.push_back(static_cast<int64_t>(from.find(c)));
      identity = identity && perm.back() == static_cast<int64_t>(perm.size() - 1);
    }
    return identity ? x : transpose(x, perm);
  };
  auto product = [&](const std::string& letters) {
    int64_t p = 1;
    for (char c : letters) p *= size.at(c);
    return p;
  };
  if (ops.size() == 1) {
    sum_private(0, "");
    return Outs{permute_to(ops[0], terms[0], out)};
  }
  sum_private(0, terms[1]);
  sum_private(1, terms[0]);
  std::string batch, contract, left, right;
  for (char c : terms[0]) {
    if (has(terms[1], c))
      (has(out, c) ? batch : contract) += c;
    else
      left += c;
  }
  for (char c : terms[1]) {
    if (!has(terms[0], c)) right += c;
  }
  Var x = reshape(permute_to(ops[0], terms[0], batch + left + contract),
                  {product(batch), product(left), product(contract)});
  Var y = reshape(permute_to(ops[1], terms[1], batch + contract + right),
                  {product(batch), product(contract), product(right)});
  Ints dims;
  for (char c : batch + left + right) dims.push_back(size.at(c));
  Var z = reshape(matmul(x, y), dims);
  return Outs{permute_to(z, batch + left + right, out)};
}

// InstanceNormalization: per (batch, channel), normalized over the spatial dimensions.
Outs convert_instance_norm(OnnxImporter& im, const onnx::NodeProto& n, const Attrs& a) {
  Var x = im.in(n, 0);
  if (x.rank() < 3)
    throw UserError("InstanceNormalization needs (N, C, D1, ...), got " + x.type().to_string());
  Ints axes;
  for (int d = 2; d < x.rank(); ++d) axes.push_back(d);
  Var d = x - mean(x, axes, true);
  Var inv = reciprocal(sqrt(mean(d * d, axes, true) + attr_float(a, "epsilon", 1e-5)));
  return Outs{d * inv * per_channel(im.in(n, 1), x.rank()) + per_channel(im.in(n, 2), x.rank())};
}

// MeanVarianceNormalization: (x - E[x]) / (sqrt(E[x^2] - E[x]^2) + 1e-9) over axes, as
// ONNX's function body.
Outs convert_mvn(OnnxImporter& im, const onnx::NodeProto& n, const Attrs& a) {
  Var x = im.in(n, 0);
  Ints axes = attr_ints(a, "axes", Ints{0, 2, 3});
  Var m = mean(x, axes, true);
  Var sd = sqrt(mean(x * x, axes, true) - m * m);
  return Outs{(x - m) / (sd + 1e-9)};
}

// LRN: x / (bias + alpha / size * (sum of x^2 over `size` neighbouring channels))^beta.
Outs convert_lrn(OnnxImporter& im, const onnx::NodeProto& n, const Attrs& a) {
  Var x = im.in(n, 0);
  if (x.rank() < 3) throw UserError("LRN needs (N, C, D1, ...), got " + x.type().to_string());
  const int64_t size = attr_int(a, "size");
  if (size < 1) throw UserError("LRN size must be at least 1");
  const int64_t channels = x.type().dims[1];
  if (channels == kDynamic) throw UnsupportedError("LRN over a dynamic channel count");
  const int64_t before = (size - 1) / 2, after = size - 1 - before;
  Ints pads(static_cast<size_t>(2 * x.rank()), 0);
  pads[1] = before;
  pads[static_cast<size_t>(x.rank() + 1)] = after;
  Var sq = apply("pad", {x * x}, {{"pads", pads}});
  std::optional<Var> sum;
  for (int64_t k = 0; k < size; ++k) {
    Var s = apply("slice", {sq},
                  {{"starts", Ints{k}}, {"ends", Ints{k + channels}}, {"axes", Ints{1}}});
    sum = sum ? *sum + s : s;
  }
  Var base = *sum * (attr_float(a, "alpha", 1e-4) / static_cast<double>(size)) +
             attr_float(a, "bias", 1.0);
  return Outs{x / pow(base, scalar_like(x, attr_float(a, "beta", 0.75)))};
}

std::map<std::string, OnnxOpSpec> make_table() {
  std::map<std::string, OnnxOpSpec> t;
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
  t["Max"] = variadic("maximum", false);
  t["Min"] = variadic("minimum", false);
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
  t["Dropout"] = {{"ratio", "seed", "is_test"}, nullptr, convert_dropout};
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
  // Linear algebra, convolution, pooling, normalisation.
  t["MatMul"] = elementwise("matmul");
  t["Gemm"] = {{"alpha", "beta", "transA", "transB"}, nullptr, convert_gemm};
  t["Conv"] = {
      {"group", "kernel_shape", "strides", "dilations", "pads", "auto_pad"}, nullptr, convert_conv};
  auto pool_check = [](const Attrs& a, const onnx::NodeProto& n, int) {
    std::vector<std::string> p;
    if (attr_int(a, "storage_order", 0) != 0)
      p.push_back(attr_problem("storage_order", "1", "(column-major indices)"));
    auto more = max_outputs(n, 1, "(the Indices output) is not supported");
    p.insert(p.end(), more.begin(), more.end());
    return p;
  };
  t["MaxPool"] = {
      {"kernel_shape", "strides", "dilations", "pads", "auto_pad", "ceil_mode", "storage_order"},
      pool_check,
      [](OnnxImporter& im, const onnx::NodeProto& n, const Attrs& a) {
        return convert_pool(im, n, a, true);
      }};
  t["AveragePool"] = {
      {"kernel_shape", "strides", "pads", "auto_pad", "ceil_mode", "count_include_pad"},
      nullptr,
      [](OnnxImporter& im, const onnx::NodeProto& n, const Attrs& a) {
        return convert_pool(im, n, a, false);
      }};
  t["GlobalAveragePool"] = {
      {}, nullptr, [](OnnxImporter& im, const onnx::NodeProto& n, const Attrs&) {
        return convert_global_pool(im, n, false);
      }};
  t["GlobalMaxPool"] = {{}, nullptr, [](OnnxImporter& im, const onnx::NodeProto& n, const Attrs&) {
                          return convert_global_pool(im, n, true);
                        }};
  t["BatchNormalization"] = {
      {"epsilon", "momentum", "spatial", "training_mode"},
      [](const Attrs& a, const onnx::NodeProto& n, int) {
        std::vector<std::string> p;
        if (attr_int(a, "training_mode", 0) != 0)
          p.push_back(attr_problem("training_mode", "1", "(training)"));
        if (attr_int(a, "spatial", 1) != 1)
          p.push_back(attr_problem("spatial", "0", "(per-activation statistics)"));
        auto more = max_outputs(n, 1, "(running statistics) is not supported");
        p.insert(p.end(), more.begin(), more.end());
        return p;
      },
      convert_batch_norm};
  t["LayerNormalization"] = {
      {"axis", "epsilon", "stash_type"},
      [](const Attrs& a, const onnx::NodeProto&, int) {
        std::vector<std::string> p;
        if (attr_int(a, "stash_type", 1) != 1) {
          p.push_back(attr_problem("stash_type", std::to_string(attr_int(a, "stash_type", 1)),
                                   "(only float32 statistics)"));
        }
        return p;
      },
      convert_layer_norm};
  t["Softmax"] = {
      {"axis"}, nullptr, [](OnnxImporter& im, const onnx::NodeProto& n, const Attrs& a) {
        return softmax_like(im, n, a, false);
      }};
  t["LogSoftmax"] = {
      {"axis"}, nullptr, [](OnnxImporter& im, const onnx::NodeProto& n, const Attrs& a) {
        return softmax_like(im, n, a, true);
      }};
  // Reductions.
  t["ReduceSum"] = reduction("reduce_sum");
  t["ReduceMean"] = reduction("reduce_mean");
  t["ReduceMax"] = reduction("reduce_max");
  t["ReduceMin"] = reduction("reduce_min");
  t["ReduceProd"] = reduction("reduce_prod");
  t["ReduceL1"] = reduction("L1");
  t["ReduceL2"] = reduction("L2");
  t["ReduceSumSquare"] = reduction("SumSquare");
  t["ReduceLogSum"] = reduction("LogSum");
  t["ReduceLogSumExp"] = reduction("LogSumExp");
  // Shapes and data movement.
  t["Flatten"] = {{"axis"}, nullptr, convert_flatten};
  t["Reshape"] = {{"allowzero", "shape"}, nullptr, convert_reshape};
  t["Transpose"] = {
      {"perm"}, nullptr, [](OnnxImporter& im, const onnx::NodeProto& n, const Attrs& a) {
        return Outs{transpose(im.in(n, 0), attr_ints(a, "perm", Ints{}))};
      }};
  t["Squeeze"] = {{"axes"}, nullptr, convert_squeeze};
  t["Unsqueeze"] = {{"axes"}, nullptr, convert_unsqueeze};
  t["Concat"] = {{"axis"}, nullptr, [](OnnxImporter& im, const onnx::NodeProto& n, const Attrs& a) {
                   std::vector<Var> ins;
                   for (int i = 0; i < n.input_size(); ++i) ins.push_back(im.in(n, i));
                   return Outs{concat(ins, attr_int(a, "axis"))};
                 }};
  t["Split"] = {{"axis", "split"}, nullptr, convert_split};
  t["Slice"] = {{"starts", "ends", "axes"}, nullptr, convert_slice};
  t["Gather"] = {{"axis"}, nullptr, [](OnnxImporter& im, const onnx::NodeProto& n, const Attrs& a) {
                   return Outs{apply("gather", {im.in(n, 0), im.in(n, 1)},
                                     {{"axis", attr_int(a, "axis", 0)}})};
                 }};
  for (const auto& [onnx_name, kiln_name] :
       std::map<std::string, std::string>{{"ArgMax", "arg_max"}, {"ArgMin", "arg_min"}}) {
    t[onnx_name] = elementwise(kiln_name, {"axis", "keepdims", "select_last_index"});
  }
  for (const char* kind : {"LSTM", "GRU", "RNN"}) {
    const std::string k = kind == std::string("LSTM")  ? "lstm"
                          : kind == std::string("GRU") ? "gru"
                                                       : "rnn";
    t[kind] = {{"hidden_size", "direction", "activations", "activation_alpha", "activation_beta",
                "clip", "input_forget", "linear_before_reset", "layout"},
               nullptr,
               [k](OnnxImporter& im, const onnx::NodeProto& n, const Attrs& a) {
                 return convert_recurrent(im, n, a, k);
               }};
  }
  t["Trilu"] = {{"upper"}, nullptr, convert_trilu};
  t["InstanceNormalization"] = {{"epsilon"}, nullptr, convert_instance_norm};
  t["MeanVarianceNormalization"] = {{"axes"}, nullptr, convert_mvn};
  t["LRN"] = {{"alpha", "beta", "bias", "size"}, nullptr, convert_lrn};
  // Inlined by the loader when the condition is known at load time (onnx_model.cpp).
  t["If"] = {{"then_branch", "else_branch"},
             nullptr,
             [](OnnxImporter&, const onnx::NodeProto&, const Attrs&) -> Outs {
               throw InternalError("If reached its converter");
             }};
  t["NonZero"] = {{}, nullptr, [](OnnxImporter& im, const onnx::NodeProto& n, const Attrs&) -> Outs {
                    if (const Tensor* x = im.known(n.input(0)))
                      return Outs{constant(im.graph(), nonzero_indices(*x))};
                    const int rank = std::max(1, im.type_of(n, 0).rank());
                    throw RunTimeValueNeeded(
                        n.input(0), n.output(0), TensorType{DType::kInt64, {rank, kDynamic}},
                        "NonZero of '" + n.input(0) +
                            "', a tensor known only at run time: its output size depends on "
                            "the values, so it is computed between compiled stages (kiln run "
                            "and ModelFunction do this)");
                  }};
  t["GatherND"] = {
      {"batch_dims"}, nullptr, [](OnnxImporter& im, const onnx::NodeProto& n, const Attrs& a) {
        return Outs{apply("gather_nd", {im.in(n, 0), im.in(n, 1)},
                          {{"batch_dims", attr_int(a, "batch_dims", 0)}})};
      }};
  t["ScatterND"] = {
      {"reduction"}, nullptr, [](OnnxImporter& im, const onnx::NodeProto& n, const Attrs& a) {
        return Outs{apply("scatter_nd", {im.in(n, 0), im.in(n, 1), im.in(n, 2)},
                          {{"reduction", attr_string(a, "reduction", std::string("none"))}})};
      }};
  for (const char* op : {"ScatterElements", "Scatter"}) {
    t[op] = {
        {"axis", "reduction"},
        nullptr,
        [](OnnxImporter& im, const onnx::NodeProto& n, const Attrs& a) {
          return Outs{apply("scatter_elements", {im.in(n, 0), im.in(n, 1), im.in(n, 2)},
                            {{"axis", attr_int(a, "axis", 0)},
                             {"reduction", attr_string(a, "reduction", std::string("none"))}})};
        }};
  }
  t["Resize"] = {{"mode", "coordinate_transformation_mode", "nearest_mode", "cubic_coeff_a",
                  "exclude_outside", "extrapolation_value"},
                 nullptr,
                 [](OnnxImporter& im, const onnx::NodeProto& n, const Attrs& a) {
                   Attrs p = a;
                   // Opset 10: (X, scales); 11 and later: (X, roi, scales, sizes).
                   const int scales_at = im.opset() < 11 ? 1 : 2;
                   auto doubles = [&](int i, const char* what) {
                     std::vector<double> v;
                     if (!OnnxImporter::has_input(n, i)) return v;
                     const Tensor& t = im.const_in(n, i, what);
                     for (int64_t k = 0; k < t.numel(); ++k) v.push_back(t.load(k));
                     return v;
                   };
                   const auto scales = doubles(scales_at, "scales");
                   if (!scales.empty()) p["scales"] = scales;
                   if (im.opset() >= 11 && OnnxImporter::has_input(n, 3)) {
                     const Ints sizes = im.const_ints(n, 3, "sizes");
                     if (!sizes.empty()) p["sizes"] = sizes;
                   }
                   if (im.opset() >= 11 && attr_string(a, "coordinate_transformation_mode",
                                                       std::string()) == "tf_crop_and_resize")
                     p["roi"] = doubles(1, "roi");
                   return Outs{apply("resize", {im.in(n, 0)}, p)};
                 }};
  t["Upsample"] = {
      {"mode", "scales"}, nullptr, [](OnnxImporter& im, const onnx::NodeProto& n, const Attrs& a) {
        std::vector<double> scales;
        if (a.count("scales")) {
          scales = std::get<std::vector<double>>(a.at("scales"));
        } else {
          const Tensor& t = im.const_in(n, 1, "scales");
          for (int64_t k = 0; k < t.numel(); ++k) scales.push_back(t.load(k));
        }
        // Upsample is Resize with ONNX's asymmetric coordinates.
        return Outs{apply("resize", {im.in(n, 0)},
                          {{"mode", attr_string(a, "mode", std::string("nearest"))},
                           {"coordinate_transformation_mode", std::string("asymmetric")},
                           {"nearest_mode", std::string("floor")},
                           {"scales", scales}})};
      }};
  t["Einsum"] = {{"equation"}, nullptr, convert_einsum};
  t["CumSum"] = {{"exclusive", "reverse"},
                 nullptr,
                 [](OnnxImporter& im, const onnx::NodeProto& n, const Attrs& a) {
                   const Ints axis = im.const_ints(n, 1, "axis");
                   if (axis.size() != 1) throw UserError("axis must hold one value");
                   return Outs{apply("cumsum", {im.in(n, 0)},
                                     {{"axis", axis[0]},
                                      {"exclusive", attr_int(a, "exclusive", 0)},
                                      {"reverse", attr_int(a, "reverse", 0)}})};
                 }};
  t["TopK"] = {
      {"axis", "largest", "sorted", "k"},
      nullptr,
      [](OnnxImporter& im, const onnx::NodeProto& n, const Attrs& a) {
        const int64_t k = im.opset() < 10 ? attr_int(a, "k") : im.const_ints(n, 1, "k").at(0);
        Var x = im.in(n, 0);
        std::vector<Variable*> ins{x.var()};
        Node* node = im.graph().add_node(
            OpRegistry::instance().create("top_k", {{"k", k},
                                                    {"axis", attr_int(a, "axis", -1)},
                                                    {"largest", attr_int(a, "largest", 1)},
                                                    {"sorted", attr_int(a, "sorted", 1)}}),
            ins);
        return Outs{Var(&im.graph(), node->outputs[0]), Var(&im.graph(), node->outputs[1])};
      }};
  t["Hardmax"] = {{"axis"}, nullptr, convert_hardmax};
  t["OneHot"] = {{"axis"}, nullptr, convert_one_hot};
  t["DepthToSpace"] = {{"blocksize", "mode"},
                       nullptr,
                       [](OnnxImporter& im, const onnx::NodeProto& n, const Attrs& a) {
                         return convert_depth_space(im, n, a, true);
                       }};
  t["SpaceToDepth"] = {
      {"blocksize"}, nullptr, [](OnnxImporter& im, const onnx::NodeProto& n, const Attrs& a) {
        return convert_depth_space(im, n, a, false);
      }};
  t["Tile"] = {{}, nullptr, convert_tile};
  t["EyeLike"] = {{"dtype", "k"}, nullptr, convert_eye_like};
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
  t["GatherElements"] = {
      {"axis"}, nullptr, [](OnnxImporter& im, const onnx::NodeProto& n, const Attrs& a) {
        return Outs{apply("gather_elements", {im.in(n, 0), im.in(n, 1)},
                          {{"axis", attr_int(a, "axis", 0)}})};
      }};
  t["NegativeLogLikelihoodLoss"] = {{"reduction", "ignore_index"}, nullptr, convert_nll};
  t["SoftmaxCrossEntropyLoss"] = {
      {"reduction", "ignore_index"}, nullptr, convert_softmax_cross_entropy};
  t["Expand"] = {
      {}, nullptr, [](OnnxImporter& im, const onnx::NodeProto& n, const Attrs&) {
        if (auto target = symbolic_in(im, n, 1))
          return Outs{expand_symbolic(im, im.in(n, 0), *target)};
        return Outs{apply("expand", {im.in(n, 0)}, {{"shape", im.const_ints(n, 1, "shape")}})};
      }};
  t["Pad"] = {{"mode", "pads", "value"},
              [](const Attrs& a, const onnx::NodeProto&, int) {
                std::vector<std::string> p;
                const std::string mode = attr_string(a, "mode", std::string("constant"));
                if (mode != "constant")
                  p.push_back(attr_problem("mode", mode, "(only constant padding)"));
                return p;
              },
              convert_pad};
  // Values known at load time.
  t["Shape"] = {{"start", "end"}, nullptr, convert_shape};
  t["Size"] = {{}, nullptr, convert_size};
  t["Constant"] = {{"value", "value_float", "value_floats", "value_int", "value_ints"},
                   nullptr,
                   convert_constant};
  t["ConstantOfShape"] = {{"value"}, nullptr, convert_constant_of_shape};
  t["Range"] = {{}, nullptr, convert_range};
  return t;
}

const std::map<std::string, OnnxOpSpec>& table() {
  static const std::map<std::string, OnnxOpSpec> t = make_table();
  return t;
}

}  // namespace

const OnnxOpSpec* find_onnx_op(const std::string& op_type) {
  auto it = table().find(op_type);
  return it == table().end() ? nullptr : &it->second;
}

std::vector<std::string> onnx_op_names() {
  std::vector<std::string> out;
  for (const auto& [name, spec] : table()) out.push_back(name);
  return out;
}

}  // namespace kiln
