#pragma once
// What the layout passes (layout_nchwc.cpp, layout_nhwc_int8.cpp) share: union-find over values
// to grow their regions, and building a region's nodes in the new graph.
#include <functional>
#include <optional>
#include <unordered_map>

#include "rewrite/graph_copy.h"

namespace kiln {

class ValueUnion {
 public:
  const Variable* find(const Variable* v) {
    auto it = parent_.find(v);
    if (it == parent_.end() || it->second == v) return v;
    return it->second = find(it->second);
  }
  void join(const Variable* a, const Variable* b) { parent_[find(a)] = find(b); }

 private:
  std::unordered_map<const Variable*, const Variable*> parent_;
};

// A concatenation of 4-D values along their channels (axis 1: SqueezeNet's fire modules)
// whose output and inputs all satisfy `fits` (the layout's own test of a value).
bool channel_concat(const Node& node, bool (*fits)(const Variable*));

// A node of registered op `op` in copy's new graph, its one output named after `out_name`
// (made unique: a model without node names must not give two invented values one name).
Node* add_fresh(GraphCopy& copy, const std::string& op, const Attrs& props,
                const std::vector<Variable*>& inputs, const std::string& name,
                const std::string& out_name);

// Elementwise `node` over its operands in a region's layout: each input through `operand`
// (nothing: the node cannot follow the layout, and nothing is built), the output named after
// the source's plus `suffix`.
std::optional<Variable*> elementwise_in_layout(
    GraphCopy& copy, const Node& node,
    const std::function<std::optional<Variable*>(const Variable*)>& operand,
    const std::string& suffix);

}  // namespace kiln
