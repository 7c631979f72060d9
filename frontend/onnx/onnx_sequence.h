#pragma once
// ONNX sequences and optionals, followed at load time. A sequence is a list of the importer's
// tensor values (OnnxComposite), so SequenceConstruct, Insert, At, Erase and Length,
// SplitToSequence and an optional's ops are bookkeeping on names, ConcatFromSequence is a
// Concat, and SequenceMap inlines its body once per element. A Loop that carries a sequence
// or an optional, or reads one, is unrolled: its trip count and condition must be known when
// the model loads (a graph input's value builds the model per value). The graph kiln compiles
// holds only tensors; a sequence graph input or output is its elements (model_value.h).
#include <filesystem>
#include <functional>

#include "frontend/onnx/onnx_importer.h"
#include "frontend/onnx/onnx_op_support.h"

namespace kiln::onnx_import {

// What inlining a body needs from the loader: its node importer and the model's folder.
struct SubgraphImport {
  std::function<void(const onnx::GraphProto&)> import_nodes;
  std::filesystem::path base_dir;
};

// At most this many iterations of a Loop are unrolled (each adds its body to the graph).
constexpr int64_t kMaxUnrolledIterations = 4096;

// Imports `n` when it is a sequence or optional op, an Identity of one, or a Loop carrying or
// reading one; false for any other node.
bool import_sequence_op(OnnxImporter& im, const onnx::NodeProto& n, const Attrs& a,
                        const SubgraphImport& sub);

// The body's own names (inputs, initializers, node outputs, its subgraphs' too) prefixed with
// `prefix`, so a body can be inlined more than once; names it reads from outside stay.
void rename_locals(onnx::GraphProto& g, const std::string& prefix);

void add_sequence_ops(OpTable& t);

}  // namespace kiln::onnx_import
