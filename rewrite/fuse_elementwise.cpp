// Elementwise fusion: every chain, tree or diamond of elementwise nodes whose intermediate
// values nothing else reads becomes one fused_elementwise node: one loop, no intermediate
// buffers. Broadcasting is exact because every operand is indexed against the final output
// shape. A producer with a smaller shape than the group's output is fused only when it is
// cheap, since fusing recomputes it per output element. A widening chain with several readers
// (a quantized activation dequantized once and read as float by two consumers: a
// squeeze-excitation pool and its gate) is copied into each reader's group instead of ending
// its producer's: the narrow value is stored, not four times its bytes.
#include <algorithm>
#include <map>
#include <set>

#include "rewrite/fused_steps.h"
#include "rewrite/graph_copy.h"
#include "rewrite/passes.h"

namespace kiln {
namespace {

// The most nodes one fused loop takes. A longer chain becomes several fused nodes: clang's
// time grows faster than linearly with a loop body (5,000 chained steps took 46 s to compile
// as one kernel), while chunks of equal code are one kernel, compiled once. 64 steps keep
// every realistic activation chain in one loop.
constexpr size_t kMaxFusedNodes = 64;

// A one-input cast to a wider type (uint8 -> float32): cheaper to repeat in each reader than
// to store.
bool is_widening_cast(const Node& node) {
  if (node.op->name() != "cast" || node.inputs.size() != 1) return false;
  return dtype_size(node.outputs[0]->type.dtype) > dtype_size(node.inputs[0]->type.dtype);
}

// A dequantization is a widening cast, then a zero point subtracted and a scale applied.
constexpr size_t kMaxWideningChain = 4;

// The nodes, first to last, of a widening cast followed by adds, subtractions and
// multiplications by constants or single values, each read only by the next, ending at `end`;
// empty when `end` is not the end of one. Repeating such a chain per reader costs a few
// instructions per element, less than storing and reloading its wide result.
std::vector<const Node*> widening_chain(const Node& end,
                                        const std::unordered_map<const Variable*, int>& uses) {
  std::vector<const Node*> chain;
  for (const Node* n = &end; chain.size() < kMaxWideningChain;) {
    chain.insert(chain.begin(), n);
    if (n != &end && uses.at(n->outputs[0]) != 1) return {};
    if (is_widening_cast(*n)) return chain;
    const std::string& op = n->op->name();
    if ((op != "add" && op != "sub" && op != "mul") || n->inputs.size() != 2) return {};
    const Variable* main = nullptr;
    for (const Variable* v : n->inputs) {
      const bool small = v->kind == VarKind::kConstant || v->type.static_numel() == 1;
      if (v->kind == VarKind::kNodeOutput && !small) {
        if (main) return {};
        main = v;
      } else if (!small) {
        return {};
      }
    }
    if (!main || main->type != n->outputs[0]->type) return {};
    n = main->owner;
  }
  return {};
}

// Cheap enough to repeat for every element of a larger output: cheap, and no division (a
// vector division costs about ten multiplies; a squeeze-excitation gate's quantization was
// two per element of the gated map).
bool cheap_per_element(const Node& node) {
  if (!is_cheap_node(node)) return false;
  auto divides = [](const std::string& name) { return name == "div" || name == "div_rcp"; };
  if (divides(node.op->name())) return false;
  if (auto f = dynamic_cast<const FusedElementwise*>(node.op.get())) {
    for (const auto& st : f->steps())
      if (divides(st.op->name())) return false;
  }
  return true;
}

// Whether `node`, a value smaller than `dims` that a group would broadcast, is cheap to
// repeat per element together with the smaller values that only it reads. When one of them
// is costly (a quantized gate's division by its scale), the whole small chain is computed
// once, as its own group, rather than cut at that node with the rest repeated per element.
bool cheap_small_cone(const Node& node, const std::vector<int64_t>& dims,
                      const std::unordered_map<const Variable*, int>& uses) {
  if (!cheap_per_element(node)) return false;
  for (const Variable* in : node.inputs) {
    if (in->kind != VarKind::kNodeOutput || in->type.dims == dims || uses.at(in) != 1) continue;
    if (is_elementwise_node(*in->owner) && !cheap_small_cone(*in->owner, dims, uses)) return false;
  }
  return true;
}

}  // namespace

Graph fuse_elementwise(const Graph& graph) {
  auto uses = count_uses(graph);
  // The widening chains read more than once, by their last node, and every member of one.
  std::map<const Node*, std::vector<const Node*>> shared_chains;
  std::set<const Node*> in_shared_chain;
  for (const auto& node : graph.nodes()) {
    if (!is_elementwise_node(*node) || uses[node->outputs[0]] < 2) continue;
    auto chain = widening_chain(*node, uses);
    if (chain.empty()) continue;
    in_shared_chain.insert(chain.begin(), chain.end());
    shared_chains[node.get()] = std::move(chain);
  }
  std::set<const Node*> taken;                             // members of some group
  std::map<const Node*, std::vector<const Node*>> groups;  // root -> members (id order)
  const auto& nodes = graph.nodes();
  for (auto it = nodes.rbegin(); it != nodes.rend(); ++it) {
    const Node* root = it->get();
    if (taken.count(root) || !is_elementwise_node(*root) || in_shared_chain.count(root)) continue;
    std::set<const Node*> group{root};
    std::multiset<const Variable*> reads(root->inputs.begin(), root->inputs.end());
    std::set<const Variable*> stored;  // the inputs of shared chains: their producers stay
    for (bool grew = true; grew;) {
      grew = false;
      for (const Variable* v : std::set<const Variable*>(reads.begin(), reads.end())) {
        if (group.size() >= kMaxFusedNodes) break;
        const Node* p = v->kind == VarKind::kNodeOutput ? v->owner : nullptr;
        if (!p || group.count(p) || taken.count(p) || stored.count(v) || !is_elementwise_node(*p)) {
          continue;
        }
        auto chain = shared_chains.find(p);
        const bool copy_in = chain != shared_chains.end();
        // Read outside the group: only a shared chain may still join (as a copy).
        if (!copy_in && static_cast<int>(reads.count(v)) != uses[v]) continue;
        if (v->type.dims != root->outputs[0]->type.dims &&
            !cheap_small_cone(*p, root->outputs[0]->type.dims, uses)) {
          continue;
        }
        reads.erase(v);
        if (!copy_in) {
          group.insert(p);
          reads.insert(p->inputs.begin(), p->inputs.end());
        } else {
          const auto& members = chain->second;
          group.insert(members.begin(), members.end());
          for (const Node* m : members) {
            for (const Variable* in : m->inputs) {
              const bool inside =
                  in->kind == VarKind::kNodeOutput &&
                  std::find(members.begin(), members.end(), in->owner) != members.end();
              if (inside) continue;
              reads.insert(in);
              stored.insert(in);
            }
          }
        }
        grew = true;
      }
    }
    if (group.size() < 2) continue;
    std::vector<const Node*> members(group.begin(), group.end());
    std::sort(members.begin(), members.end(), [](auto* a, auto* b) { return a->id < b->id; });
    // A shared chain stays untaken: other groups copy it too.
    for (const Node* m : members)
      if (!in_shared_chain.count(m)) taken.insert(m);
    groups[root] = std::move(members);
  }
  // What reads a shared chain outside any group (a reduction, a graph output) reads it as one
  // fused node of its own; a lone cast stays itself. Dead once every reader has its copy.
  for (const auto& [end, chain] : shared_chains) {
    if (chain.size() < 2) continue;
    taken.insert(chain.begin(), chain.end());
    groups[end] = chain;
  }

  GraphCopy copy(graph);
  for (const auto& node : nodes) {
    auto g = groups.find(node.get());
    if (g == groups.end()) {
      if (!taken.count(node.get())) copy.copy(*node);
      continue;
    }
    std::vector<FusedStep> steps;
    std::vector<const Variable*> inputs;  // the group's external operands
    std::map<const Variable*, int> arg;   // variable -> program argument
    for (const Node* m : g->second) {
      auto arg_of = [&](int k) {
        const Variable* v = m->inputs[static_cast<size_t>(k)];
        auto found = arg.find(v);
        if (found != arg.end()) return found->second;
        inputs.push_back(v);
        return arg[v] = static_cast<int>(inputs.size()) - 1;
      };
      arg[m->outputs[0]] = append_steps(*m, arg_of, steps);
    }
    std::vector<Variable*> mapped;
    for (const Variable* v : inputs) mapped.push_back(copy.map(v));
    copy.add(FusedElementwise::from_steps(std::move(steps)), mapped, {node->outputs[0]},
             node->name);
  }
  return copy.finish();
}

}  // namespace kiln
