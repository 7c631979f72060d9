#include "frontend/onnx/onnx_op_support.h"

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
#include "frontend/onnx/onnx_tensor.h"
#include "ops/broadcast.h"
#include "ops/registry.h"
#include "ops/window.h"
#include "util/error.h"
#include "util/strings.h"

namespace kiln::onnx_import {

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

OnnxOpSpec elementwise(const std::string& op, std::vector<std::string> attrs) {
  return {attrs, nullptr, [op](OnnxImporter& im, const onnx::NodeProto& n, const Attrs& a) {
            std::vector<Var> ins;
            for (int i = 0; i < n.input_size(); ++i) ins.push_back(im.in(n, i));
            return Outs{apply(op, ins, a)};
          }};
}

Var scalar_like(Var x, double v) { return scalar(x.graph(), x.dtype(), v); }

Ints static_dims(const TensorType& t, const std::string& what) {
  for (int64_t d : t.dims) {
    if (d == kDynamic)
      throw UnsupportedError(what + " needs static dimensions, got " + t.to_string());
  }
  return t.dims;
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

}  // namespace kiln::onnx_import
