// A large tensor's max or min over every axis (a dynamic quantization's range, taken each
// run) in two steps: each row of an axis of 16 or more to one value, then those values to
// one. A reduction to one value runs as one part; the first step keeps an axis, so it splits
// among the workers. The value is the same: max and min do not depend on the order (only a
// zero's sign can, as it already does across the reduction loop's lanes).
#include "ops/reduce.h"
#include "ops/registry.h"
#include "rewrite/graph_copy.h"
#include "rewrite/passes.h"

namespace kiln {
namespace {

// Below this many elements one part is quicker than two steps.
constexpr int64_t kMinElements = int64_t(1) << 16;
constexpr int64_t kMinRows = 16;

}  // namespace

Graph split_full_reductions(const Graph& graph) {
  GraphCopy copy(graph);
  for (const auto& node : graph.nodes()) {
    const auto* r = dynamic_cast<const Reduce*>(node->op.get());
    const bool extremum = r && (r->kind() == ReduceKind::kMax || r->kind() == ReduceKind::kMin);
    const TensorType& t = node->inputs.empty() ? node->outputs[0]->type : node->inputs[0]->type;
    const int rank = t.rank();
    int keep = -1;
    if (extremum && node->inputs.size() == 1 && !r->keepdims() && rank >= 2 &&
        t.static_numel() != kDynamic && t.static_numel() >= kMinElements) {
      bool all = true;
      for (bool reduced : r->reduced_mask(rank)) all = all && reduced;
      for (int d = 0; all && d < rank && keep < 0; ++d) {
        if (t.dims[static_cast<size_t>(d)] >= kMinRows) keep = d;
      }
    }
    if (keep < 0) {
      copy.copy(*node);
      continue;
    }
    std::vector<int64_t> axes;
    for (int d = 0; d < rank; ++d) {
      if (d != keep) axes.push_back(d);
    }
    const std::string name = Reduce::op_name(r->kind());
    auto& reg = OpRegistry::instance();
    Graph& dst = copy.dst();
    Variable* rows = dst.add_node(reg.create(name, {{"axes", axes}, {"keepdims", int64_t{0}}}),
                                  {copy.map(node->inputs[0])}, node->name + ".rows",
                                  {dst.fresh_name(node->outputs[0]->name + ".rows")})
                         ->outputs[0];
    copy.add(reg.create(name, {{"keepdims", int64_t{0}}}), {rows}, {node->outputs[0]}, node->name);
  }
  return copy.finish();
}

}  // namespace kiln
