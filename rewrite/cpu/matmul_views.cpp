// Views: a matmul reads its operands through the reshapes, transposes, constant-index
// gathers and slices in front of it instead of their copies. Exported attention splits the
// qkv product into heads with a chain of such steps (ViT: transpose, gather per head, reshape,
// transpose; GPT: slice, reshape, transpose) and feeds the results to QK^T and attention x V;
// each step copied the whole activation. The matmul reads any strides already, so the chain
// becomes one strided view of the chain's source (ops/operand_view.h) and the steps die
// unless something else reads them. A multiply by a scalar constant on the way (the 1/sqrt(d)
// scale of q) becomes the product's alpha. On the way out, a transpose that alone reads the
// product and keeps its last axis last (the heads back to rows) becomes the matmul's
// out_perm: the kernel stores each head's matrix at its place in the rows. A transpose whose
// chain of reshapes and transposes leaves its source's element order is a reshape of it.
//
// A view composes only where each step is an affine map of the elements: a reshape that
// keeps every merged group of dimensions evenly strided, any transpose, a gather of one
// constant index, a slice with static bounds and positive steps.
#include <numeric>
#include <unordered_map>
#include <unordered_set>

#include "ops/operand_view.h"
#include "ops/registry.h"
#include "rewrite/graph_copy.h"
#include "rewrite/passes.h"

namespace kiln {
namespace {

bool all_static(const std::vector<int64_t>& dims) {
  for (int64_t d : dims) {
    if (d < 0) return false;
  }
  return true;
}

OperandView contiguous(const std::vector<int64_t>& dims) {
  OperandView v;
  v.dims = dims;
  v.strides.assign(dims.size(), 1);
  for (int d = static_cast<int>(dims.size()) - 2; d >= 0; --d) {
    v.strides[static_cast<size_t>(d)] =
        v.strides[static_cast<size_t>(d) + 1] * dims[static_cast<size_t>(d) + 1];
  }
  return v;
}

// The view under new dimensions, where every group of old dimensions that merges into new
// ones is evenly strided; nothing otherwise.
std::optional<OperandView> reshaped(const OperandView& v, const std::vector<int64_t>& to) {
  const int64_t n = std::accumulate(v.dims.begin(), v.dims.end(), int64_t{1}, std::multiplies<>());
  if (n != std::accumulate(to.begin(), to.end(), int64_t{1}, std::multiplies<>())) return {};
  OperandView r;
  r.offset = v.offset;
  r.dims = to;
  if (n == 0) {
    r.strides.assign(to.size(), 0);
    return r;
  }
  r.strides.assign(to.size(), 0);
  // Walk both shapes from the innermost dimension: each run of old dimensions that are
  // contiguous with one another (stride of one = size x stride of the next) is a chunk the
  // new dimensions must split exactly.
  int nd = static_cast<int>(to.size()) - 1;
  int64_t chunk_stride = v.strides.empty() ? 1 : v.strides.back(), old_n = 1, new_n = 1;
  for (int od = static_cast<int>(v.dims.size()) - 1; od >= 0; --od) {
    const auto o = static_cast<size_t>(od);
    old_n *= v.dims[o];
    const bool chunk_ends =
        od == 0 || (v.dims[o - 1] != 1 && v.strides[o - 1] != old_n * chunk_stride);
    if (!chunk_ends) continue;
    while (nd >= 0 && (new_n < old_n || to[static_cast<size_t>(nd)] == 1)) {
      r.strides[static_cast<size_t>(nd)] = new_n * chunk_stride;
      new_n *= to[static_cast<size_t>(nd)];
      --nd;
    }
    if (new_n != old_n) return {};
    if (od > 0) {
      chunk_stride = v.strides[o - 1];
      old_n = new_n = 1;
    }
  }
  // Leading ones of the new shape.
  while (nd >= 0) {
    if (to[static_cast<size_t>(nd)] != 1) return {};
    r.strides[static_cast<size_t>(nd--)] = 0;
  }
  return r;
}

// The integer value of a one-element constant that is not a weight, or nothing.
std::optional<int64_t> constant_index(const Variable* v) {
  if (v->kind != VarKind::kConstant || v->parameter || !v->value || v->value->numel() != 1 ||
      is_float(v->type.dtype)) {
    return {};
  }
  return v->value->load_int(0);
}

// The view after one movement node (its data input viewed as `v`), or nothing when the
// node is no movement step this pass follows or its effect is no view.
std::optional<OperandView> through(const Node& node, const OperandView& v) {
  const std::string& name = node.op->name();
  const Attrs& p = node.op->props();
  const auto& out = node.outputs[0]->type.dims;
  if (!all_static(out)) return {};
  if (name == "reshape") return reshaped(v, out);
  if (name == "transpose") {
    auto perm = attr_ints(p, "perm", std::vector<int64_t>{});
    if (perm.empty()) {
      for (int d = static_cast<int>(v.dims.size()) - 1; d >= 0; --d) perm.push_back(d);
    }
    if (perm.size() != v.dims.size()) return {};
    OperandView r;
    r.offset = v.offset;
    for (int64_t d : perm) {
      r.dims.push_back(v.dims.at(static_cast<size_t>(d)));
      r.strides.push_back(v.strides.at(static_cast<size_t>(d)));
    }
    return r;
  }
  if (name == "gather" && node.inputs.size() == 2) {
    auto index = constant_index(node.inputs[1]);
    int64_t axis = attr_int(p, "axis", 0);
    const auto rank = static_cast<int64_t>(v.dims.size());
    if (axis < 0) axis += rank;
    if (!index || axis < 0 || axis >= rank) return {};
    const auto a = static_cast<size_t>(axis);
    const int64_t i = *index < 0 ? *index + v.dims[a] : *index;
    if (i < 0 || i >= v.dims[a]) return {};
    OperandView r = v;
    r.offset += i * v.strides[a];
    if (node.inputs[1]->type.rank() == 0) {
      r.dims.erase(r.dims.begin() + axis);
      r.strides.erase(r.strides.begin() + axis);
    } else {
      r.dims[a] = 1;
    }
    return r.dims == out ? std::optional<OperandView>(r) : std::nullopt;
  }
  if (name == "slice" && node.inputs.size() == 1 && !p.count("starts_dims") &&
      !p.count("ends_dims")) {
    const auto starts = attr_ints(p, "starts");
    auto axes = attr_ints(p, "axes", std::vector<int64_t>{});
    auto steps = attr_ints(p, "steps", std::vector<int64_t>{});
    if (axes.empty()) {
      for (size_t k = 0; k < starts.size(); ++k) axes.push_back(static_cast<int64_t>(k));
    }
    if (steps.empty()) steps.assign(starts.size(), 1);
    if (axes.size() != starts.size() || steps.size() != starts.size()) return {};
    OperandView r = v;
    const auto rank = static_cast<int64_t>(v.dims.size());
    for (size_t k = 0; k < starts.size(); ++k) {
      const int64_t axis = axes[k] < 0 ? axes[k] + rank : axes[k];
      if (axis < 0 || axis >= rank || steps[k] <= 0) return {};
      const auto a = static_cast<size_t>(axis);
      const int64_t start =
          std::clamp(starts[k] < 0 ? starts[k] + v.dims[a] : starts[k], int64_t{0}, v.dims[a]);
      if (out.size() != v.dims.size()) return {};
      r.dims[a] = out[a];  // the output type holds the length the bounds give
      if (out[a] > 0) r.offset += start * v.strides[a];
      r.strides[a] = v.strides[a] * steps[k];
    }
    return r.dims == out ? std::optional<OperandView>(r) : std::nullopt;
  }
  return {};
}

bool copies(const Node& node) { return node.op->name() != "reshape"; }

// A matmul operand read through views: its source, the view, and the scalar the chain
// multiplied by.
struct Operand {
  const Variable* source = nullptr;
  OperandView view;
  double scale = 1.0;
  bool worth = false;  // the chain holds a step that copies (or a scale)
};

// The scale of mul(x, c) with c a one-element float constant that is not a weight: c, and x.
std::optional<std::pair<double, const Variable*>> scaled(const Node& node) {
  if (node.op->name() != "mul" || node.inputs.size() != 2) return {};
  for (int k = 0; k < 2; ++k) {
    const Variable* c = node.inputs[static_cast<size_t>(1 - k)];
    const Variable* x = node.inputs[static_cast<size_t>(k)];
    if (c->kind == VarKind::kConstant && !c->parameter && c->value && c->value->numel() == 1 &&
        c->type.dtype == x->type.dtype && x->type.dims == node.outputs[0]->type.dims) {
      return std::make_pair(c->value->load(0), x);
    }
  }
  return {};
}

bool movement(const Node& n) {
  const std::string& name = n.op->name();
  return name == "reshape" || name == "transpose" || name == "gather" || name == "slice";
}

Operand operand(const Variable* v) {
  // The chain of movement steps and scalar multiplies back from the operand.
  std::vector<const Node*> chain;
  const Variable* at = v;
  while (at->kind == VarKind::kNodeOutput && at->owner && all_static(at->type.dims)) {
    const Node& n = *at->owner;
    if (auto s = scaled(n)) {
      at = s->second;
    } else if (movement(n)) {
      at = n.inputs[0];
    } else {
      break;
    }
    chain.push_back(&n);
  }
  // Forward from the source, a value a step made (graph inputs and constants may arrive
  // with strides of their own); where a step is no view, the view starts again after it.
  Operand r;
  r.source = at;
  std::optional<OperandView> view;
  if (at->kind == VarKind::kNodeOutput && all_static(at->type.dims)) {
    view = contiguous(at->type.dims);
  }
  for (auto it = chain.rbegin(); it != chain.rend(); ++it) {
    const Node& n = **it;
    const auto s = scaled(n);
    std::optional<OperandView> next = !view ? std::nullopt : s ? view : through(n, *view);
    if (next) {
      view = next;
      if (s) r.scale *= s->first;
      r.worth = r.worth || s || copies(n);
    } else {
      r.source = n.outputs[0];
      view = contiguous(r.source->type.dims);
      r.scale = 1.0;
      r.worth = false;
    }
  }
  if (!view) return Operand{v, {}, 1.0, false};
  r.view = *view;
  return r;
}

// The transpose that alone reads a matmul's output (not a graph output) and keeps its last
// axis last: the matmul can store through it (out_perm).
const Node* output_transpose(const Node& mm, const std::unordered_map<const Variable*, int>& uses,
                             const std::unordered_map<const Variable*, const Node*>& reader,
                             const Graph& graph) {
  const Variable* out = mm.outputs[0];
  auto u = uses.find(out);
  auto r = reader.find(out);
  if (u == uses.end() || u->second != 1 || r == reader.end() || is_graph_output(graph, out)) {
    return nullptr;
  }
  const Node& t = *r->second;
  if (t.op->name() != "transpose" || t.inputs.size() != 1) return nullptr;
  auto perm = attr_ints(t.op->props(), "perm", std::vector<int64_t>{});
  const auto rank = static_cast<int64_t>(out->type.rank());
  if (rank < 2 || static_cast<int64_t>(perm.size()) != rank || perm.back() != rank - 1) {
    return nullptr;
  }
  return &t;
}

// The value a transpose and the reshapes and transposes before it leave in its own element
// order, or nothing: the transpose is then a reshape of it. A patch embedding's
// (1, 14, 14, 384) -> NCHW -> (1, 384, 196) -> (1, 196, 384) round trip copies twice for
// nothing; so does an NHWC model's every return to NHWC.
const Variable* order_kept(const Node& t) {
  if (!all_static(t.outputs[0]->type.dims)) return nullptr;
  std::vector<const Node*> chain{&t};
  const Variable* at = t.inputs[0];
  while (at->kind == VarKind::kNodeOutput && at->owner && all_static(at->type.dims) &&
         (at->owner->op->name() == "reshape" || at->owner->op->name() == "transpose")) {
    chain.push_back(at->owner);
    at = at->owner->inputs[0];
  }
  const Variable* source = at;
  std::optional<OperandView> view;
  if (all_static(at->type.dims)) view = contiguous(at->type.dims);
  for (auto it = chain.rbegin(); it != chain.rend(); ++it) {
    std::optional<OperandView> next = view ? through(**it, *view) : std::nullopt;
    if (next) {
      view = next;
    } else {
      source = (*it)->outputs[0];
      view = contiguous(source->type.dims);
    }
  }
  const OperandView want = contiguous(t.outputs[0]->type.dims);
  if (source == t.outputs[0] || !view || view->offset != 0) return nullptr;
  for (size_t d = 0; d < want.dims.size(); ++d) {
    if (want.dims[d] != 1 && view->strides[d] != want.strides[d]) return nullptr;
  }
  return source;
}

}  // namespace

Graph view_matmul_operands(const Graph& graph) {
  const auto uses = count_uses(graph);
  std::unordered_map<const Variable*, const Node*> reader;
  for (const auto& node : graph.nodes()) {
    for (const Variable* v : node->inputs) reader[v] = node.get();
  }
  GraphCopy copy(graph);
  std::unordered_set<const Node*> absorbed;  // transposes a matmul now stores through
  for (const auto& node : graph.nodes()) {
    if (absorbed.count(node.get())) continue;
    if (node->op->name() == "transpose" && node->inputs.size() == 1) {
      if (const Variable* source = order_kept(*node)) {
        copy.add(OpRegistry::instance().create("reshape", {{"shape", node->outputs[0]->type.dims}}),
                 {copy.map(source)}, {node->outputs[0]}, node->name);
        continue;
      }
    }
    if (node->op->name() != "matmul" || node->inputs.size() != 2 ||
        !is_float(node->outputs[0]->type.dtype) || !node->op->props().empty()) {
      copy.copy(*node);
      continue;
    }
    Operand a = operand(node->inputs[0]), b = operand(node->inputs[1]);
    const int rank_a =
        a.worth ? static_cast<int>(a.view.dims.size()) : node->inputs[0]->type.rank();
    const int rank_b =
        b.worth ? static_cast<int>(b.view.dims.size()) : node->inputs[1]->type.rank();
    const Node* t =
        rank_a >= 2 && rank_b >= 2 ? output_transpose(*node, uses, reader, graph) : nullptr;
    if (!a.worth && !b.worth && !t) {
      copy.copy(*node);
      continue;
    }
    Attrs props;
    std::vector<Variable*> inputs;
    for (int k = 0; k < 2; ++k) {
      const Operand& o = k == 0 ? a : b;
      if (!o.worth) {
        inputs.push_back(copy.map(node->inputs[static_cast<size_t>(k)]));
        continue;
      }
      const OperandView whole = contiguous(o.source->type.dims);
      if (o.view.offset != 0 || o.view.dims != whole.dims || o.view.strides != whole.strides) {
        props[k == 0 ? "a_view" : "b_view"] = o.view.encode();
      }
      inputs.push_back(copy.map(o.source));
    }
    const double alpha = (a.worth ? a.scale : 1.0) * (b.worth ? b.scale : 1.0);
    if (alpha != 1.0) props["alpha"] = alpha;
    const Variable* result = node->outputs[0];
    if (t) {
      props["out_perm"] = attr_ints(t->op->props(), "perm");
      absorbed.insert(t);
      result = t->outputs[0];
    }
    copy.add(OpRegistry::instance().create("matmul", props), inputs, {result}, node->name);
  }
  return copy.finish();
}

}  // namespace kiln
