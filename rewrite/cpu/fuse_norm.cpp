// Layer-norm fusion: the chain the ONNX importer writes for LayerNormalization,
//   m = reduce_mean(x); d = x - m; v = reduce_mean(d * d); inv = reciprocal(sqrt(v + eps));
//   y = d * inv
// (both means over the same trailing axes, kept), becomes one layer_norm node when nothing
// else reads its intermediate values. Five steps and three slice-sized temporaries become
// one pass per slice; a transformer runs one per block and sublayer.
#include <cmath>
#include <map>
#include <optional>
#include <set>
#include <unordered_map>

#include "ops/layer_norm.h"
#include "rewrite/graph_copy.h"
#include "rewrite/passes.h"

namespace kiln {
namespace {

// The trailing axes [axis, rank) a keepdims mean reduces, as `axis`; -1 if it is another mean.
int trailing_mean_axis(const Node& mean) {
  const int rank = mean.inputs[0]->type.rank();
  if (attr_int(mean.op->props(), "keepdims", 1) != 1 || rank < 1) return -1;
  std::vector<int64_t> axes = attr_ints(mean.op->props(), "axes", std::vector<int64_t>{});
  if (axes.empty()) return -1;
  std::set<int64_t> set;
  for (int64_t a : axes) set.insert(a < 0 ? a + rank : a);
  const int axis = static_cast<int>(*set.begin());
  if (axis < 0 || *set.rbegin() != rank - 1 || static_cast<int>(set.size()) != rank - axis)
    return -1;
  return axis;
}

struct Chain {
  const Variable* x;
  int axis;
  double eps;
  std::vector<const Node*> absorbed;  // every node of the chain but the final mul
};

// The chain ending at `y` (a mul), if it is one whose inner values only it reads.
std::optional<Chain> match(const Graph& graph, const Node& y,
                           const std::unordered_map<const Variable*, int>& uses) {
  if (y.op->name() != "mul" || y.inputs.size() != 2 || y.outputs.size() != 1) return std::nullopt;
  const DType dt = y.outputs[0]->type.dtype;
  if (dt != DType::kFloat32 && dt != DType::kFloat64) return std::nullopt;
  for (int order = 0; order < 2; ++order) {
    const Variable* d = y.inputs[order];
    const Variable* inv = y.inputs[1 - order];
    const Node* sub = produced_by(d, "sub");
    const Node* rec = produced_by(inv, "reciprocal");
    if (!sub || !rec) continue;
    const Node* root = produced_by(rec->inputs[0], "sqrt");
    const Node* add = root ? produced_by(root->inputs[0], "add") : nullptr;
    if (!add) continue;
    const Variable* eps_v = add->inputs[1];
    const Node* var = produced_by(add->inputs[0], "reduce_mean");
    if (!var) {
      eps_v = add->inputs[0];
      var = produced_by(add->inputs[1], "reduce_mean");
    }
    // epsilon becomes a prop: a parameter (which a run may replace) stays a chain.
    if (!var || eps_v->kind != VarKind::kConstant || eps_v->parameter || !eps_v->value ||
        eps_v->value->numel() != 1)
      continue;
    const Node* sq = produced_by(var->inputs[0], "mul");
    if (!sq || sq->inputs[0] != d || sq->inputs[1] != d) continue;
    const Variable* x = sub->inputs[0];
    const Node* mean = produced_by(sub->inputs[1], "reduce_mean");
    if (!mean || mean->inputs[0] != x) continue;
    const int axis = trailing_mean_axis(*mean);
    if (axis < 0 || trailing_mean_axis(*var) != axis) continue;
    // Same shape and type in and out: no broadcasting hides in the sub or the final mul.
    if (!(x->type == y.outputs[0]->type) || !(d->type == x->type)) continue;
    const double eps = eps_v->value->load(0);
    if (!(eps >= 0) || !std::isfinite(eps)) continue;
    // d: read twice by the square and once by y; every other inner value once.
    auto only = [&](const Variable* v, int n) {
      auto it = uses.find(v);
      return it != uses.end() && it->second == n && !is_graph_output(graph, v);
    };
    if (!only(d, 3) || !only(mean->outputs[0], 1) || !only(sq->outputs[0], 1) ||
        !only(var->outputs[0], 1) || !only(add->outputs[0], 1) || !only(root->outputs[0], 1) ||
        !only(inv, 1))
      continue;
    return Chain{x, axis, eps, {mean, sub, sq, var, add, root, rec}};
  }
  return std::nullopt;
}

}  // namespace

Graph fuse_layer_norm(const Graph& graph) {
  const auto uses = count_uses(graph);
  std::map<const Node*, Chain> chains;  // final mul -> its chain
  std::set<const Node*> absorbed;
  for (const auto& node : graph.nodes()) {
    auto chain = match(graph, *node, uses);
    if (!chain) continue;
    for (const Node* n : chain->absorbed) absorbed.insert(n);
    chains.emplace(node.get(), std::move(*chain));
  }
  GraphCopy copy(graph);
  for (const auto& node : graph.nodes()) {
    if (absorbed.count(node.get())) continue;
    auto it = chains.find(node.get());
    if (it == chains.end()) {
      copy.copy(*node);
      continue;
    }
    const Chain& c = it->second;
    auto op = std::make_shared<LayerNorm>(
        Attrs{{"axis", static_cast<int64_t>(c.axis)}, {"epsilon", c.eps}});
    copy.add(op, {copy.map(c.x)}, {node->outputs[0]}, node->name);
  }
  return copy.finish();
}

}  // namespace kiln
