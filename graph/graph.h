#pragma once
// Variables, nodes (Theano's Apply) and graphs. Nodes are kept in topological order by
// construction: a node can only consume variables that already exist.
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "graph/constant_recipe.h"
#include "graph/op.h"
#include "graph/tensor_type.h"
#include "runtime/tensor.h"

namespace kiln {

struct Node;

enum class VarKind { kInput, kConstant, kNodeOutput };

struct Variable {
  int id = 0;
  std::string name;
  TensorType type;
  VarKind kind = VarKind::kNodeOutput;
  Node* owner = nullptr;  // for node outputs
  int output_index = 0;
  std::optional<Tensor> value;  // for constants
  // A model weight (e.g. an ONNX initializer): bound at run time like any tensor constant
  // and never inlined into the source, so one module serves any weights.
  bool parameter = false;
  // A graph input the caller passes in device (CUDA) memory; set by CUDA placement.
  bool on_device = false;
  // For a constant of a rewritten graph: how its value follows from the given graph's
  // constants (null in a graph nobody rewrote).
  RecipePtr recipe;
  // A constant's content digest when its loader already knows it (compiler/value_digest.h),
  // so nothing hashes the bytes again. True only while `value` still has the bytes it was
  // computed for: `data` is where they were (a value replaced since has other bytes).
  struct KnownDigest {
    const void* data = nullptr;
    std::string sha256;
  } known_digest;
};

// True for a rank-0 constant whose value is pasted into generated code (and so into the
// cache key); parameters never are.
inline bool is_inlined_scalar(const Variable* v) {
  return v->kind == VarKind::kConstant && v->type.rank() == 0 && v->value && !v->parameter;
}

struct Node {
  int id = 0;
  std::shared_ptr<const Op> op;
  std::vector<Variable*> inputs;
  std::vector<Variable*> outputs;
  std::string name;           // optional user-facing name (e.g. from a model file)
  std::string label() const;  // "node 3 'fc1' (matmul)"
};

// A process-unique number per graph object; a moved-from graph gets a fresh one.
class GraphUid {
 public:
  GraphUid() : value_(next()) {}
  GraphUid(const GraphUid&) = delete;
  GraphUid& operator=(const GraphUid&) = delete;
  GraphUid(GraphUid&& o) noexcept : value_(o.value_) { o.value_ = next(); }
  GraphUid& operator=(GraphUid&& o) noexcept {
    value_ = o.value_;
    o.value_ = next();
    return *this;
  }
  uint64_t value() const { return value_; }

 private:
  static uint64_t next();
  uint64_t value_;
};

class Graph {
 public:
  explicit Graph(std::string name = "graph") : name_(std::move(name)) {}
  Graph(const Graph&) = delete;
  Graph& operator=(const Graph&) = delete;
  Graph(Graph&&) = default;
  Graph& operator=(Graph&&) = default;

  Variable* add_input(const std::string& name, TensorType type);
  // Tensor constants (weights) become module inputs; rank-0 constants may be inlined.
  Variable* add_constant(Tensor value, const std::string& name = "");
  Variable* add_parameter(Tensor value, const std::string& name);  // see Variable::parameter
  // Runs the op's type inference; a mismatch throws UserError naming node, op and types.
  Node* add_node(std::shared_ptr<const Op> op, const std::vector<Variable*>& inputs,
                 const std::string& node_name = "",
                 const std::vector<std::string>& output_names = {});
  void add_output(Variable* v);
  void set_outputs(const std::vector<Variable*>& outputs);
  // A state update (Theano's `updates`): after each run of the compiled function, graph
  // input `state` holds `value` (same type), written in place where the engine can order it
  // after every read of the old value. An optimizer step updates its parameters and moments
  // this way. Throws UserError for a state that is not an input, updated twice, or a type
  // mismatch.
  void add_update(Variable* state, Variable* value);
  const std::vector<std::pair<Variable*, Variable*>>& updates() const { return updates_; }

  const std::string& name() const { return name_; }
  void set_name(std::string name) { name_ = std::move(name); }
  const std::vector<Variable*>& inputs() const { return inputs_; }
  const std::vector<Variable*>& outputs() const { return outputs_; }
  const std::vector<Variable*>& constants() const { return constants_; }
  const std::vector<std::unique_ptr<Node>>& nodes() const { return nodes_; }
  const std::vector<std::unique_ptr<Variable>>& variables() const { return variables_; }
  // By name, in constant time (a name index, not a scan: 100k-node graphs load in linear time).
  Variable* find_variable(const std::string& name) const;
  // Renames a variable (the only way a name changes, so the index stays true); throws
  // UserError when another variable has the name.
  void rename(Variable* v, const std::string& name);
  // A name for a value a pass or loader invents: `base` when no variable has it and it is not
  // reserved, else base_2, base_3, ... Unique by construction, so no model's names (or their
  // absence) can make two invented names collide.
  std::string fresh_name(const std::string& base);
  // Room for about this many variables and nodes (a copy of a graph knows its size).
  void reserve(size_t variables, size_t nodes);
  // While set, fresh_name never returns a name of `other` (a rewrite reserves its source
  // graph's names, so the values it copies later keep theirs); nullptr clears it.
  void reserve_names_of(const Graph* other);

  std::string to_string() const;  // one line per input, node and output

  // This graph object and the count of edits made through its methods: a compiler that saw
  // (uid, generation) before knows the graph is unchanged without hashing it. Editing a
  // Variable or Node through its pointer is not an edit the count sees.
  uint64_t uid() const { return uid_.value(); }
  uint64_t generation() const { return generation_; }

 private:
  Variable* new_variable(const std::string& name, TensorType type, VarKind kind);
  bool owns(const Variable* v) const;
  void check_owned(const Variable* v, const std::string& where) const;
  std::string name_;
  GraphUid uid_;
  uint64_t generation_ = 0;
  std::vector<std::unique_ptr<Variable>> variables_;
  std::vector<std::unique_ptr<Node>> nodes_;
  std::vector<Variable*> inputs_;
  std::vector<Variable*> constants_;
  std::vector<Variable*> outputs_;
  std::vector<std::pair<Variable*, Variable*>> updates_;
  std::unordered_map<std::string, Variable*> by_name_;
  const Graph* reserved_ = nullptr;                   // see reserve_names_of
  std::unordered_map<std::string, int> next_suffix_;  // per base: where fresh_name resumes
};

}  // namespace kiln
