#include "frontend/control_flow.h"

#include <cstdlib>
#include <cstring>

#include "util/error.h"
#include "util/strings.h"

namespace kiln {
namespace {

// Stacks same-shaped pieces on a new axis `axis`; piece t lands at n-1-t when `reverse`.
// With no pieces, `type`'s shape (its dynamic dims 0): what zero iterations give.
Tensor stack(const std::vector<Tensor>& pieces, int64_t axis, bool reverse, const TensorType& type,
             const std::string& what) {
  if (pieces.empty()) {
    Shape shape;
    for (int64_t d : type.dims) shape.push_back(d == kDynamic ? 0 : d);
    if (axis < static_cast<int64_t>(shape.size())) shape[static_cast<size_t>(axis)] = 0;
    return Tensor::zeros(type.dtype, shape);
  }
  const Tensor& first = pieces.front();
  if (axis < 0 || axis > first.ndim())
    throw UserError(what + ": axis " + std::to_string(axis) + " is outside its rank");
  Shape shape = first.shape();
  const int64_t n = static_cast<int64_t>(pieces.size());
  shape.insert(shape.begin() + axis, n);
  Tensor out = Tensor::empty(first.dtype(), shape);
  int64_t outer = 1;
  for (int64_t d = 0; d < axis; ++d) outer *= first.shape()[static_cast<size_t>(d)];
  const size_t inner = outer == 0 ? 0 : first.nbytes() / static_cast<size_t>(outer);
  char* dst = static_cast<char*>(out.data());
  for (int64_t t = 0; t < n; ++t) {
    const Tensor& p = pieces[static_cast<size_t>(t)];
    if (p.dtype() != first.dtype() || p.shape() != first.shape()) {
      throw UserError(what + ": iteration " + std::to_string(t) + " gives " + p.describe() +
                      ", iteration 0 gave " + first.describe() +
                      " (the slices of a scan output must agree)");
    }
    const Tensor c = p.contiguous();
    const int64_t at = reverse ? n - 1 - t : t;
    for (int64_t o = 0; o < outer; ++o) {
      std::memcpy(dst + static_cast<size_t>(o * n + at) * inner,
                  static_cast<const char*>(c.data()) + static_cast<size_t>(o) * inner, inner);
    }
  }
  return out;
}

// Element `index` of `t` along `axis`, without that axis.
Tensor take(const Tensor& t, int64_t axis, int64_t index) {
  Shape shape = t.shape();
  shape.erase(shape.begin() + axis);
  return t.slice(static_cast<int>(axis), index, index + 1).contiguous().reshape(shape);
}

bool truth(const Tensor& t, const std::string& what) {
  if (t.numel() != 1) {
    throw UserError(what + " has " + std::to_string(t.numel()) + " elements (" + t.describe() +
                    "), not 1");
  }
  return t.load(0) != 0;
}

void check_outputs(const std::vector<Tensor>& outs, size_t expect, const std::string& where) {
  if (outs.size() != expect) {
    throw UserError(where + ": the body gave " + std::to_string(outs.size()) +
                    " outputs, expected " + std::to_string(expect));
  }
}

}  // namespace

int64_t max_loop_iterations() {
  const char* env = std::getenv("KILN_MAX_LOOP_ITERATIONS");
  if (!env || !*env) return int64_t{1} << 24;
  char* end = nullptr;
  const long long v = std::strtoll(env, &end, 10);
  if (*end != '\0' || v <= 0) {
    throw UserError(std::string("KILN_MAX_LOOP_ITERATIONS='") + env +
                    "' is not a positive integer");
  }
  return v;
}

std::vector<Tensor> run_loop(const BodyFunction& body, const std::vector<const Tensor*>& values,
                             const std::vector<TensorType>& types, const Attrs& attrs,
                             const std::string& where) {
  const size_t inputs = static_cast<size_t>(attr_int(attrs, "inputs"));
  if (inputs < 2 || values.size() < inputs) throw InternalError(where + ": Loop's values");
  const size_t carried = inputs - 2, scans = types.size() - carried;
  const bool has_m = values[0] != nullptr;
  int64_t m = 0;
  if (has_m) {
    if (values[0]->numel() != 1)
      throw UserError(where + ": the trip count M is " + values[0]->describe() + ", not a scalar");
    m = values[0]->load_int(0);
  }
  bool cond = values[1] ? truth(*values[1], where + ": the condition") : true;
  std::vector<Tensor> state;
  for (size_t k = 0; k < carried; ++k) {
    if (!values[2 + k])
      throw UserError(where + ": carried value " + std::to_string(k) + " is absent");
    state.push_back(*values[2 + k]);
  }
  std::vector<std::vector<Tensor>> pieces(scans);
  std::vector<Tensor> args(2 + carried);
  for (size_t k = inputs; k < values.size(); ++k) args.push_back(*values[k]);
  const int64_t bound = has_m ? 0 : max_loop_iterations();
  for (int64_t i = 0; (!has_m || i < m) && cond; ++i) {
    if (!has_m && i >= bound) {
      throw UserError(where + ": the condition is still true after " + std::to_string(i) +
                      " iterations and the Loop has no trip count M; kiln stops such loops "
                      "there (KILN_MAX_LOOP_ITERATIONS sets the bound)");
    }
    args[0] = Tensor::scalar(DType::kInt64, static_cast<double>(i));
    args[1] = Tensor::scalar(DType::kBool, 1);
    for (size_t k = 0; k < carried; ++k) args[2 + k] = std::move(state[k]);
    std::vector<Tensor> outs = body(args);
    check_outputs(outs, 1 + carried + scans, where);
    cond = truth(outs[0], where + ": the body's condition at iteration " + std::to_string(i));
    for (size_t k = 0; k < carried; ++k) state[k] = std::move(outs[1 + k]);
    for (size_t k = 0; k < scans; ++k) pieces[k].push_back(std::move(outs[1 + carried + k]));
  }
  std::vector<Tensor> result = std::move(state);
  for (size_t k = 0; k < scans; ++k) {
    result.push_back(stack(pieces[k], 0, false, types[carried + k],
                           where + ": scan output " + std::to_string(k)));
  }
  return result;
}

namespace {

struct ScanPlan {
  size_t states = 0;
  std::vector<int64_t> in_axes, in_dirs, out_axes, out_dirs;
};

// One unbatched scan: `states` then the scan inputs in `args_in`; outer values follow.
std::vector<Tensor> scan_once(const BodyFunction& body, const ScanPlan& p,
                              const std::vector<Tensor>& states, const std::vector<Tensor>& xs,
                              const std::vector<Tensor>& outer,
                              const std::vector<TensorType>& out_types, const std::string& where) {
  int64_t length = -1;
  for (size_t k = 0; k < xs.size(); ++k) {
    const int64_t axis = p.in_axes[k];
    if (axis >= xs[k].ndim())
      throw UserError(where + ": scan input " + std::to_string(k) + " " + xs[k].describe() +
                      " has no axis " + std::to_string(axis));
    const int64_t len = xs[k].shape()[static_cast<size_t>(axis)];
    if (length >= 0 && len != length) {
      throw UserError(where + ": scan input " + std::to_string(k) + " has " + std::to_string(len) +
                      " steps, scan input 0 has " + std::to_string(length));
    }
    length = len;
  }
  const size_t scans_out = out_types.size() - p.states;
  std::vector<Tensor> state = states;
  std::vector<std::vector<Tensor>> pieces(scans_out);
  std::vector<Tensor> args(p.states + xs.size());
  args.insert(args.end(), outer.begin(), outer.end());
  for (int64_t t = 0; t < length; ++t) {
    for (size_t k = 0; k < p.states; ++k) args[k] = std::move(state[k]);
    for (size_t k = 0; k < xs.size(); ++k)
      args[p.states + k] = take(xs[k], p.in_axes[k], p.in_dirs[k] ? length - 1 - t : t);
    std::vector<Tensor> outs = body(args);
    check_outputs(outs, out_types.size(), where);
    for (size_t k = 0; k < p.states; ++k) state[k] = std::move(outs[k]);
    for (size_t k = 0; k < scans_out; ++k) pieces[k].push_back(std::move(outs[p.states + k]));
  }
  std::vector<Tensor> result = std::move(state);
  for (size_t k = 0; k < scans_out; ++k) {
    result.push_back(stack(pieces[k], p.out_axes[k], p.out_dirs[k] != 0, out_types[p.states + k],
                           where + ": scan output " + std::to_string(k)));
  }
  return result;
}

}  // namespace

std::vector<Tensor> run_scan(const BodyFunction& body, const std::vector<const Tensor*>& values,
                             const std::vector<TensorType>& types, const Attrs& attrs,
                             const std::string& where) {
  ScanPlan p;
  const size_t inputs = static_cast<size_t>(attr_int(attrs, "inputs"));
  const bool batched = attr_int(attrs, "batched", 0) != 0;
  p.states = static_cast<size_t>(attr_int(attrs, "states"));
  p.in_axes = attr_ints(attrs, "input_axes");
  p.in_dirs = attr_ints(attrs, "input_directions");
  p.out_axes = attr_ints(attrs, "output_axes");
  p.out_dirs = attr_ints(attrs, "output_directions");
  const size_t first = batched ? 1 : 0;
  if (values.size() < inputs || inputs < first + p.states)
    throw InternalError(where + ": Scan's values");
  std::vector<Tensor> states, xs, outer;
  for (size_t k = first; k < inputs; ++k) {
    if (!values[k]) throw UserError(where + ": input " + std::to_string(k) + " is absent");
    (k < first + p.states ? states : xs).push_back(*values[k]);
  }
  for (size_t k = inputs; k < values.size(); ++k) outer.push_back(*values[k]);
  if (!batched) return scan_once(body, p, states, xs, outer, types, where);

  // Opset 8: every input has a batch axis 0; each batch element scans on its own.
  const int64_t batch = (states.empty() ? xs : states).front().shape().at(0);
  for (const auto* group : {&states, &xs}) {
    for (const Tensor& t : *group) {
      if (t.ndim() < 1 || t.shape()[0] != batch)
        throw UserError(where + ": " + t.describe() + " does not share the batch size " +
                        std::to_string(batch));
    }
  }
  if (values[0]) {
    const int64_t steps = xs.front().ndim() > 1 ? xs.front().shape()[1] : 0;
    for (int64_t b = 0; b < values[0]->numel(); ++b) {
      if (values[0]->load_int(b) != steps) {
        throw UnsupportedError(where + ": sequence_lens entry " + std::to_string(b) + " is " +
                               std::to_string(values[0]->load_int(b)) + ", not the full " +
                               std::to_string(steps) + " steps (padded batches are not supported)");
      }
    }
  }
  std::vector<TensorType> unbatched = types;
  for (TensorType& t : unbatched) t.dims.erase(t.dims.begin());
  std::vector<std::vector<Tensor>> per_output(types.size());
  for (int64_t b = 0; b < batch; ++b) {
    std::vector<Tensor> s, x;
    for (const Tensor& t : states) s.push_back(take(t, 0, b));
    for (const Tensor& t : xs) x.push_back(take(t, 0, b));
    std::vector<Tensor> outs = scan_once(body, p, s, x, outer, unbatched, where);
    for (size_t k = 0; k < outs.size(); ++k) per_output[k].push_back(std::move(outs[k]));
  }
  std::vector<Tensor> result;
  for (size_t k = 0; k < types.size(); ++k)
    result.push_back(
        stack(per_output[k], 0, false, types[k], where + ": output " + std::to_string(k)));
  return result;
}

std::vector<Tensor> run_if(const BodyFunction& then_branch, const BodyFunction& else_branch,
                           const std::vector<const Tensor*>& values, const std::string& where) {
  if (values.empty() || !values[0]) throw UserError(where + ": the If has no condition");
  std::vector<Tensor> outer;
  for (size_t k = 1; k < values.size(); ++k) outer.push_back(*values[k]);
  return truth(*values[0], where + ": the condition") ? then_branch(outer) : else_branch(outer);
}

}  // namespace kiln
