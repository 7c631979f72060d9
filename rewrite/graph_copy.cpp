#include "rewrite/graph_copy.h"

#include <algorithm>

#include "ops/registry.h"
#include "rewrite/constant_recipe.h"
#include "util/error.h"

namespace kiln {

GraphCopy::GraphCopy(const Graph& src, bool number_sources) : src_(src), dst_(src.name()) {
  // Values copied later keep their names: names a pass invents meanwhile must not take them.
  dst_.reserve_names_of(&src);
  dst_.reserve(src.variables().size(), src.nodes().size());
  map_.reserve(src.variables().size());
  if (number_sources) {
    for (size_t i = 0; i < src.constants().size(); ++i)
      source_index_[src.constants()[i]] = static_cast<int>(i);
  }
  for (const Variable* v : src.inputs()) {
    map_[v] = dst_.add_input(v->name, v->type);
    map_[v]->on_device = v->on_device;
  }
}

Variable* GraphCopy::map(const Variable* old) {
  auto it = map_.find(old);
  if (it != map_.end()) return it->second;
  if (old->kind != VarKind::kConstant) {
    throw InternalError("rewrite: variable '" + old->name + "' used before it was defined");
  }
  Variable* v = old->parameter ? dst_.add_parameter(*old->value, old->name)
                               : dst_.add_constant(*old->value, old->name);
  if (auto it = source_index_.find(old); it != source_index_.end()) {
    v->recipe = source_recipe(it->second);
  } else {
    v->recipe = old->recipe;
  }
  map_[old] = v;
  return v;
}

std::vector<Variable*> GraphCopy::map(const std::vector<Variable*>& olds) {
  std::vector<Variable*> out;
  out.reserve(olds.size());
  for (const Variable* v : olds) out.push_back(map(v));
  return out;
}

void GraphCopy::replace(const Variable* old, Variable* now) { map_[old] = now; }

Node* GraphCopy::copy(const Node& node) {
  std::vector<const Variable*> outs(node.outputs.begin(), node.outputs.end());
  return add(node.op, map(node.inputs), outs, node.name);
}

Node* GraphCopy::add(std::shared_ptr<const Op> op, const std::vector<Variable*>& inputs,
                     const std::vector<const Variable*>& replaces, const std::string& node_name) {
  std::vector<std::string> names;
  for (const Variable* v : replaces) names.push_back(v->name);
  Node* n = dst_.add_node(std::move(op), inputs, node_name, names);
  for (size_t i = 0; i < replaces.size() && i < n->outputs.size(); ++i)
    map_[replaces[i]] = n->outputs[i];
  return n;
}

Variable* GraphCopy::add_constant(const Variable* old, Tensor value, bool parameter,
                                  RecipePtr recipe) {
  Variable* v = parameter ? dst_.add_parameter(std::move(value), old->name)
                          : dst_.add_constant(std::move(value), old->name);
  v->recipe = std::move(recipe);
  map_[old] = v;
  return v;
}

Graph GraphCopy::finish() {
  std::vector<Variable*> outputs;
  for (const Variable* old : src_.outputs()) {
    Variable* v = map(old);
    if (v->name != old->name) {
      // The output now reads another value: a copy carries the output's own name.
      std::vector<int64_t> same(static_cast<size_t>(v->type.rank()), 0);
      v = dst_.add_node(OpRegistry::instance().create("reshape", {{"shape", same}}), {v}, "",
                        {old->name})
              ->outputs[0];
    }
    outputs.push_back(v);
  }
  dst_.set_outputs(outputs);
  dst_.reserve_names_of(nullptr);  // the source may go before the copy does
  return std::move(dst_);
}

std::unordered_map<const Variable*, int> count_uses(const Graph& graph) {
  std::unordered_map<const Variable*, int> uses;
  for (const auto& node : graph.nodes()) {
    for (const Variable* v : node->inputs) ++uses[v];
  }
  for (const Variable* v : graph.outputs()) ++uses[v];
  return uses;
}

bool is_graph_output(const Graph& graph, const Variable* v) {
  return std::find(graph.outputs().begin(), graph.outputs().end(), v) != graph.outputs().end();
}

const Node* produced_by(const Variable* v, const char* op) {
  return v->kind == VarKind::kNodeOutput && v->owner && v->owner->op->name() == op &&
                 v->owner->outputs.size() == 1
             ? v->owner
             : nullptr;
}

}  // namespace kiln
