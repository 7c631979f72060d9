#pragma once
// Helpers for the ops' grad hooks: the node's values as Vars, broadcasting undone, zeros.
#include <string>
#include <vector>

#include "graph/gradient.h"
#include "ops/builders.h"

namespace kiln {

Var grad_in(const GradArgs& a, int i);   // the node's input i
Var grad_out(const GradArgs& a, int i);  // the node's output i
// The gradient of output i; zeros of its type when none reached it.
Var grad_of_out(const GradArgs& a, int i);
// "#k.0,#k.1,...": the run-time dimensions of input k of rank `rank`, as dimension
// expressions (graph/dim_expr.h) for ops that take their shape from another input.
std::string dims_of_input(int k, int rank);
Var zeros_like(Var x);
// apply() for ops whose `dims`, `starts_dims` or `ends_dims` props read the shapes of the
// inputs after the first: those the expressions never name are dropped from the end.
Var apply_dims(const std::string& op, std::vector<Var> inputs, const Attrs& props);
Var lit_like(Var x, double v);  // a rank-0 constant of x's dtype
// g (broadcast from `like`'s shape) summed back to `like`'s shape: NumPy broadcasting
// undone. A dimension counts as broadcast only where `like` has a static 1.
Var sum_to(Var g, Var like);
// x reshaped to `like`'s run-time shape (same element count).
Var reshape_like(Var x, Var like);
// g's `count` entries along `axis` placed at first, first + step, ... (step > 0) of an axis
// of length `dim`, zeros elsewhere: the adjoint of a strided slice.
Var place_strided(Var g, int axis, int64_t first, int64_t step, int64_t count, int64_t dim);
// x reversed along `axis`.
Var reverse_axis(Var x, int axis);
// Every axis in `axes` reversed, in one slice.
Var reverse_axes(Var x, const std::vector<int>& axes);

}  // namespace kiln
