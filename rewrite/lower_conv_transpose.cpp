// conv_transpose -> a GEMM and a fold. Each input position's channels times W (C, mg * taps
// per group) give every tap's contribution to every output channel at once: X moved
// channels-last (N, in..., C) is the GEMM's A and W, a model weight, its B, which the pack
// pass then packs once. conv_transpose_fold adds the contributions that land on each output
// position. The multiply-adds are the transposed convolution's own (no zeros inserted
// between inputs, which a stride-2 layer would pay 4x for as a convolution), at the packed
// GEMM's speed; the fold reads the GEMM's output once.
//
// Groups run as one batched matmul (N, in..., G, 1, cg) @ (G, cg, taps * mg). `-lower` in the
// pass list keeps conv_transpose's direct code.
#include "ops/registry.h"
#include "rewrite/graph_copy.h"
#include "rewrite/layout_region.h"
#include "rewrite/passes.h"

namespace kiln {
namespace {

class Lowering {
 public:
  explicit Lowering(GraphCopy& copy) : copy_(copy) {}

  void lower(const Node& node) {
    Variable* x = copy_.map(node.inputs[0]);
    Variable* w = copy_.map(node.inputs[1]);
    const std::vector<int64_t>& wd = w->type.dims;
    const int k = x->type.rank() - 2;
    const int64_t G = attr_int(node.op->props(), "group", 1), C = wd[0], mg = wd[1], cg = C / G;
    const std::vector<int64_t> kernel(wd.begin() + 2, wd.end());
    int64_t taps = 1;
    for (int64_t t : kernel) taps *= t;
    const std::string& name = node.name;

    std::vector<int64_t> to_last{0};
    for (int d = 0; d < k; ++d) to_last.push_back(d + 2);
    to_last.push_back(1);
    Variable* xt = add("transpose", {{"perm", to_last}}, {x}, name + ".channels_last");
    // The leading (N, in...) dims are copied by reshape's 0.
    const std::vector<int64_t> lead(static_cast<size_t>(k + 1), 0);
    Variable* cols = nullptr;
    if (G == 1) {
      // W (C, mg, k...) -> (C, k..., mg) -> (C, taps * mg).
      std::vector<int64_t> perm{0};
      for (int d = 0; d < k; ++d) perm.push_back(d + 2);
      perm.push_back(1);
      Variable* wt = add("transpose", {{"perm", perm}}, {w}, name + ".weight_taps");
      Variable* wm = add("reshape", {{"shape", std::vector<int64_t>{C, taps * mg}}}, {wt},
                         name + ".weight_matrix");
      cols = add("matmul", {}, {xt, wm}, name + ".taps");
    } else {
      std::vector<int64_t> xs = lead;
      xs.insert(xs.end(), {G, 1, cg});
      Variable* xg = add("reshape", {{"shape", xs}}, {xt}, name + ".groups");
      // W (G*cg, mg, k...) -> (G, cg, mg, k...) -> (G, cg, k..., mg) -> (G, cg, taps * mg).
      std::vector<int64_t> split{G, cg, mg};
      split.insert(split.end(), kernel.begin(), kernel.end());
      std::vector<int64_t> perm{0, 1};
      for (int d = 0; d < k; ++d) perm.push_back(d + 3);
      perm.push_back(2);
      Variable* ws = add("reshape", {{"shape", split}}, {w}, name + ".weight_groups");
      Variable* wt = add("transpose", {{"perm", perm}}, {ws}, name + ".weight_taps");
      Variable* wm = add("reshape", {{"shape", std::vector<int64_t>{G, cg, taps * mg}}}, {wt},
                         name + ".weight_matrix");
      cols = add("matmul", {}, {xg, wm}, name + ".taps");
    }
    // (N, in..., [G, 1,] taps * mg) -> (N, in..., G, k..., mg).
    std::vector<int64_t> shape = lead;
    shape.push_back(G);
    shape.insert(shape.end(), kernel.begin(), kernel.end());
    shape.push_back(mg);
    shape[static_cast<size_t>(k) + 1] = G == 1 ? 1 : 0;
    cols = add("reshape", {{"shape", shape}}, {cols}, name + ".taps_split");
    std::vector<Variable*> fold_in{cols};
    if (node.inputs.size() == 3) fold_in.push_back(copy_.map(node.inputs[2]));
    Attrs props = node.op->props();
    props.erase("group");
    copy_.add(OpRegistry::instance().create("conv_transpose_fold", props), fold_in,
              {node.outputs[0]}, name);
  }

 private:
  Variable* add(const std::string& op, const Attrs& props, const std::vector<Variable*>& inputs,
                const std::string& name) {
    return add_fresh(copy_, op, props, inputs, name, name)->outputs[0];
  }
  GraphCopy& copy_;
};

}  // namespace

Graph lower_conv_transpose(const Graph& graph) {
  GraphCopy copy(graph);
  Lowering lowering(copy);
  for (const auto& node : graph.nodes()) {
    if (node->op->name() == "conv_transpose" && node->outputs.size() == 1) {
      lowering.lower(*node);
    } else {
      copy.copy(*node);
    }
  }
  return copy.finish();
}

}  // namespace kiln
