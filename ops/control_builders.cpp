#include "ops/control_builders.h"

#include <string>

#include "util/error.h"

namespace kiln {
namespace {

std::string step_name(int64_t t) { return "scan step " + std::to_string(t); }

// Slice t of x along axis 0, that axis dropped: a gather by a constant scalar index.
Var slice_at(Var x, int64_t t) {
  Tensor index = Tensor::empty(DType::kInt64, Shape{});
  index.store_int(0, t);
  return apply("gather", {x, constant(x.graph(), index)}, {{"axis", int64_t{0}}});
}

}  // namespace

Var unsqueeze0(Var x) {
  const TensorType& t = x.type();
  if (t.is_static()) {
    std::vector<int64_t> shape{1};
    shape.insert(shape.end(), t.dims.begin(), t.dims.end());
    return reshape(x, shape);
  }
  std::string dims = "1";
  for (int d = 0; d < x.rank(); ++d) dims += ";#0." + std::to_string(d);
  return apply("reshape", {x}, {{"dims", dims}});
}

ScanResult scan(const ScanStep& step, const std::vector<Var>& sequences,
                const std::vector<Var>& init, std::optional<int64_t> n_steps, bool reverse) {
  std::optional<int64_t> length;
  for (size_t i = 0; i < sequences.size(); ++i) {
    const TensorType& t = sequences[i].type();
    if (t.rank() == 0) throw UserError("scan: sequence " + std::to_string(i) + " is a scalar");
    if (t.dims[0] == kDynamic)
      throw UserError("scan: sequence " + std::to_string(i) + " (" + t.to_string() +
                      ") has a length known only at run time; scan unrolls, so it needs a "
                      "static one");
    if (length && *length != t.dims[0])
      throw UserError("scan: sequence " + std::to_string(i) + " holds " +
                      std::to_string(t.dims[0]) + " steps, sequence 0 holds " +
                      std::to_string(*length));
    length = t.dims[0];
  }
  if (!n_steps && !length) throw UserError("scan: without sequences, n_steps is needed");
  const int64_t steps = n_steps.value_or(length.value_or(0));
  if (steps < 0 || (length && steps > *length))
    throw UserError("scan: n_steps " + std::to_string(steps) + " is outside 0 to " +
                    (length ? std::to_string(*length) : std::string("its bound")));
  if (steps > kMaxScanSteps)
    throw UserError("scan: " + std::to_string(steps) + " steps; scan unrolls at most " +
                    std::to_string(kMaxScanSteps));
  ScanResult r{init, {}};
  std::vector<std::vector<Var>> per_step;
  for (int64_t k = 0; k < steps; ++k) {
    const int64_t t = reverse ? (length ? *length : steps) - 1 - k : k;
    std::vector<Var> slices;
    for (const Var& s : sequences) slices.push_back(slice_at(s, t));
    std::vector<Var> outs = step(t, slices, r.states);
    if (outs.size() < init.size()) {
      throw UserError("scan: " + step_name(t) + " returned " + std::to_string(outs.size()) +
                      " values for " + std::to_string(init.size()) + " states");
    }
    for (size_t i = 0; i < init.size(); ++i) {
      if (outs[i].type() != init[i].type())
        throw UserError("scan: " + step_name(t) + " turned state " + std::to_string(i) + " from " +
                        init[i].type().to_string() + " into " + outs[i].type().to_string());
      r.states[i] = outs[i];
    }
    outs.erase(outs.begin(), outs.begin() + static_cast<std::ptrdiff_t>(init.size()));
    if (!per_step.empty() && outs.size() != per_step[0].size())
      throw UserError("scan: " + step_name(t) + " returned " + std::to_string(outs.size()) +
                      " outputs, the first step " + std::to_string(per_step[0].size()));
    per_step.push_back(std::move(outs));
  }
  const size_t n_out = per_step.empty() ? 0 : per_step[0].size();
  for (size_t j = 0; j < n_out; ++j) {
    std::vector<Var> parts;
    for (size_t k = 0; k < per_step.size(); ++k) {
      if (per_step[k][j].type() != per_step[0][j].type())
        throw UserError("scan: output " + std::to_string(j) + " is " +
                        per_step[k][j].type().to_string() + " at step " + std::to_string(k) + ", " +
                        per_step[0][j].type().to_string() + " at the first");
      parts.push_back(unsqueeze0(per_step[k][j]));
    }
    r.outputs.push_back(parts.size() == 1 ? parts[0] : concat(parts, 0));
  }
  return r;
}

std::vector<Var> cond(Var pred, const std::function<std::vector<Var>()>& then_branch,
                      const std::function<std::vector<Var>()>& else_branch) {
  const TensorType& pt = pred.type();
  if (pt.dtype != DType::kBool || pt.rank() != 0)
    throw UserError("cond: the condition is " + pt.to_string() + ", not a bool scalar");
  const Variable* pv = pred.var();
  if (pv->kind == VarKind::kConstant && !pv->parameter && pv->value)
    return pv->value->load(0) != 0 ? then_branch() : else_branch();
  const std::vector<Var> a = then_branch(), b = else_branch();
  if (a.size() != b.size())
    throw UserError("cond: the then branch gives " + std::to_string(a.size()) +
                    " outputs, the else branch " + std::to_string(b.size()));
  std::vector<Var> out;
  for (size_t k = 0; k < a.size(); ++k) {
    if (a[k].type() != b[k].type())
      throw UserError("cond: output " + std::to_string(k) + " is " + a[k].type().to_string() +
                      " in the then branch, " + b[k].type().to_string() + " in the else branch");
    out.push_back(where(pred, a[k], b[k]));
  }
  return out;
}

}  // namespace kiln
