#include "frontend/onnx/onnx_ops.h"

#include <map>

#include "frontend/onnx/onnx_op_support.h"
#include "frontend/onnx/onnx_sequence.h"

namespace kiln {
namespace {

const onnx_import::OpTable& table() {
  static const onnx_import::OpTable t = [] {
    onnx_import::OpTable t;
    onnx_import::add_elementwise_ops(t);
    onnx_import::add_nn_ops(t);
    onnx_import::add_reduce_ops(t);
    onnx_import::add_shape_ops(t);
    onnx_import::add_value_ops(t);
    onnx_import::add_composite_ops(t);
    onnx_import::add_quant_ops(t);
    onnx_import::add_signal_ops(t);
    onnx_import::add_random_ops(t);
    onnx_import::add_control_ops(t);
    onnx_import::add_training_ops(t);
    onnx_import::add_sequence_ops(t);
    return t;
  }();
  return t;
}

}  // namespace

const OnnxOpSpec* find_onnx_op(const std::string& op_type) {
  auto it = table().find(op_type);
  return it == table().end() ? nullptr : &it->second;
}

const OnnxOpSpec* find_onnx_op(const std::string& domain, const std::string& op_type) {
  if (domain.empty() || domain == "ai.onnx") return find_onnx_op(op_type);
  if (domain == "com.microsoft" || domain == "ai.onnx.preview.training")
    return find_onnx_op(domain + "." + op_type);
  return nullptr;
}

std::vector<std::string> onnx_op_names() {
  std::vector<std::string> out;
  for (const auto& [name, spec] : table()) out.push_back(name);
  return out;
}

}  // namespace kiln
