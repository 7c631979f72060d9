// Weight packing: a float gemm or matmul whose B is a constant 2-D matrix (a model weight) has
// B packed now, once,
// into the panel layout of kiln's GEMM kernel (ops/gemm_pack.h), and runs that kernel split
// over rows of the output: each run streams B as aligned panel rows, with no transpose or
// packing pass of its own. The packed copy is a parameter when the weight is one (a module
// input, never pasted into the source), so one module still serves any weights. It runs after
// folding, so weights computed from constants are packed too, and before epilogue fusion,
// which takes the packed gemm as its base.
#include <map>
#include <utility>

#include "ops/gemm_pack.h"
#include "ops/registry.h"
#include "rewrite/constant_recipe.h"
#include "rewrite/graph_copy.h"
#include "rewrite/passes.h"

namespace kiln {
namespace {

constexpr int64_t kMinPackedN = 16;

// A MatMul of activations (..., M, K) by a 2-D weight (K, N) is one GEMM over all rows of
// the activations (a transformer's projections: (1, T, D) @ (D, 3D)); as a batched MatMul
// it was one small product per leading index.
bool packable_matmul(const Node& node) {
  return node.op->name() == "matmul" && node.inputs.size() == 2 &&
         node.inputs[0]->type.rank() >= 2 && node.inputs[1]->type.rank() == 2;
}

bool packable(const Node& node) {
  const bool matmul = packable_matmul(node);
  if ((node.op->name() != "gemm" && !matmul) || node.inputs.size() < 2 ||
      node.outputs.size() != 1) {
    return false;
  }
  if (attr_int(node.op->props(), "packed_n", 0) != 0) return false;
  const Variable* b = node.inputs[1];
  const DType dt = node.outputs[0]->type.dtype;
  if (!(dt == DType::kFloat32 || dt == DType::kFloat64) || b->kind != VarKind::kConstant ||
      !b->value || b->value->ndim() != 2 || b->value->dtype() != dt) {
    return false;
  }
  // The kernel's vectors run along N: a product narrower than one AVX-512 vector of floats
  // would leave most lanes of each multiply-add idle (a 10-wide output layer ran 2x slower
  // than OpenBLAS, which takes dot products along K), so it stays with OpenBLAS.
  const bool trans = attr_int(node.op->props(), "transB", 0) != 0;
  return b->value->shape()[trans ? 0 : 1] >= kMinPackedN && b->value->shape()[trans ? 1 : 0] > 0;
}

}  // namespace

Graph pack_weights(const Graph& graph) {
  GraphCopy copy(graph);
  std::map<std::pair<const Variable*, bool>, Variable*>
      packed;  // a weight two gemms share packs once
  for (const auto& node : graph.nodes()) {
    if (!packable(*node)) {
      copy.copy(*node);
      continue;
    }
    Attrs props = packable_matmul(*node) ? Attrs{} : node->op->props();
    const bool trans = attr_int(props, "transB", 0) != 0;
    const Variable* b = node->inputs[1];
    Variable*& pb = packed[{b, trans}];
    if (!pb) {
      Tensor panels = pack_gemm_panels(*b->value, trans);
      const std::string name =
          (b->name.empty() ? "weight" : b->name) + (trans ? ".packed_t" : ".packed");
      pb = b->parameter ? copy.dst().add_parameter(panels, name)
                        : copy.dst().add_constant(panels, name);
      pb->recipe = transform_recipe(kPackGemmPanels, {{"trans", int64_t{trans}}}, 0,
                                    {b->recipe});
    }
    props["transB"] = int64_t{0};
    props["packed_n"] = b->value->shape()[trans ? 0 : 1];
    std::vector<Variable*> inputs = copy.map(node->inputs);
    inputs[1] = pb;
    copy.add(OpRegistry::instance().create("gemm", props), inputs, {node->outputs[0]}, node->name);
  }
  return copy.finish();
}

}  // namespace kiln
