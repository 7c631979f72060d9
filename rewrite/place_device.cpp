// Placement on a device: every node whose op has code in the device's table for its dtypes
// and props runs on the device; the rest stay on the CPU. A value crossing between the two
// gets one transfer node per direction (to_device / to_host), shared by every reader. Graph
// inputs and outputs are host tensors, or all device tensors with device_io (then an output
// keeps its name on the device). Other device values are named "<name>.<device>".
#include <unordered_map>

#include "ops/device_placed.h"
#include "ops/elementwise.h"
#include "ops/epilogue.h"
#include "ops/fused_elementwise.h"
#include "ops/transfer.h"
#include "rewrite/graph_copy.h"
#include "rewrite/passes.h"

namespace kiln {

Graph place_on_device(const Graph& graph, const DeviceCodeTable& table, bool device_io) {
  GraphCopy copy(graph);
  Graph& dst = copy.dst();
  std::unordered_map<const Variable*, Variable*> on_device;  // source var -> device var
  std::unordered_map<const Variable*, bool> on_host;         // source var has a host value
  if (device_io) {
    for (const Variable* v : graph.inputs()) {
      Variable* in = copy.map(v);
      in->on_device = true;
      on_device[v] = in;
      on_host[v] = false;
    }
  }
  auto device_name = [&](const Variable* v) {
    return device_io && is_graph_output(graph, v) ? v->name
                                                  : dst.fresh_name(v->name + "." + table.device());
  };
  auto to_host_op = std::make_shared<Transfer>(false);
  auto to_device_op = std::make_shared<Transfer>(true);

  // The host value of source variable v (a to_host node when only the device has it).
  auto host_value = [&](const Variable* v) {
    auto it = on_device.find(v);
    if (it != on_device.end() && !on_host[v]) {
      if (v->owner) {
        copy.add(to_host_op, {it->second}, {v}, "");
      } else {
        // A device input (device_io) keeps its name: its host copy takes a fresh one.
        Variable* host =
            dst.add_node(to_host_op, {it->second}, "", {dst.fresh_name(v->name + ".host")})
                ->outputs[0];
        copy.replace(v, host);
      }
      on_host[v] = true;
    }
    return copy.map(v);
  };
  auto device_value = [&](const Variable* v) {
    auto it = on_device.find(v);
    if (it != on_device.end()) return it->second;
    Variable* host = copy.map(v);
    Variable* dev = dst.add_node(to_device_op, {host}, "", {device_name(v)})->outputs[0];
    on_device[v] = dev;
    on_host[v] = true;  // copied up from the host: a later host reader takes it as it is
    return dev;
  };

  for (const auto& node : graph.nodes()) {
    const auto* op = dynamic_cast<const COp*>(node->op.get());
    if (!op || !table.has_code(*node)) {
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
    for (const Variable* v : node->outputs) names.push_back(device_name(v));
    auto shared = std::static_pointer_cast<const COp>(node->op);
    Node* placed =
        dst.add_node(std::make_shared<DevicePlaced>(table, shared), inputs, node->name, names);
    for (size_t i = 0; i < node->outputs.size(); ++i)
      on_device[node->outputs[i]] = placed->outputs[i];
  }
  if (!device_io) {
    for (const Variable* v : graph.outputs()) host_value(v);
    return copy.finish();
  }
  for (const Variable* v : graph.outputs()) copy.replace(v, device_value(v));
  Graph placed = copy.finish();
  for (const Variable* v : placed.outputs()) {
    // finish() names an output that repeats another (or an input) through a host copy.
    const auto* op = v->owner ? dynamic_cast<const COp*>(v->owner->op.get()) : nullptr;
    if (!(v->owner ? op && op->output_on_device() : v->on_device)) {
      throw UserError("graph '" + graph.name() + "': output '" + v->name +
                      "' repeats another output or an input, which device_io does not support");
    }
  }
  return placed;
}

}  // namespace kiln
