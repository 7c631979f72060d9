// The ONNX importer's reductions, softmax and the ops that walk an axis (ArgMax, CumSum, TopK).
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

}  // namespace

void add_reduce_ops(OpTable& t) {
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
  for (const auto& [onnx_name, kiln_name] :
       std::map<std::string, std::string>{{"ArgMax", "arg_max"}, {"ArgMin", "arg_min"}}) {
    t[onnx_name] = elementwise(kiln_name, {"axis", "keepdims", "select_last_index"});
  }
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
        Var x = im.in(n, 0);
        std::vector<Var> ins{x};
        Attrs props{{"axis", attr_int(a, "axis", -1)},
                    {"largest", attr_int(a, "largest", 1)},
                    {"sorted", attr_int(a, "sorted", 1)}};
        if (im.opset() < 10) {
          props["k"] = attr_int(a, "k");
        } else if (OnnxImporter::has_input(n, 1) && !im.is_known(n.input(1))) {
          // k from dynamic dimensions (a detector's min(k, boxes)): evaluated at run time.
          auto k = im.dims_in(n, 1, ins);
          if (!k || k->size() != 1) (void)im.const_ints(n, 1, "k");  // names what k is
          props["k_dims"] = dim_exprs_to_string(*k);
        } else {
          props["k"] = im.const_ints(n, 1, "k").at(0);
        }
        std::vector<Variable*> vars;
        for (const Var& v : ins) vars.push_back(v.var());
        Node* node = im.graph().add_node(OpRegistry::instance().create("top_k", props), vars);
        return Outs{Var(&im.graph(), node->outputs[0]), Var(&im.graph(), node->outputs[1])};
      }};
  t["Hardmax"] = {{"axis"}, nullptr, convert_hardmax};
}

}  // namespace kiln::onnx_import
