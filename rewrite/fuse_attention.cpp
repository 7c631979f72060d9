// Attention fusion: scores = matmul(q, k) (with the views pass's operand views and scale),
// weights = softmax(scores, last axis), out = matmul(weights, v) becomes one attention node
// (ops/attention.h) when only the softmax reads the scores and only the second product reads
// the weights. The three steps each passed every head's scores (ViT: 6 x 197 x 197 floats,
// 0.9 MB per block) through memory; the fused step keeps a block of rows' scores in L2.
//
// A causal decoder's chain, scores * c then where(mask, fill, .) before the softmax, fuses too:
// c becomes the alpha, the mask a fourth input. Float32 only (the fused kernel's softmax is
// the 8-lane float row), static shapes, and the three operands of one rank with the same
// batch dimensions (no broadcasting). The weights must be the second product's whole left
// operand: a view or scale there stays unfused.
#include <unordered_map>
#include <unordered_set>

#include "ops/attention.h"
#include "ops/operand_view.h"
#include "rewrite/graph_copy.h"
#include "rewrite/passes.h"

namespace kiln {
namespace {

struct Match {
  const Node* scores;                 // the first product
  std::vector<const Node*> absorbed;  // every node of the chain but the second product
  const Variable* mask = nullptr;
  Attrs props;
};

// The value of a scalar constant that a run cannot replace (no parameter).
std::optional<double> fixed_scalar(const Variable* v) {
  if (v->kind != VarKind::kConstant || v->parameter || !v->value || v->value->numel() != 1)
    return std::nullopt;
  return v->value->load(0);
}

std::optional<Match> match(const Graph& graph, const Node& out,
                           const std::unordered_map<const Variable*, int>& uses) {
  if (out.op->name() != "matmul" || out.inputs.size() != 2) return std::nullopt;
  const Attrs& op2 = out.op->props();
  if (op2.count("a_view") || attr_float(op2, "alpha", 1.0) != 1.0) return std::nullopt;
  auto once = [&](const Variable* v) {
    auto it = uses.find(v);
    return it != uses.end() && it->second == 1 && !is_graph_output(graph, v);
  };
  Match m;
  const Node* sm = produced_by(out.inputs[0], "softmax");
  if (!sm || !once(sm->outputs[0])) return std::nullopt;
  m.absorbed.push_back(sm);
  const int rank = sm->outputs[0]->type.rank();
  const int64_t axis = attr_int(sm->op->props(), "axis", -1);
  if (rank < 2 || (axis != -1 && axis != rank - 1)) return std::nullopt;
  // A mask: where(mask, fill, scores) (or where(mask, scores, fill)) with a scalar fill.
  const Variable* scores = sm->inputs[0];
  const TensorType& type = scores->type;
  Attrs props;
  if (const Node* wh = produced_by(scores, "where"); wh && wh->inputs.size() == 3) {
    const auto fill_a = fixed_scalar(wh->inputs[1]), fill_b = fixed_scalar(wh->inputs[2]);
    if (!fill_a && !fill_b) return std::nullopt;
    props["mask_fill"] = fill_a ? *fill_a : *fill_b;
    if (!fill_a) props["mask_keeps"] = int64_t{1};
    m.mask = wh->inputs[0];
    scores = wh->inputs[fill_a ? 2 : 1];
    if (!once(scores) || !(scores->type == type)) return std::nullopt;
    m.absorbed.push_back(wh);
  }
  // A scale of the product by a scalar: its alpha, where the product has none of its own
  // (alpha * c would round differently from the product's alpha, then c).
  std::optional<double> scale;
  if (const Node* ml = produced_by(scores, "mul"); ml && ml->inputs.size() == 2) {
    for (int i = 0; i < 2 && !scale; ++i) {
      const auto c = fixed_scalar(ml->inputs[static_cast<size_t>(i)]);
      if (!c || !(ml->inputs[static_cast<size_t>(1 - i)]->type == type)) continue;
      scale = c;
      scores = ml->inputs[static_cast<size_t>(1 - i)];
    }
    if (!scale || !once(scores)) return std::nullopt;
    m.absorbed.push_back(ml);
  }
  const Node* mm = produced_by(scores, "matmul");
  if (!mm || mm->inputs.size() != 2 || mm->op->props().count("out_perm") || !once(scores))
    return std::nullopt;
  m.scores = mm;
  m.absorbed.push_back(mm);
  for (const Variable* v : {mm->inputs[0], mm->inputs[1], out.inputs[1], out.outputs[0]}) {
    if (v->type.dtype != DType::kFloat32 || !v->type.is_static()) return std::nullopt;
  }
  const Attrs& op1 = mm->op->props();
  if (scale && op1.count("alpha") && attr_float(op1, "alpha") != 1.0) return std::nullopt;
  if (op1.count("a_view")) props["q_view"] = op1.at("a_view");
  if (op1.count("b_view")) props["k_view"] = op1.at("b_view");
  if (scale) {
    props["alpha"] = *scale;
  } else if (op1.count("alpha")) {
    props["alpha"] = op1.at("alpha");
  }
  if (op2.count("b_view")) props["v_view"] = op2.at("b_view");
  if (op2.count("out_perm")) props["out_perm"] = op2.at("out_perm");
  // The fused op checks ranks, batch and inner dimensions and the mask; a chain it refuses
  // stays as it is.
  try {
    Attention fused(props);
    std::vector<TensorType> in{mm->inputs[0]->type, mm->inputs[1]->type, out.inputs[1]->type};
    if (m.mask) in.push_back(m.mask->type);
    if (!(fused.infer_type(in)[0] == out.outputs[0]->type)) return std::nullopt;
  } catch (const UserError&) {
    return std::nullopt;
  }
  m.props = std::move(props);
  return m;
}

}  // namespace

Graph fuse_attention(const Graph& graph) {
  const auto uses = count_uses(graph);
  std::unordered_map<const Node*, Match> matches;  // second product -> its chain
  std::unordered_set<const Node*> absorbed;
  for (const auto& node : graph.nodes()) {
    auto m = match(graph, *node, uses);
    if (!m) continue;
    for (const Node* n : m->absorbed) absorbed.insert(n);
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
    std::vector<Variable*> in{copy.map(m.scores->inputs[0]), copy.map(m.scores->inputs[1]),
                              copy.map(node->inputs[1])};
    if (m.mask) in.push_back(copy.map(m.mask));
    copy.add(std::make_shared<Attention>(m.props), in, {node->outputs[0]}, node->name);
  }
  return copy.finish();
}

}  // namespace kiln
