#pragma once
// Union-find over a graph's values: the layout passes grow their regions with it.
#include <unordered_map>

#include "graph/graph.h"

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

}  // namespace kiln
