#include "rewrite/autodiff/grad.h"

#include <map>
#include <set>
#include <unordered_map>
#include <unordered_set>

#include "ops/builders.h"
#include "ops/grad/support.h"
#include "util/error.h"

namespace kiln {
namespace {

// The variables the cost depends on (itself included).
std::unordered_set<const Variable*> ancestors(const Variable* cost) {
  std::unordered_set<const Variable*> seen{cost};
  std::vector<const Variable*> stack{cost};
  while (!stack.empty()) {
    const Variable* v = stack.back();
    stack.pop_back();
    if (v->kind != VarKind::kNodeOutput || !v->owner) continue;
    for (const Variable* in : v->owner->inputs) {
      if (seen.insert(in).second) stack.push_back(in);
    }
  }
  return seen;
}

// The variables that depend on any of `wrt` (themselves included), in one forward sweep:
// nodes are in topological order.
std::unordered_set<const Variable*> descendants(const Graph& g, const std::vector<Variable*>& wrt) {
  std::unordered_set<const Variable*> seen(wrt.begin(), wrt.end());
  for (const auto& node : g.nodes()) {
    bool hit = false;
    for (const Variable* in : node->inputs) hit = hit || seen.count(in);
    if (hit) {
      for (const Variable* out : node->outputs) seen.insert(out);
    }
  }
  return seen;
}

Var sum_terms(Graph& g, const std::vector<Variable*>& terms) {
  Var total(&g, terms[0]);
  for (size_t i = 1; i < terms.size(); ++i) total = add(total, Var(&g, terms[i]));
  return total;
}

void check_grad_type(const Node& node, size_t i, const Variable* x, const Variable* gx) {
  bool ok = gx->type.dtype == x->type.dtype && gx->type.rank() == x->type.rank();
  for (int d = 0; ok && d < x->type.rank(); ++d) {
    const int64_t a = x->type.dims[static_cast<size_t>(d)],
                  b = gx->type.dims[static_cast<size_t>(d)];
    ok = a == kDynamic || b == kDynamic || a == b;
  }
  check_internal(ok, "grad: " + node.label() + ": the gradient of input " + std::to_string(i) +
                         " has type " + gx->type.to_string() + ", the input " +
                         x->type.to_string());
}

}  // namespace

std::vector<Variable*> grad(Graph& g, Variable* cost, const std::vector<Variable*>& wrt,
                            Variable* seed) {
  if (!cost) throw UserError("grad: no cost");
  if (!is_float(cost->type.dtype)) {
    throw UserError("grad: the cost '" + cost->name + "' is " + cost->type.to_string() +
                    "; it must be floating point");
  }
  Var seed_var;
  if (seed) {
    if (seed->type.dtype != cost->type.dtype || seed->type.rank() != cost->type.rank()) {
      throw UserError("grad: the seed '" + seed->name + "' (" + seed->type.to_string() +
                      ") does not match the cost '" + cost->name + "' (" + cost->type.to_string() +
                      ")");
    }
    seed_var = Var(&g, seed);
  } else {
    if (cost->type.rank() != 0) {
      throw UserError("grad: the cost '" + cost->name + "' has type " + cost->type.to_string() +
                      "; it must be a scalar (rank 0): reduce it first, e.g. with reduce_sum");
    }
    seed_var = scalar(g, cost->type.dtype, 1.0);
  }
  for (const Variable* w : wrt) {
    if (!w) throw UserError("grad: a null wrt variable");
    if (!is_float(w->type.dtype)) {
      throw UserError("grad: '" + w->name + "' is " + w->type.to_string() +
                      "; only floating-point values have gradients");
    }
  }

  const auto up = ancestors(cost);
  const auto down = descendants(g, wrt);
  auto relevant = [&](const Variable* v) { return up.count(v) && down.count(v); };

  std::unordered_map<const Variable*, std::vector<Variable*>> terms;
  terms[cost].push_back(seed_var.var());
  // Values whose gradient is known to be zero (a hook said so), and the first
  // non-differentiable edge met behind each value that got no gradient.
  std::unordered_set<const Variable*> zero;
  std::unordered_map<const Variable*, std::string> blocked;

  const size_t forward_nodes = g.nodes().size();
  for (size_t k = forward_nodes; k-- > 0;) {
    const Node& node = *g.nodes()[k];
    bool any_in = false;
    for (const Variable* in : node.inputs) any_in = any_in || relevant(in);
    if (!any_in) continue;
    GradArgs args{g, node, {}, {}};
    bool any_grad = false;
    std::string why_blocked;
    bool any_zero = false;
    for (const Variable* out : node.outputs) {
      auto it = terms.find(out);
      if (it != terms.end() && !it->second.empty()) {
        args.output_grads.push_back(sum_terms(g, it->second).var());
        any_grad = true;
      } else {
        args.output_grads.push_back(nullptr);
        any_zero = any_zero || zero.count(out);
        if (blocked.count(out) && why_blocked.empty()) why_blocked = blocked[out];
      }
    }
    for (size_t i = 0; i < node.inputs.size(); ++i) {
      const Variable* in = node.inputs[i];
      const bool want = relevant(in) && is_float(in->type.dtype);
      args.wanted.push_back(want && any_grad);
      if (!relevant(in)) continue;
      // Marks for inputs no gradient reaches through this node.
      if (!is_float(in->type.dtype)) {
        // An integer or boolean value carries no gradient.
        if (!blocked.count(in)) {
          blocked[in] = node.label() + ": input " + std::to_string(i) + " '" + in->name + "' is " +
                        in->type.to_string() + ", which carries no gradient";
        }
      } else if (!any_grad) {
        if (any_zero) zero.insert(in);
        if (!why_blocked.empty() && !blocked.count(in)) blocked[in] = why_blocked;
      }
    }
    if (!any_grad) continue;
    std::vector<Variable*> gin = node.op->grad(args);
    check_internal(gin.size() == node.inputs.size(),
                   "grad: " + node.label() + ": the grad hook returned " +
                       std::to_string(gin.size()) + " gradients for " +
                       std::to_string(node.inputs.size()) + " inputs");
    for (size_t i = 0; i < gin.size(); ++i) {
      if (!args.wanted[i]) continue;
      if (!gin[i]) {
        zero.insert(node.inputs[i]);
        continue;
      }
      check_grad_type(node, i, node.inputs[i], gin[i]);
      terms[node.inputs[i]].push_back(gin[i]);
    }
  }

  std::vector<Variable*> result;
  for (Variable* w : wrt) {
    auto it = terms.find(w);
    if (it != terms.end() && !it->second.empty()) {
      result.push_back(sum_terms(g, it->second).var());
      continue;
    }
    if (up.count(w) && !zero.count(w)) {
      const auto b = blocked.find(w);
      throw UserError("grad: the cost '" + cost->name + "' depends on '" + w->name +
                      "' only through values without a gradient" +
                      (b != blocked.end() ? " (" + b->second + ")" : std::string()));
    }
    result.push_back(zeros_like(Var(&g, w)).var());
  }
  return result;
}

}  // namespace kiln
