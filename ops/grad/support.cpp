#include "ops/grad/support.h"

#include <limits>

#include "graph/dim_expr.h"
#include "runtime/dtype.h"

namespace kiln {

Var grad_in(const GradArgs& a, int i) {
  return Var(&a.graph, a.node.inputs.at(static_cast<size_t>(i)));
}

Var grad_out(const GradArgs& a, int i) {
  return Var(&a.graph, a.node.outputs.at(static_cast<size_t>(i)));
}

Var grad_of_out(const GradArgs& a, int i) {
  Variable* g = a.output_grads.at(static_cast<size_t>(i));
  return g ? Var(&a.graph, g) : zeros_like(grad_out(a, i));
}

std::string dims_of_input(int k, int rank) {
  std::string s;
  for (int d = 0; d < rank; ++d) {
    if (d) s += ";";
    s += "#" + std::to_string(k) + "." + std::to_string(d);
  }
  return s;
}

Var apply_dims(const std::string& op, std::vector<Var> inputs, const Attrs& props) {
  int needed = 0;
  for (const auto& [key, value] : props) {
    if (key.size() < 4 || key.compare(key.size() - 4, 4, "dims") != 0) continue;
    if (const auto* text = std::get_if<std::string>(&value)) {
      for (const DimExpr& e : parse_dim_exprs(*text)) needed = std::max(needed, e.max_input());
    }
  }
  inputs.resize(std::min(inputs.size(), static_cast<size_t>(needed + 1)));
  return apply(op, inputs, props);
}

Var zeros_like(Var x) {
  if (x.rank() == 0) return lit_like(x, 0.0);
  return apply("fill", {x},
               {{"dims", dims_of_input(0, x.rank())},
                {"value", 0.0},
                {"dtype", std::string(dtype_name(x.dtype()))}});
}

Var lit_like(Var x, double v) { return scalar(x.graph(), x.dtype(), v); }

Var reshape_like(Var x, Var like) {
  if (x.type().dims == like.type().dims && like.type().is_static()) return x;
  if (like.type().is_static()) return reshape(x, like.type().dims);
  return apply_dims("reshape", {x, like}, {{"dims", dims_of_input(1, like.rank())}});
}

Var sum_to(Var g, Var like) {
  const auto& gd = g.type().dims;
  const auto& ld = like.type().dims;
  const int lead = g.rank() - like.rank();
  std::vector<int64_t> axes;
  for (int i = 0; i < lead; ++i) axes.push_back(i);
  for (int i = 0; i < like.rank(); ++i) {
    if (ld[i] == 1 && gd[lead + i] != 1) axes.push_back(lead + i);
  }
  if (axes.empty()) return g;
  Var s = sum(g, axes, /*keepdims=*/true);
  return reshape_like(s, like);
}

Var reverse_axis(Var x, int axis) { return reverse_axes(x, {axis}); }

Var reverse_axes(Var x, const std::vector<int>& axes) {
  const size_t n = axes.size();
  return apply("slice", {x},
               {{"starts", std::vector<int64_t>(n, -1)},
                {"ends", std::vector<int64_t>(n, std::numeric_limits<int64_t>::min())},
                {"axes", std::vector<int64_t>(axes.begin(), axes.end())},
                {"steps", std::vector<int64_t>(n, -1)}});
}

Var place_strided(Var g, int axis, int64_t first, int64_t step, int64_t count, int64_t dim) {
  const int r = g.rank();
  Var v = g;
  if (step > 1 && count > 0) {
    // (.., count, ..) -> (.., count, 1, ..) -> padded to (.., count, step, ..) -> merged.
    std::string split, merge;
    for (int d = 0; d < r; ++d) {
      const std::string sep = d ? ";" : "";
      const std::string dd = "#0." + std::to_string(d);
      split += sep + (d == axis ? std::to_string(count) + ";1" : dd);
    }
    v = apply("reshape", {v}, {{"dims", split}});
    std::vector<int64_t> pads(static_cast<size_t>(2 * (r + 1)), 0);
    pads[static_cast<size_t>(r + 1 + axis + 1)] = step - 1;
    v = apply("pad", {v}, {{"pads", pads}, {"value", 0.0}});
    for (int d = 0, k = 0; d < r; ++d, ++k) {
      const std::string sep = d ? ";" : "";
      if (d == axis) {
        merge += sep + std::to_string(count * step);
        ++k;
      } else {
        merge += sep + "#0." + std::to_string(k);
      }
    }
    v = apply("reshape", {v}, {{"dims", merge}});
  }
  const int64_t extent = count > 0 ? count * step : 0;
  std::vector<int64_t> pads(static_cast<size_t>(2 * r), 0);
  pads[static_cast<size_t>(axis)] = first;
  pads[static_cast<size_t>(r + axis)] = dim - first - extent;
  return apply("pad", {v}, {{"pads", pads}, {"value", 0.0}});
}

}  // namespace kiln
