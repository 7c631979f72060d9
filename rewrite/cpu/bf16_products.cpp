// bfloat16 products (opt-in: --precision bf16, or "bf16" in the passes spec): every float32
// gemm whose B the pack pass packed (a model weight) has its panels rounded to bfloat16
// pairs and runs kiln_support.gemm_packed_bf16, AVX512-BF16's vdpbf16ps where the CPU has it
// (the float32 fallback elsewhere). Activations stay float32 between nodes and are rounded
// to bfloat16 as the kernel reads them; sums, norms, softmax and every other node stay
// float32, as in oneDNN's and OpenVINO's bf16 inference. It runs after the pack pass, so a
// weight is rounded from its packed copy, and records how (the cache replays it on new
// weights).
#include <map>

#include "ops/c/gemm_pack.h"
#include "ops/registry.h"
#include "rewrite/constant_recipe.h"
#include "rewrite/graph_copy.h"
#include "rewrite/passes.h"

namespace kiln {

Graph bf16_products(const Graph& graph) {
  GraphCopy copy(graph);
  std::map<const Variable*, Variable*> rounded;  // a weight two gemms share rounds once
  for (const auto& node : graph.nodes()) {
    const Attrs& props = node->op->props();
    const int64_t n = node->op->name() == "gemm" ? attr_int(props, "packed_n", 0) : 0;
    const Variable* b = node->inputs.size() >= 2 ? node->inputs[1] : nullptr;
    if (n <= 0 || !b || node->outputs[0]->type.dtype != DType::kFloat32 ||
        b->kind != VarKind::kConstant || !b->value || b->value->dtype() != DType::kFloat32) {
      copy.copy(*node);
      continue;
    }
    Variable*& rb = rounded[b];
    if (!rb) {
      Tensor panels = gemm_panels_to_bf16(*b->value, n);
      const std::string name = copy.dst().fresh_name(b->name + ".bf16");
      rb = b->parameter ? copy.dst().add_parameter(panels, name)
                        : copy.dst().add_constant(panels, name);
      rb->recipe = transform_recipe(kGemmPanelsBf16, {{"n", n}}, 0, {b->recipe});
    }
    std::vector<Variable*> inputs = copy.map(node->inputs);
    inputs[1] = rb;
    copy.add(node->op, inputs, {node->outputs[0]}, node->name);
  }
  return copy.finish();
}

}  // namespace kiln
