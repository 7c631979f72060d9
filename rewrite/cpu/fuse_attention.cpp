// Attention fusion: scores = matmul(q, k) (with the views pass's operand views and scale),
// weights = softmax(scores, last axis), out = matmul(weights, v) becomes one attention node
// (ops/attention.h) when only the softmax reads the scores and only the second product reads
// the weights. The three steps each passed every head's scores (ViT: 6 x 197 x 197 floats,
// 0.9 MB per block) through memory; the fused step keeps a block of rows' scores in L2.
//
// Float32 only (the fused kernel's softmax is the 8-lane float row), static shapes, and the
// three operands of one rank with the same batch dimensions (no broadcasting). The weights
// must be the second product's whole left operand: a view or scale there stays unfused.
//
// A decoder's causal chain (the product scaled, then where(mask, -inf, .), then the softmax)
// keeps its steps. Fused, with the attention op's mask input and the scale as alpha, the zoo's
// GPT decoder (128 tokens: its scores stay in cache unfused) ran 3-6% slower than unfused in
// three alternations of 12-16 pairs, where ViT's unmasked attention runs at 0.82.
#include <unordered_map>
#include <unordered_set>

#include "ops/attention.h"
#include "ops/operand_view.h"
#include "rewrite/graph_copy.h"
#include "rewrite/passes.h"

namespace kiln {
namespace {

struct Match {
  const Node* scores;
  const Node* softmax;
  Attrs props;
};

std::optional<Match> match(const Graph& graph, const Node& out,
                           const std::unordered_map<const Variable*, int>& uses) {
  if (out.op->name() != "matmul" || out.inputs.size() != 2) return std::nullopt;
  const Attrs& op2 = out.op->props();
  if (op2.count("a_view") || attr_float(op2, "alpha", 1.0) != 1.0) return std::nullopt;
  const Node* sm = produced_by(out.inputs[0], "softmax");
  const Node* mm = sm ? produced_by(sm->inputs[0], "matmul") : nullptr;
  if (!mm || mm->inputs.size() != 2 || mm->op->props().count("out_perm")) return std::nullopt;
  const int rank = sm->outputs[0]->type.rank();
  const int64_t axis = attr_int(sm->op->props(), "axis", -1);
  if (rank < 2 || (axis != -1 && axis != rank - 1)) return std::nullopt;
  auto once = [&](const Variable* v) {
    auto it = uses.find(v);
    return it != uses.end() && it->second == 1 && !is_graph_output(graph, v);
  };
  if (!once(mm->outputs[0]) || !once(sm->outputs[0])) return std::nullopt;
  for (const Variable* v : {mm->inputs[0], mm->inputs[1], out.inputs[1], out.outputs[0]}) {
    if (v->type.dtype != DType::kFloat32 || !v->type.is_static()) return std::nullopt;
  }
  Attrs props;
  const Attrs& op1 = mm->op->props();
  if (op1.count("a_view")) props["q_view"] = op1.at("a_view");
  if (op1.count("b_view")) props["k_view"] = op1.at("b_view");
  if (op1.count("alpha")) props["alpha"] = op1.at("alpha");
  if (op2.count("b_view")) props["v_view"] = op2.at("b_view");
  if (op2.count("out_perm")) props["out_perm"] = op2.at("out_perm");
  if (attr_int(sm->op->props(), "safe", 0) != 0) props["safe"] = int64_t{1};
  // The fused op checks ranks, batch and inner dimensions; a pair it refuses stays as is.
  try {
    Attention fused(props);
    const auto t =
        fused.infer_type({mm->inputs[0]->type, mm->inputs[1]->type, out.inputs[1]->type});
    if (!(t[0] == out.outputs[0]->type)) return std::nullopt;
  } catch (const UserError&) {
    return std::nullopt;
  }
  return Match{mm, sm, std::move(props)};
}

}  // namespace

Graph fuse_attention(const Graph& graph) {
  const auto uses = count_uses(graph);
  std::unordered_map<const Node*, Match> matches;  // second product -> its chain
  std::unordered_set<const Node*> absorbed;
  for (const auto& node : graph.nodes()) {
    auto m = match(graph, *node, uses);
    if (!m) continue;
    absorbed.insert(m->scores);
    absorbed.insert(m->softmax);
    matches.emplace(node.get(), std::move(*m));
  }
  GraphCopy copy(graph);
  for (const auto& node : graph.nodes()) {
    if (absorbed.count(node.get())) continue;
    auto it = matches.find(node.get());
    if (it == matches.end()) {
      copy.copy(*node);
      continue;
    }
    const Match& m = it->second;
    copy.add(
        std::make_shared<Attention>(m.props),
        {copy.map(m.scores->inputs[0]), copy.map(m.scores->inputs[1]), copy.map(node->inputs[1])},
        {node->outputs[0]}, node->name);
  }
  return copy.finish();
}

}  // namespace kiln
