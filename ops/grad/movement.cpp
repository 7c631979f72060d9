// Gradients of the ops that move, select or convert values: each is the adjoint copy
// (transpose back, reshape back, slice back, pad back, scatter-add back).
#include <algorithm>

#include "ops/broadcast.h"
#include "ops/concat.h"
#include "ops/convert.h"
#include "ops/dim_values.h"
#include "ops/expand.h"
#include "ops/gather.h"
#include "ops/gather_elements.h"
#include "ops/grad/support.h"
#include "ops/pad.h"
#include "ops/reshape.h"
#include "ops/scan_ops.h"
#include "ops/scatter_gather.h"
#include "ops/slice.h"
#include "ops/transpose.h"

namespace kiln {
namespace {

// Only input 0 carries values: the others are read for their shapes.
std::vector<Variable*> first_only(const GradArgs& args, Var g0) {
  std::vector<Variable*> out(args.node.inputs.size(), nullptr);
  if (args.wanted[0]) out[0] = g0.var();
  return out;
}

const char* const kReductionNames[] = {"none", "add", "mul", "max", "min"};

// "#k.a*#k.b*..." over dims [lo, hi) of input k ("1" when empty).
std::string dims_product(int k, int lo, int hi) {
  std::string s;
  for (int d = lo; d < hi; ++d)
    s += (s.empty() ? "" : "*") + ("#" + std::to_string(k) + "." + std::to_string(d));
  return s.empty() ? "1" : s;
}

}  // namespace

std::vector<Variable*> Transpose::grad(const GradArgs& args) const {
  Var g = grad_of_out(args, 0);
  const auto p = perm_for(g.rank());
  std::vector<int64_t> inv(p.size());
  for (size_t i = 0; i < p.size(); ++i) inv[static_cast<size_t>(p[i])] = static_cast<int64_t>(i);
  return first_only(args, transpose(g, inv));
}

std::vector<Variable*> Reshape::grad(const GradArgs& args) const {
  return first_only(args, reshape_like(grad_of_out(args, 0), grad_in(args, 0)));
}

std::vector<Variable*> Flatten::grad(const GradArgs& args) const {
  return first_only(args, reshape_like(grad_of_out(args, 0), grad_in(args, 0)));
}

std::vector<Variable*> Expand::grad(const GradArgs& args) const {
  return first_only(args, sum_to(grad_of_out(args, 0), grad_in(args, 0)));
}

std::vector<Variable*> Pad::grad(const GradArgs& args) const {
  if (mode_ != PadMode::kConstant) {
    // Reflected, repeated and wrapped positions send their gradient back to their source.
    return first_only(args, apply("pad_grad", {grad_of_out(args, 0)},
                                  {{"pads", pads_}, {"mode", props().at("mode")}}));
  }
  std::vector<int64_t> crop;
  for (int64_t p : pads_) crop.push_back(-p);
  return first_only(args, apply("pad", {grad_of_out(args, 0)}, {{"pads", crop}, {"value", 0.0}}));
}

std::vector<Variable*> Concat::grad(const GradArgs& args) const {
  Var g = grad_of_out(args, 0);
  const int n = static_cast<int>(args.node.inputs.size());
  const int64_t axis = normalize_axis(axis_, g.rank(), name());
  std::vector<Var> sources{g};
  for (int i = 0; i < n; ++i) sources.push_back(grad_in(args, i));
  std::vector<Variable*> out(static_cast<size_t>(n), nullptr);
  std::string start = "0";
  for (int i = 0; i < n; ++i) {
    const std::string size = "#" + std::to_string(i + 1) + "." + std::to_string(axis);
    const std::string end = start == "0" ? size : start + "+" + size;
    if (args.wanted[static_cast<size_t>(i)]) {
      out[static_cast<size_t>(i)] =
          apply_dims(
              "slice", std::vector<Var>(sources.begin(), sources.begin() + i + 2),
              {{"starts_dims", start}, {"ends_dims", end}, {"axes", std::vector<int64_t>{axis}}})
              .var();
    }
    start = end;
  }
  return out;
}

std::vector<Variable*> Slice::grad(const GradArgs& args) const {
  Var x = grad_in(args, 0);
  if (!args.wanted[0]) return first_only(args, Var());
  Var g = grad_of_out(args, 0);
  for (const AxisSlice& a : per_axis(x.rank())) {
    const int64_t dim = x.type().dims[static_cast<size_t>(a.axis)];
    const auto start = a.start.value(), end = a.end.value();
    if (dim == kDynamic || !start || !end) {
      not_differentiable(args, 0,
                         "the slice along axis " + std::to_string(a.axis) +
                             " has bounds or a length known only at run time");
    }
    int64_t first = 0, count = 0;
    slice_dim(dim, *start, *end, a.step, &first, &count);
    if (a.step > 0) {
      g = place_strided(g, a.axis, first, a.step, count, dim);
    } else {
      // Reversed, the picks ascend from the last one taken.
      g = place_strided(reverse_axis(g, a.axis), a.axis, first + (count - 1) * a.step, -a.step,
                        count, dim);
    }
  }
  return first_only(args, g);
}

std::vector<Variable*> Gather::grad(const GradArgs& args) const {
  Var data = grad_in(args, 0), idx = grad_in(args, 1), g = grad_of_out(args, 0);
  const int r = data.rank();
  const int a = normalize_axis(axis_, r, name());
  // g as (before, indices, after) scatter-added along axis 1 into (before, dim, after).
  const std::string before = dims_product(1, 0, a), after = dims_product(1, a + 1, r);
  const std::string picks = dims_product(2, 0, idx.rank());
  Var g3 = apply_dims("reshape", {g, data, idx}, {{"dims", before + ";" + picks + ";" + after}});
  Var i3 = apply_dims("reshape", {idx}, {{"dims", "1;" + dims_product(0, 0, idx.rank()) + ";1"}});
  i3 = apply_dims("expand", {i3, g3}, {{"dims", dims_of_input(1, 3)}});
  Var zeros = apply("fill", {data},
                    {{"dims", dims_product(0, 0, a) + ";#0." + std::to_string(a) + ";" +
                                  dims_product(0, a + 1, r)},
                     {"value", 0.0},
                     {"dtype", std::string(dtype_name(data.dtype()))}});
  Var s = apply("scatter_elements", {zeros, i3, g3},
                {{"axis", int64_t(1)}, {"reduction", std::string("add")}});
  return first_only(args, reshape_like(s, data));
}

std::vector<Variable*> GatherElements::grad(const GradArgs& args) const {
  Var data = grad_in(args, 0), idx = grad_in(args, 1), g = grad_of_out(args, 0);
  return first_only(args, apply("scatter_elements", {zeros_like(data), idx, g},
                                {{"axis", axis_}, {"reduction", std::string("add")}}));
}

std::vector<Variable*> GatherND::grad(const GradArgs& args) const {
  if (args.wanted[0] && batch_dims_ != 0) {
    not_differentiable(args, 0, "batch_dims > 0 has no gradient yet");
  }
  Var data = grad_in(args, 0), idx = grad_in(args, 1), g = grad_of_out(args, 0);
  return first_only(
      args, apply("scatter_nd", {zeros_like(data), idx, g}, {{"reduction", std::string("add")}}));
}

std::vector<Variable*> Scatter::grad(const GradArgs& args) const {
  const std::string reduction = kReductionNames[reduction_];
  if (reduction != "none" && reduction != "add") {
    for (int i : {0, 2}) {
      if (args.wanted[static_cast<size_t>(i)]) {
        not_differentiable(args, i, "scatter with reduction '" + reduction + "' has no gradient");
      }
    }
  }
  Var idx = grad_in(args, 1), upd = grad_in(args, 2), g = grad_of_out(args, 0);
  std::vector<Variable*> out(3, nullptr);
  Attrs props = elements_ ? Attrs{{"axis", axis_}} : Attrs{};
  if (args.wanted[0]) {
    // Overwritten elements lose their gradient; added ones keep it.
    props["reduction"] = std::string("none");
    out[0] = reduction == "add" ? g.var() : apply(name(), {g, idx, zeros_like(upd)}, props).var();
  }
  if (args.wanted[2]) {
    out[2] = elements_ ? apply("gather_elements", {g, idx}, {{"axis", axis_}}).var()
                       : apply("gather_nd", {g, idx}).var();
  }
  return out;
}

std::vector<Variable*> CumSum::grad(const GradArgs& args) const {
  return first_only(args, apply("cumsum", {grad_of_out(args, 0)},
                                {{"axis", axis_},
                                 {"exclusive", int64_t(exclusive_)},
                                 {"reverse", int64_t(!reverse_)}}));
}

std::vector<Variable*> TopK::grad(const GradArgs& args) const {
  Var x = grad_in(args, 0), g = grad_of_out(args, 0), idx = grad_out(args, 1);
  return first_only(args, apply("scatter_elements", {zeros_like(x), idx, g},
                                {{"axis", axis_}, {"reduction", std::string("add")}}));
}

std::vector<Variable*> Convert::grad(const GradArgs& args) const {
  Var x = grad_in(args, 0);
  return first_only(
      args, apply("convert", {grad_of_out(args, 0)}, {{"to", std::string(dtype_name(x.dtype()))}}));
}

std::vector<Variable*> DimValuesBase::grad(const GradArgs& args) const {
  // The inputs are read for their shapes alone: the values never move the result.
  return std::vector<Variable*>(args.node.inputs.size(), nullptr);
}

}  // namespace kiln
