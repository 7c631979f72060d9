#pragma once
// Shape arithmetic on dynamic dimensions at load time: ONNX's Shape of a tensor whose
// dimension is known only at run time, and the Gather / Slice / Concat / Unsqueeze / Cast /
// Add / Mul / Div ... that exporters chain after it, evaluated as dimension expressions
// (SymValue) instead of values. A Reshape, Expand, Slice, ConstantOfShape or Range at the end
// of the chain turns them into ops that read those dimensions when the module runs, so one
// compiled module serves every size.
namespace onnx {
class NodeProto;
}

namespace kiln {

class OnnxImporter;

// Records the node's outputs as symbolic values and returns true when it is shape
// arithmetic on at least one symbolic input (or a Shape of a dynamic dimension); false
// leaves the node to its converter (symbolic inputs then become run-time tensors).
bool fold_symbolic(OnnxImporter& im, const onnx::NodeProto& n);

}  // namespace kiln
