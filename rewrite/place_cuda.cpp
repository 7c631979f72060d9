// Placement on CUDA: every node whose op has CUDA code for its dtypes and props runs on the
// device; the rest stay on the CPU. A value crossing between the two gets one transfer
// node per direction (to_device / to_host), shared by every reader. Graph inputs and
// outputs stay host tensors. Device values are named "<name>.cuda".
#include <unordered_map>

#include "ops/cuda_placed.h"
#include "ops/elementwise.h"
#include "ops/epilogue.h"
#include "ops/fused_elementwise.h"
#include "ops/transfer.h"
#include "rewrite/graph_copy.h"
#include "rewrite/passes.h"

namespace kiln {

Graph place_on_cuda(const Graph& graph) {
  GraphCopy copy(graph);
  Graph& dst = copy.dst();
  std::unordered_map<const Variable*, Variable*> on_device;  // source var -> device var
  std::unordered_map<const Variable*, bool> on_host;         // source var has a host value
  auto to_host_op = std::make_shared<Transfer>(false);
  auto to_device_op = std::make_shared<Transfer>(true);

  // The host value of source variable v (a to_host node when only the device has it).
  auto host_value = [&](const Variable* v) {
    auto it = on_device.find(v);
    if (it != on_device.end() && !on_host[v]) {
      copy.add(to_host_op, {it->second}, {v}, "");
      on_host[v] = true;
    }
    return copy.map(v);
  };
  auto device_value = [&](const Variable* v) {
    auto it = on_device.find(v);
    if (it != on_device.end()) return it->second;
    Variable* host = copy.map(v);
    Variable* dev = dst.add_node(to_device_op, {host}, "", {v->name + ".cuda"})->outputs[0];
    on_device[v] = dev;
    return dev;
  };

  for (const auto& node : graph.nodes()) {
    const auto* op = dynamic_cast<const COp*>(node->op.get());
    if (!op || !op->has_cuda_code(*node)) {
      for (const Variable* v : node->inputs) host_value(v);
      copy.copy(*node);
      continue;
    }
    // Elementwise code (epilogues included) inlines rank-0 constants as literals: they
    // need no device copy.
    size_t first_literal = node->inputs.size();
    if (dynamic_cast<const Elementwise*>(op) || dynamic_cast<const FusedElementwise*>(op)) {
      first_literal = 0;
    } else if (const auto* e = dynamic_cast<const WithEpilogue*>(op)) {
      first_literal = static_cast<size_t>(e->base_inputs());
    }
    std::vector<Variable*> inputs;
    for (size_t k = 0; k < node->inputs.size(); ++k) {
      const Variable* v = node->inputs[k];
      inputs.push_back(k >= first_literal && is_inlined_scalar(v) ? copy.map(v) : device_value(v));
    }
    std::vector<std::string> names;
    for (const Variable* v : node->outputs) names.push_back(v->name + ".cuda");
    auto shared = std::static_pointer_cast<const COp>(node->op);
    Node* placed = dst.add_node(std::make_shared<CudaPlaced>(shared), inputs, node->name, names);
    for (size_t i = 0; i < node->outputs.size(); ++i) on_device[node->outputs[i]] = placed->outputs[i];
  }
  for (const Variable* v : graph.outputs()) host_value(v);
  return copy.finish();
}

}  // namespace kiln
