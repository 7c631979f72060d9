#pragma once
// Rewrites build a fresh graph rather than editing one in place: GraphCopy walks the source
// graph's nodes in order and lets a pass decide what each becomes (copied, replaced by an
// existing value, or rebuilt). Inputs keep their order, names and types; graph outputs keep
// their names (a copy node is added where an output now reads an input, a constant or a
// value another output already names).
#include <unordered_map>

#include "graph/graph.h"

namespace kiln {

class GraphCopy {
 public:
  // With number_sources, each constant of `src` is recorded as the given graph's constant
  // at its position (its recipe: the first copy of a pipeline); otherwise constants keep
  // the recipes they have.
  explicit GraphCopy(const Graph& src, bool number_sources = false);

  const Graph& src() const { return src_; }
  Graph& dst() { return dst_; }

  // The new graph's variable for a source variable (constants are copied on first use).
  Variable* map(const Variable* old);
  std::vector<Variable*> map(const std::vector<Variable*>& olds);
  // From now on, source variable `old` reads as `now` (a variable of the new graph).
  void replace(const Variable* old, Variable* now);

  // The node with the same op, name and output names, its inputs mapped.
  Node* copy(const Node& node);
  // A new node whose outputs stand for `replaces` (one source variable per output): they
  // take those variables' names, and later uses of them read the new outputs.
  Node* add(std::shared_ptr<const Op> op, const std::vector<Variable*>& inputs,
            const std::vector<const Variable*>& replaces, const std::string& node_name);
  // A constant standing for source variable `old`, under its name, computed as `recipe` says.
  Variable* add_constant(const Variable* old, Tensor value, bool parameter, RecipePtr recipe);

  Graph finish();

 private:
  const Graph& src_;
  Graph dst_;
  std::unordered_map<const Variable*, Variable*> map_;
  std::unordered_map<const Variable*, int> source_index_;  // with number_sources
};

// How many nodes read each variable, plus one for each time it is a graph output.
std::unordered_map<const Variable*, int> count_uses(const Graph& graph);
bool is_graph_output(const Graph& graph, const Variable* v);
// The node that computes v, if it is a one-output node of op `op`; null otherwise.
const Node* produced_by(const Variable* v, const char* op);

}  // namespace kiln
