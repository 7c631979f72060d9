#include "graph/graph.h"

#include <atomic>

#include "util/error.h"
#include "util/strings.h"

namespace kiln {

std::string Node::label() const {
  std::string s = "node " + std::to_string(id);
  if (!name.empty()) s += " '" + name + "'";
  return s + " (" + op->name() + ")";
}

uint64_t GraphUid::next() {
  static std::atomic<uint64_t> counter{0};
  return ++counter;
}

Variable* Graph::new_variable(const std::string& name, TensorType type, VarKind kind) {
  ++generation_;
  auto v = std::make_unique<Variable>();
  v->id = static_cast<int>(variables_.size());
  // An unnamed value's "t5" must not take a name a model gave another value.
  v->name = name.empty() ? fresh_name("t" + std::to_string(v->id)) : name;
  v->type = std::move(type);
  v->kind = kind;
  by_name_.emplace(v->name, v.get());
  variables_.push_back(std::move(v));
  return variables_.back().get();
}

void Graph::rename(Variable* v, const std::string& name) {
  check_owned(v, "rename");
  if (v->name == name) return;
  if (find_variable(name))
    throw UserError("variable '" + v->name + "': cannot take the name '" + name +
                    "': already used");
  by_name_.erase(v->name);
  v->name = name;
  by_name_.emplace(name, v);
  ++generation_;
}

std::string Graph::fresh_name(const std::string& base) {
  auto taken = [&](const std::string& n) {
    return by_name_.count(n) || (reserved_ && reserved_->find_variable(n));
  };
  if (!taken(base)) return base;
  int& next = next_suffix_[base];
  if (next < 2) next = 2;
  for (;; ++next) {
    std::string candidate = base + "_" + std::to_string(next);
    if (!taken(candidate)) {
      ++next;
      return candidate;
    }
  }
}

void Graph::reserve_names_of(const Graph* other) { reserved_ = other; }

void Graph::reserve(size_t variables, size_t nodes) {
  variables_.reserve(variables);
  by_name_.reserve(variables);
  nodes_.reserve(nodes);
}

bool Graph::owns(const Variable* v) const {
  return v && v->id >= 0 && v->id < static_cast<int>(variables_.size()) &&
         variables_[static_cast<size_t>(v->id)].get() == v;
}

void Graph::check_owned(const Variable* v, const std::string& where) const {
  if (!v) throw UserError(where + ": null variable");
  if (v->id < 0 || v->id >= static_cast<int>(variables_.size()) || variables_[v->id].get() != v) {
    throw UserError(where + ": variable '" + v->name + "' belongs to another graph");
  }
}

Variable* Graph::add_input(const std::string& name, TensorType type) {
  if (name.empty()) throw UserError("graph input needs a name");
  if (find_variable(name)) throw UserError("graph input '" + name + "': name already used");
  for (int64_t d : type.dims) {
    if (d < kDynamic)
      throw UserError("graph input '" + name + "': bad dimension " + std::to_string(d));
  }
  type.check_size("graph input '" + name + "'");
  Variable* v = new_variable(name, std::move(type), VarKind::kInput);
  inputs_.push_back(v);
  return v;
}

Variable* Graph::add_constant(Tensor value, const std::string& name) {
  if (!value.defined()) throw UserError("constant '" + name + "': no value");
  if (!name.empty() && find_variable(name)) {
    throw UserError("constant '" + name + "': name already used");
  }
  TensorType type{value.dtype(), value.shape()};
  Variable* v =
      new_variable(name.empty() ? fresh_name("c" + std::to_string(variables_.size())) : name,
                   std::move(type), VarKind::kConstant);
  v->value = value.contiguous();
  constants_.push_back(v);
  return v;
}

Variable* Graph::add_parameter(Tensor value, const std::string& name) {
  Variable* v = add_constant(std::move(value), name);
  v->parameter = true;
  return v;
}

Node* Graph::add_node(std::shared_ptr<const Op> op, const std::vector<Variable*>& inputs,
                      const std::string& node_name, const std::vector<std::string>& output_names) {
  auto node = std::make_unique<Node>();
  node->id = static_cast<int>(nodes_.size());
  node->op = std::move(op);
  node->name = node_name;
  std::vector<TensorType> in_types;
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (!owns(inputs[i])) check_owned(inputs[i], node->label() + " input " + std::to_string(i));
    in_types.push_back(inputs[i]->type);
  }
  std::vector<TensorType> out_types;
  try {
    out_types = node->op->infer_type(in_types);
    for (size_t k = 0; k < out_types.size(); ++k)
      out_types[k].check_size("output " + std::to_string(k));
  } catch (const UserError& e) {
    std::vector<std::string> desc;
    for (auto* v : inputs) desc.push_back(v->name + ": " + v->type.to_string());
    std::string msg = node->label() + ": " + e.what() + " [inputs: " + join(desc, "; ") + "]";
    if (dynamic_cast<const UnsupportedError*>(&e)) throw UnsupportedError(msg);
    throw UserError(msg);
  }
  node->inputs = inputs;
  for (size_t i = 0; i < out_types.size(); ++i) {
    std::string oname = i < output_names.size() ? output_names[i] : "";
    if (!oname.empty() && find_variable(oname)) {
      throw UserError(node->label() + ": output name '" + oname + "' already used");
    }
    Variable* v = new_variable(oname, out_types[i], VarKind::kNodeOutput);
    v->owner = node.get();
    v->output_index = static_cast<int>(i);
    node->outputs.push_back(v);
  }
  ++generation_;
  nodes_.push_back(std::move(node));
  return nodes_.back().get();
}

void Graph::add_output(Variable* v) {
  check_owned(v, "graph output");
  ++generation_;
  outputs_.push_back(v);
}

void Graph::set_outputs(const std::vector<Variable*>& outputs) {
  ++generation_;
  outputs_.clear();
  for (auto* v : outputs) add_output(v);
}

void Graph::add_update(Variable* state, Variable* value) {
  check_owned(state, "update");
  check_owned(value, "update");
  if (state->kind != VarKind::kInput) {
    throw UserError("update of '" + state->name + "': only a graph input can be updated");
  }
  for (const auto& [s, v] : updates_) {
    if (s == state) throw UserError("update of '" + state->name + "': already updated once");
  }
  if (value->type.dtype != state->type.dtype || value->type.dims != state->type.dims) {
    throw UserError("update of '" + state->name + "' (" + state->type.to_string() + ") by '" +
                    value->name + "' (" + value->type.to_string() + "): the types differ");
  }
  ++generation_;
  updates_.emplace_back(state, value);
}

Variable* Graph::find_variable(const std::string& name) const {
  auto it = by_name_.find(name);
  return it == by_name_.end() ? nullptr : it->second;
}

std::string Graph::to_string() const {
  std::string s = "graph " + name_ + "\n";
  for (auto* v : inputs_) {
    s +=
        "  input " + v->name + ": " + v->type.to_string() + (v->on_device ? " on cuda" : "") + "\n";
  }
  for (auto* v : constants_) s += "  constant " + v->name + ": " + v->type.to_string() + "\n";
  for (const auto& n : nodes_) {
    std::vector<std::string> ins, outs;
    for (auto* v : n->inputs) ins.push_back(v->name);
    for (auto* v : n->outputs) outs.push_back(v->name + ": " + v->type.to_string());
    s += "  " + std::to_string(n->id) + ": " + n->op->describe() + "(" + join(ins, ", ") + ") -> " +
         join(outs, ", ") + "\n";
  }
  std::vector<std::string> outs;
  for (auto* v : outputs_) outs.push_back(v->name);
  s += "  outputs " + join(outs, ", ") + "\n";
  return s;
}

}  // namespace kiln
