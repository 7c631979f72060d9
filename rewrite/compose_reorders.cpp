// transpose -> reshape -> transpose as one transpose between two reshapes: one copy of the
// tensor instead of two. The layout pass's reorder out of a blocked region (NCHW8c -> NCHW: a
// transpose and a reshape merging the blocks) meets a model's own NCHW -> NHWC transpose in
// every ConvNeXt-style block; blocked -> NHWC is one transpose.
//
// The reshape must only merge and split axes. Both reshaped shapes are refined into atoms (each
// axis of either a run of consecutive atoms); the first transpose carries the atoms back to
// its input's axes, the second forward to the output's; their composition is a permutation of
// atoms. Axes of size 1 move freely and are left to the reshapes. Applies where each link is
// read only by the next, every shape static.
#include <optional>
#include <unordered_map>

#include "ops/registry.h"
#include "ops/transpose.h"
#include "rewrite/graph_copy.h"
#include "rewrite/passes.h"

namespace kiln {
namespace {

struct Atom {
  int64_t size;
  size_t of1, of2;  // the axis of the reshape's input and of its output it belongs to
};

bool all_static(const std::vector<int64_t>& dims) {
  for (int64_t d : dims)
    if (d < 1) return false;
  return true;
}

// The atoms of s1 and s2 (same element count), size-1 axes left out; nullopt where an axis
// of one straddles two of the other without dividing them (a reshape that reorders blocks).
std::optional<std::vector<Atom>> refine(const std::vector<int64_t>& s1,
                                        const std::vector<int64_t>& s2) {
  std::vector<size_t> a1, a2;  // the axes of size > 1
  for (size_t i = 0; i < s1.size(); ++i)
    if (s1[i] > 1) a1.push_back(i);
  for (size_t j = 0; j < s2.size(); ++j)
    if (s2[j] > 1) a2.push_back(j);
  std::vector<Atom> atoms;
  size_t i = 0, j = 0;
  int64_t r1 = a1.empty() ? 1 : s1[a1[0]], r2 = a2.empty() ? 1 : s2[a2[0]];
  while (i < a1.size() && j < a2.size()) {
    const int64_t size = std::min(r1, r2);
    if (r1 % size != 0 || r2 % size != 0) return std::nullopt;
    atoms.push_back({size, a1[i], a2[j]});
    r1 /= size;
    r2 /= size;
    if (r1 == 1 && ++i < a1.size()) r1 = s1[a1[i]];
    if (r2 == 1 && ++j < a2.size()) r2 = s2[a2[j]];
  }
  if (i != a1.size() || j != a2.size()) return std::nullopt;
  return atoms;
}

// The transpose's permutation as the op reads it (an empty perm reverses the axes).
std::vector<int64_t> perm_of(const Node& t) {
  const auto& op = dynamic_cast<const Transpose&>(*t.op);
  const std::vector<int> p = op.perm_for(t.inputs[0]->type.rank());
  return {p.begin(), p.end()};
}

const Node* sole_producer(const Variable* v, const std::string& op,
                          const std::unordered_map<const Variable*, int>& uses) {
  if (v->kind != VarKind::kNodeOutput || !v->owner || v->owner->op->name() != op) return nullptr;
  auto it = uses.find(v);
  return it != uses.end() && it->second == 1 ? v->owner : nullptr;
}

}  // namespace

Graph compose_reorders(const Graph& graph) {
  const auto uses = count_uses(graph);

  GraphCopy copy(graph);
  for (const auto& node : graph.nodes()) {
    const Node* reshape = node->op->name() == "transpose" && node->inputs.size() == 1
                              ? sole_producer(node->inputs[0], "reshape", uses)
                              : nullptr;
    const Node* first = reshape && reshape->inputs.size() == 1
                            ? sole_producer(reshape->inputs[0], "transpose", uses)
                            : nullptr;
    std::optional<std::vector<Atom>> atoms;
    const Variable* x = first ? first->inputs[0] : nullptr;
    if (first && all_static(x->type.dims) && all_static(reshape->inputs[0]->type.dims) &&
        all_static(node->inputs[0]->type.dims) && all_static(node->outputs[0]->type.dims)) {
      atoms = refine(reshape->inputs[0]->type.dims, node->inputs[0]->type.dims);
    }
    if (!atoms) {
      copy.copy(*node);
      continue;
    }
    const std::vector<int64_t> p1 = perm_of(*first), p2 = perm_of(*node);
    // x's atoms: axis a of x is axis k of the first transpose's output where p1[k] == a.
    std::vector<size_t> x_order;
    std::vector<int64_t> x_shape;
    for (size_t a = 0; a < p1.size(); ++a) {
      for (size_t k = 0; k < p1.size(); ++k) {
        if (p1[k] != static_cast<int64_t>(a)) continue;
        for (size_t t = 0; t < atoms->size(); ++t) {
          if ((*atoms)[t].of1 == k) {
            x_order.push_back(t);
            x_shape.push_back((*atoms)[t].size);
          }
        }
      }
    }
    // The output's atoms: its axis m is axis p2[m] of the reshape's output.
    std::vector<int64_t> perm;
    for (int64_t m : p2) {
      for (size_t t = 0; t < atoms->size(); ++t) {
        if ((*atoms)[t].of2 != static_cast<size_t>(m)) continue;
        for (size_t q = 0; q < x_order.size(); ++q)
          if (x_order[q] == t) perm.push_back(static_cast<int64_t>(q));
      }
    }
    bool identity = true;
    for (size_t q = 0; q < perm.size(); ++q)
      identity = identity && perm[q] == static_cast<int64_t>(q);
    const OpRegistry& ops = OpRegistry::instance();
    Variable* v = copy.map(x);
    if (!identity) {
      Graph& dst = copy.dst();
      v = dst.add_node(ops.create("reshape", {{"shape", x_shape}}), {v}, node->name + ".atoms",
                       {dst.fresh_name(x->name + ".atoms")})
              ->outputs[0];
      v = dst.add_node(ops.create("transpose", {{"perm", perm}}), {v}, node->name + ".composed",
                       {dst.fresh_name(x->name + ".composed")})
              ->outputs[0];
    }
    copy.add(ops.create("reshape", {{"shape", node->outputs[0]->type.dims}}), {v},
             {node->outputs[0]}, node->name);
  }
  return copy.finish();
}

}  // namespace kiln
