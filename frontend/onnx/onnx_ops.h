#pragma once
// The ONNX ops kiln imports: for each op type, the attributes it understands, a check of
// attribute values and requested outputs, and the converter that builds kiln nodes.
#include <functional>
#include <string>
#include <vector>

#include "frontend/onnx/onnx_importer.h"
#include "graph/attrs.h"

namespace kiln {

using OnnxCheck = std::function<std::vector<std::string>(const Attrs& attrs,
                                                         const onnx::NodeProto& node, int opset)>;
using OnnxConvert = std::function<std::vector<Var>(OnnxImporter& im, const onnx::NodeProto& node,
                                                   const Attrs& attrs)>;

struct OnnxOpSpec {
  std::vector<std::string> attrs;  // every attribute the converter honours
  OnnxCheck check;                 // problems with values or outputs; may be empty
  OnnxConvert convert;
};

const OnnxOpSpec* find_onnx_op(const std::string& op_type);
// A node's op by domain: the default domain's by name, and onnxruntime's contrib ops that kiln
// imports (domain com.microsoft, e.g. QLinearAdd) and the optimizers of ONNX's training domain
// (ai.onnx.preview.training); null for any other.
const OnnxOpSpec* find_onnx_op(const std::string& domain, const std::string& op_type);
std::vector<std::string> onnx_op_names();  // sorted

}  // namespace kiln
