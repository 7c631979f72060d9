#pragma once
// State shared by the ONNX loader and the per-op converters: the graph being built, the
// kiln variable behind every ONNX value name, and the values known at load time
// (initializers, Constant nodes, folded shape arithmetic).
#include <filesystem>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "frontend/model_value.h"
#include "graph/dim_expr.h"
#include "graph/graph.h"
#include "ops/builders.h"

namespace onnx {
class NodeProto;
}

namespace kiln {

// A small integer tensor (0-D or 1-D) whose values follow dynamic dimensions: what ONNX's
// Shape and its arithmetic yield when a dimension is known only at run time. Each element is
// an expression whose leaf (k, d) is dimension d of the importer's source variable k.
struct SymValue {
  DType dtype = DType::kInt64;
  bool scalar = false;
  std::vector<DimExpr> elems;
};

// A sequence or an optional, followed at load time (onnx_sequence.h): its elements are the
// names of tensor values in the importer, so a sequence op is bookkeeping on names and the
// graph sees only tensors.
struct OnnxComposite {
  ValueKind kind = ValueKind::kSequence;
  bool present = true;  // an optional may be empty
  DType elem_dtype = DType::kFloat32;
  std::vector<std::string> elems;
};

// A tensor in another dtype (storage <-> compute), with the convert op's semantics.
Tensor convert_tensor(const Tensor& t, DType to);

class OnnxImporter {
 public:
  OnnxImporter(Graph& graph, int opset, std::string origin)
      : graph_(&graph), opset_(opset), origin_(std::move(origin)) {}

  Graph& graph() { return *graph_; }
  int opset() const { return opset_; }
  const std::string& origin() const { return origin_; }

  // Input i of the node is given (ONNX marks omitted optional inputs with "").
  static bool has_input(const onnx::NodeProto& n, int i);
  // Input i as a graph variable; a known value becomes a graph constant (initializers
  // become parameters). Throws naming the node when the input is missing.
  Var in(const onnx::NodeProto& n, int i);
  // Input i's value, which must be known at load time (shape inputs such as Reshape's).
  const Tensor& const_in(const onnx::NodeProto& n, int i, const std::string& what);
  std::vector<int64_t> const_ints(const onnx::NodeProto& n, int i, const std::string& what);
  // Input i's static type (known values included).
  TensorType type_of(const onnx::NodeProto& n, int i);
  bool is_known(const std::string& name) const { return known_.count(name) != 0; }
  bool is_graph_input(const std::string& name) const { return graph_inputs_.count(name) != 0; }
  // After a node is converted: outputs computed only from known values and graph inputs
  // remember those inputs, so asking for such an output's value at load time names them
  // (InputValueNeeded) and the model can be built with their values bound.
  void record_value_deps(const onnx::NodeProto& n);
  const Tensor* known(const std::string& name) const;

  // Registration, used by the loader.
  void add_input(const std::string& name, Variable* v) { vars_[name] = v; }
  // A graph input: asking for its value at load time throws InputValueNeeded.
  void add_graph_input(const std::string& name, Variable* v) {
    vars_[name] = v;
    graph_inputs_.insert(name);
  }
  void add_known(const std::string& name, Tensor value, bool parameter);
  void bind(const std::string& name, Var v) { vars_[name] = v.var(); }
  Variable* variable(const std::string& name);  // nullptr when the name has no value yet

  // Sequences and optionals by name; `to` naming what `from` names (a value of any kind).
  const OnnxComposite* composite(const std::string& name) const;
  void add_composite(const std::string& name, OnnxComposite c) { composites_[name] = std::move(c); }
  void alias(const std::string& to, const std::string& from);

  // Symbolic values (onnx_sym.h computes them). add_sym records an all-constant one as known.
  const SymValue* sym(const std::string& name) const;
  void add_sym(const std::string& name, SymValue v);
  int sym_source(Variable* v);  // the leaf index of variable v's dimensions
  // Input i as a symbolic value: known integer values become constant expressions. nullopt
  // when the input is neither (a tensor computed at run time).
  std::optional<SymValue> sym_in(const onnx::NodeProto& n, int i);
  // Input i's values as dimension expressions over a node's inputs: `inputs` holds the
  // node's inputs so far (the data first); the variables the leaves read are appended (once
  // each) and the leaves renumbered to their positions. nullopt as for sym_in.
  std::optional<std::vector<DimExpr>> dims_in(const onnx::NodeProto& n, int i,
                                              std::vector<Var>& inputs);
  std::vector<DimExpr> to_node_inputs(const std::vector<DimExpr>& exprs, std::vector<Var>& inputs);

  // Storage-only types (float16, bfloat16, int16, uint16, uint32, uint64): kernels compute
  // in compute_type() and each ONNX value of such a type is tracked here, by name, with its
  // storage type (the loader converts at the graph's edges and rounds after each op).
  static std::optional<DType> compute_type(DType storage);
  std::optional<DType> storage(const std::string& name) const;
  void set_storage(const std::string& name, DType storage) { storage_[name] = storage; }
  // Input i's logical dtype: its storage type, or its kiln dtype.
  DType logical_dtype(const onnx::NodeProto& n, int i);

  // Evaluates `convert` on known inputs at load time into known outputs (shape arithmetic).
  // Returns false when some input is not known or the inputs are too large to fold.
  template <class Convert>
  bool try_fold(const onnx::NodeProto& n, Convert&& convert);

 private:
  bool fold_inputs(const onnx::NodeProto& n, Graph& scratch, std::vector<Tensor>& values,
                   std::map<std::string, Variable*>& scratch_vars);
  void finish_fold(const onnx::NodeProto& n, Graph& scratch, const std::vector<Var>& outs,
                   const std::vector<Tensor>& values);
  const std::string& input_name(const onnx::NodeProto& n, int i) const;

  Graph* graph_;
  int opset_;
  std::string origin_;
  std::map<std::string, Variable*> vars_;
  std::map<std::string, Tensor> known_;
  std::map<std::string, bool> known_is_parameter_;
  std::map<std::string, SymValue> sym_;
  std::map<std::string, OnnxComposite> composites_;
  std::set<std::string> graph_inputs_;
  std::map<std::string, std::set<std::string>> value_deps_;
  std::map<std::string, DType> storage_;
  std::vector<Variable*> sym_sources_;
};

template <class Convert>
bool OnnxImporter::try_fold(const onnx::NodeProto& n, Convert&& convert) {
  Graph scratch("fold");
  std::vector<Tensor> values;
  std::map<std::string, Variable*> scratch_vars;
  if (!fold_inputs(n, scratch, values, scratch_vars)) return false;
  Graph* saved_graph = graph_;
  graph_ = &scratch;
  vars_.swap(scratch_vars);
  std::vector<Var> outs;
  try {
    outs = convert();
  } catch (...) {
    graph_ = saved_graph;
    vars_.swap(scratch_vars);
    throw;
  }
  graph_ = saved_graph;
  vars_.swap(scratch_vars);
  finish_fold(n, scratch, outs, values);
  return true;
}

}  // namespace kiln
