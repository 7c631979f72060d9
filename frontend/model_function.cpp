#include "frontend/model_function.h"

#include <algorithm>
#include <fstream>
#include <optional>
#include <set>
#include <sstream>

#include "frontend/model_loader.h"
#include "frontend/onnx/compress.h"
#include "frontend/onnx/nms.h"
#include "frontend/onnx/nonzero.h"
#include "frontend/onnx/unique.h"
#include "util/error.h"
#include "util/fs.h"
#include "util/strings.h"

namespace kiln {
namespace fs = std::filesystem;
namespace {

double ms_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t).count();
}

}  // namespace

ModelFunction::ModelFunction(const fs::path& path, CompileOptions options)
    : origin_(path.string()), dir_(path.parent_path()), options_(std::move(options)) {
  const auto start = std::chrono::steady_clock::now();
  // A model whose graph does not depend on input values loads once (an ONNX model through the
  // cache of imported models, which maps the weights of one seen before). An ONNX model that
  // cannot load so (an input whose value decides the graph, a NonZero computed between
  // stages, a bad file) goes the staged way, which builds it per value set or says what is
  // wrong. Only loading falls back: a compile error is the model's answer.
  std::optional<Graph> graph;
  try {
    graph = load_model(path);
  } catch (const Error&) {
    if (path.extension() != ".onnx") throw;
  }
  if (graph) {
    Variant v{std::make_unique<Graph>(std::move(*graph)), nullptr, {}};
    v.outputs.resize(v.graph->outputs().size());  // tensors: a model of sequences loads below
    load_ms_ = ms_since(start);
    for (const Variable* in : v.graph->inputs()) inputs_.push_back({in->name, in->type});
    v.function = std::make_unique<TieredFunction>(*v.graph, options_);
    last_ = &variants_.emplace("", std::move(v)).first->second;
    return;
  }
  bytes_ = read_file(path);
  init_onnx();
}

ModelFunction::ModelFunction(std::string bytes, std::string origin, fs::path dir,
                             CompileOptions options, std::map<std::string, TensorType> outer_staged)
    : bytes_(std::move(bytes)),
      origin_(std::move(origin)),
      dir_(std::move(dir)),
      options_(std::move(options)),
      outer_staged_(std::move(outer_staged)) {
  init_onnx();
}

void ModelFunction::init_onnx() {
  const auto start = std::chrono::steady_clock::now();
  std::vector<ValueKind> output_kinds;
  inputs_ = onnx_model_inputs(bytes_, origin_, &output_kinds);
  for (const ModelInput& in : inputs_)
    composite_inputs_ = composite_inputs_ || in.kind != ValueKind::kTensor;
  for (ValueKind k : output_kinds)
    composite_outputs_ = composite_outputs_ || k != ValueKind::kTensor;
  if (composite_inputs_) return;  // built per structure, when a call brings one
  try {
    Variant v;
    v.graph = std::make_unique<Graph>(load({}, {}, &v.outputs));
    load_ms_ = ms_since(start) - stage_ms_;
    v.function = std::make_unique<TieredFunction>(*v.graph, options_);
    last_ = &variants_.emplace("", std::move(v)).first->second;
  } catch (const InputValueNeeded& e) {
    value_inputs_.push_back(e.input());  // the rest are found on the first call
  }
}

Graph ModelFunction::load(const std::map<std::string, Tensor>& bound, const Structures& structures,
                          std::vector<ValueStructure>* outputs) {
  stage_ms_ = 0;
  for (;;) {
    OnnxBindings bindings;
    bindings.input_values = bound;
    bindings.staged = outer_staged_;
    bindings.structures = structures;
    bindings.output_structures = outputs;
    for (const Stage& s : stages_) {
      for (size_t k = 0; k < s.outputs.size(); ++k)
        if (!s.outputs[k].empty()) bindings.staged[s.outputs[k]] = s.types[k];
      for (size_t k = 0; k < s.carried.size(); ++k)
        bindings.staged[s.carried[k]] = s.carried_types[k];
    }
    // One import finds every node needing run-time values (each one's outputs enter as
    // inputs as it goes); their stages are made in order, and the model imported again.
    std::vector<RunTimeValueNeeded> deferred;
    bindings.deferred = &deferred;
    // Control flow whose output shapes are known now runs as a step of the module.
    bindings.host_node = [this](
                             const RunTimeValueNeeded& need,
                             const std::vector<TensorType>& inputs) -> std::shared_ptr<const Op> {
      if (!runs_as_step(need)) return nullptr;
      std::shared_ptr<ControlNode> node =
          control_node(need, origin_, dir_, options_, control_nodes_);
      return std::make_shared<HostCallOp>(Attrs{{"key", node->key()}, {"kind", need.kind()}},
                                          inputs, need.types(), node);
    };
    try {
      return parse_onnx_model(bytes_, origin_, dir_, bindings);
    } catch (const RunTimeValueNeeded& e) {
      if (deferred.empty()) deferred.push_back(e);
      for (const RunTimeValueNeeded& need : deferred) add_stage(need, bindings.staged);
    } catch (const InputValueNeeded& e) {
      for (const Stage& s : stages_) {
        if (std::find(s.outputs.begin(), s.outputs.end(), e.input()) != s.outputs.end()) {
          throw UnsupportedError(std::string(e.what()) + " ('" + e.input() + "' is " + s.kind +
                                 "'s output, known only at run time)");
        }
      }
      throw;
    }
  }
}

void ModelFunction::add_stage(const RunTimeValueNeeded& e,
                              std::map<std::string, TensorType>& staged) {
  for (const Stage& s : stages_) {
    if (s.outputs == e.outputs())
      throw InternalError("stage '" + join(s.outputs, "', '") + "' met twice");
  }
  Stage s{e.values(), e.outputs(), e.kind(), e.types(), e.attrs(), nullptr, nullptr, {}, {}, {}};
  if (s.kind == "Loop" || s.kind == "Scan" || s.kind == "If")
    s.control = control_node(e, origin_, dir_, options_, control_nodes_);
  // At hand before this stage: the model's inputs, and what earlier stages computed.
  const std::map<std::string, TensorType>& available = staged;
  std::vector<std::string> computed;  // the values a prefix must compute
  for (const std::string& v : s.values) {
    const bool declared = std::any_of(inputs_.begin(), inputs_.end(),
                                      [&](const ModelInput& in) { return in.name == v; });
    if (!v.empty() && !declared && !available.count(v)) computed.push_back(v);
  }
  if (!computed.empty()) {
    std::vector<std::string> named, carried;
    for (const std::string& v : s.values)
      if (!v.empty()) named.push_back(v);
    const auto start = std::chrono::steady_clock::now();
    // The prefix takes what earlier stages computed as inputs, and hands on what the rest
    // reads from it: each node before the last cut runs once per call.
    s.prefix.reset(new ModelFunction(
        onnx_prefix_model(bytes_, origin_, named, available, &carried),
        origin_ + " (the stage computing '" + join(named, "', '") + "')", dir_, options_));
    s.prefix->lenient_inputs_ = true;
    carry_from_prefix(s, named.size(), carried);
    stage_ms_ += ms_since(start);
  }
  for (size_t k = 0; k < s.outputs.size(); ++k)
    if (!s.outputs[k].empty()) staged[s.outputs[k]] = s.types[k];
  for (size_t k = 0; k < s.carried.size(); ++k) staged[s.carried[k]] = s.carried_types[k];
  stages_.push_back(std::move(s));
}

ModelFunction::Structures ModelFunction::structures_of(
    const std::map<std::string, Tensor>& inputs) const {
  Structures out;
  for (const ModelInput& in : inputs_) {
    if (in.kind == ValueKind::kTensor) continue;
    ValueStructure st{true, holds_sequence(in.kind), 0, {}};
    if (!st.sequence) {
      auto it = inputs.find(in.name);
      st.present = it != inputs.end();
      st.length = st.present ? 1 : 0;
      if (st.present) st.ranks.push_back(it->second.ndim());
    } else {
      if (inputs.count(in.name))
        throw UserError(origin_ + ": input '" + in.name + "' is a " + value_kind_name(in.kind) +
                        "; give its elements as '" + element_name(in.name, 0) + "', '" +
                        element_name(in.name, 1) + "', ...");
      for (auto it = inputs.find(element_name(in.name, 0)); it != inputs.end();
           it = inputs.find(element_name(in.name, static_cast<size_t>(st.length)))) {
        st.ranks.push_back(it->second.ndim());
        ++st.length;
      }
      // An optional sequence given no element is taken as empty (run_values tells the two).
      st.present = st.length > 0 || in.kind == ValueKind::kSequence;
    }
    out[in.name] = st;
  }
  return out;
}

ModelFunction::Variant& ModelFunction::variant_for(const std::map<std::string, Tensor>& inputs,
                                                   const Structures& structures) {
  if (value_inputs_.empty() && !composite_inputs_ && last_) return *last_;
  auto value_of = [&](const std::string& name) -> const Tensor& {
    auto it = inputs.find(name);
    if (it == inputs.end()) throw UserError(origin_ + ": missing input '" + name + "'");
    return it->second;
  };
  for (;;) {
    // The variant's key: each value input's dtype, shape and bytes.
    std::map<std::string, Tensor> bound;
    std::string key;
    for (const auto& [name, st] : structures) key += name + ":" + st.str() + ";";
    for (const std::string& name : value_inputs_) {
      Tensor t = value_of(name).contiguous();
      bound[name] = t;
      key += name + "=" + t.describe() + ":";
      key.append(static_cast<const char*>(t.data()), t.nbytes());
      key += ";";
    }
    if (auto it = variants_.find(key); it != variants_.end()) return it->second;
    Variant v;
    const auto start = std::chrono::steady_clock::now();
    try {
      v.graph = std::make_unique<Graph>(load(bound, structures, &v.outputs));
      load_ms_ = ms_since(start) - stage_ms_;
    } catch (const InputValueNeeded& e) {
      if (bound.count(e.input())) throw;  // cannot happen: bound inputs are values
      value_inputs_.push_back(e.input());
      continue;
    }
    v.function = std::make_unique<TieredFunction>(*v.graph, options_);
    if (variants_.size() >= kMaxVariants && !order_.empty()) {
      if (last_ == &variants_.at(order_.front())) last_ = nullptr;
      variants_.erase(order_.front());
      order_.pop_front();
    }
    order_.push_back(key);
    return variants_.emplace(key, std::move(v)).first->second;
  }
}

std::vector<Tensor> ModelFunction::run(const std::map<std::string, Tensor>& inputs) {
  return run_flat(inputs, composite_inputs_ ? structures_of(inputs) : Structures{});
}

std::vector<ModelValue> ModelFunction::run_values(const std::map<std::string, ModelValue>& inputs) {
  std::map<std::string, Tensor> flat;
  Structures structures;
  for (const auto& [name, value] : inputs) {
    const auto in = std::find_if(inputs_.begin(), inputs_.end(),
                                 [&](const ModelInput& i) { return i.name == name; });
    const ValueKind kind = in == inputs_.end() ? ValueKind::kTensor : in->kind;
    const bool fits = value.present ? value.sequence == holds_sequence(kind) &&
                                          (value.sequence || value.tensors.size() == 1)
                                    : is_optional(kind);
    if (!fits)
      throw UserError(origin_ + ": input '" + name + "' is a " + value_kind_name(kind) +
                      ", given " + value.describe());
    if (kind != ValueKind::kTensor) structures[name] = value.structure();
    for (size_t k = 0; k < value.tensors.size(); ++k)
      flat[value.sequence ? element_name(name, k) : name] = value.tensors[k];
  }
  for (const ModelInput& in : inputs_) {
    if (in.kind != ValueKind::kTensor && !structures.count(in.name))
      throw UserError(origin_ + ": missing input '" + in.name + "' (a " + value_kind_name(in.kind) +
                      ")");
  }
  std::vector<Tensor> outs = run_flat(flat, structures);
  std::vector<ModelValue> values;
  size_t next = 0;
  for (const ValueStructure& st : last_->outputs) {
    ModelValue v{st.present, st.sequence, {}};
    for (int64_t k = 0; k < (st.present ? st.length : 0); ++k) v.tensors.push_back(outs.at(next++));
    values.push_back(std::move(v));
  }
  return values;
}

std::vector<Tensor> ModelFunction::run_flat(const std::map<std::string, Tensor>& inputs,
                                            const Structures& structures) {
  Variant& v = variant_for(inputs, structures);
  last_ = &v;
  // Stages in order: each prefix reads the call's inputs and what earlier stages computed
  // (their results and carried values); the model reads the lot.
  std::map<std::string, Tensor> at_hand;
  if (!stages_.empty()) at_hand = inputs;
  for (Stage& s : stages_) {
    std::vector<Tensor> computed;
    if (s.prefix) computed = s.prefix->run(at_hand);
    std::vector<const Tensor*> values;
    size_t next = 0;
    for (const std::string& v : s.values) {
      if (v.empty()) {
        values.push_back(nullptr);
      } else if (s.prefix) {
        values.push_back(&computed.at(next++));
      } else {
        auto x = at_hand.find(v);
        values.push_back(x == at_hand.end() ? nullptr : &x->second);
      }
    }
    for (size_t k = 0; k < s.carried.size(); ++k)
      at_hand[s.carried[k]] = computed.at(s.carried_index[k]);
    std::vector<Tensor> outs = evaluate_stage(s, values);
    for (size_t k = 0; k < s.outputs.size() && k < outs.size(); ++k)
      if (!s.outputs[k].empty()) at_hand[s.outputs[k]] = std::move(outs[k]);
  }
  const std::map<std::string, Tensor>& from = stages_.empty() ? inputs : at_hand;
  std::map<std::string, Tensor> args;
  for (const Variable* in : v.graph->inputs()) {
    if (auto it = from.find(in->name); it != from.end()) args[in->name] = it->second;
  }
  if (lenient_inputs_) return v.function->run(args);
  // Names the model does not declare go on to Function::run, which reports them.
  for (const auto& [name, t] : inputs) {
    if (std::none_of(inputs_.begin(), inputs_.end(),
                     [&](const ModelInput& in) { return in.name == name; }))
      args[name] = t;
  }
  return v.function->run(args);
}

std::vector<Tensor> ModelFunction::operator()(const std::vector<Tensor>& inputs) {
  if (composite_inputs_)
    throw UserError(origin_ + ": the model takes sequences or optionals; call it by name");
  if (inputs.size() != inputs_.size()) {
    throw UserError(origin_ + ": " + std::to_string(inputs.size()) +
                    " inputs given, the model takes " + std::to_string(inputs_.size()));
  }
  // One graph taking the model's inputs in order: no names to match (a loop body's call).
  if (last_ && value_inputs_.empty() && stages_.empty() && variants_.size() == 1) {
    const std::vector<Variable*>& in = last_->graph->inputs();
    bool same = in.size() == inputs_.size();
    for (size_t k = 0; same && k < in.size(); ++k) same = in[k]->name == inputs_[k].name;
    if (same) return (*last_->function)(inputs);
  }
  std::map<std::string, Tensor> named;
  for (size_t i = 0; i < inputs.size(); ++i) named[inputs_[i].name] = inputs[i];
  return run(named);
}

Function& ModelFunction::function() {
  if (!last_) throw UserError(origin_ + ": the model is built when its input values arrive");
  return last_->function->compiled();
}

TieredFunction& ModelFunction::tiered() {
  if (!last_) throw UserError(origin_ + ": the model is built when its input values arrive");
  return *last_->function;
}

const Graph& ModelFunction::graph() {
  if (!last_) throw UserError(origin_ + ": the model is built when its input values arrive");
  return *last_->graph;
}

std::vector<std::pair<std::string, ModelFunction*>> ModelFunction::stages() {
  std::vector<std::pair<std::string, ModelFunction*>> out;
  for (Stage& s : stages_) {
    std::vector<std::string> named;
    for (const std::string& v : s.values)
      if (!v.empty()) named.push_back(v);
    out.emplace_back(join(named, ", "), s.prefix.get());
  }
  return out;
}

void ModelFunction::carry_from_prefix(Stage& s, size_t named,
                                      const std::vector<std::string>& carried) {
  // The prefix's outputs after the named values, in order. A value the prefix knows at load
  // time (a constant) is not carried: the model folds it again, and keeps it known.
  if (s.prefix->value_inputs_.size() > 0 || !s.prefix->last_) return;
  const std::vector<Variable*>& outs = s.prefix->last_->graph->outputs();
  for (size_t k = 0; k < carried.size() && named + k < outs.size(); ++k) {
    const Variable* v = outs[named + k];
    const Variable* src = v;
    if (v->kind == VarKind::kNodeOutput && v->owner && v->owner->inputs.size() == 1 &&
        v->owner->op->name() == "reshape")
      src = v->owner->inputs[0];
    if (src->kind == VarKind::kConstant) continue;
    s.carried.push_back(carried[k]);
    s.carried_types.push_back(v->type);
    s.carried_index.push_back(named + k);
  }
}

std::vector<Tensor> ModelFunction::evaluate_stage(Stage& s,
                                                  const std::vector<const Tensor*>& values) {
  const std::string where = origin_ + ": " + s.kind + " giving '" + s.outputs.at(0) + "'";
  if (s.control) return s.control->run(values);
  if (values.empty() || !values[0]) throw UserError(where + ": its input is absent");
  if (s.kind == "Unique") {
    const std::optional<int64_t> axis =
        s.attrs.count("axis") ? std::optional<int64_t>(attr_int(s.attrs, "axis")) : std::nullopt;
    return unique(*values[0], axis, attr_int(s.attrs, "sorted", 1) != 0);
  }
  if (s.kind == "Compress") {
    if (values.size() < 2 || !values[1]) throw UserError(where + ": its condition is absent");
    const std::optional<int64_t> axis =
        s.attrs.count("axis") ? std::optional<int64_t>(attr_int(s.attrs, "axis")) : std::nullopt;
    return {compress(*values[0], *values[1], axis)};
  }
  if (s.kind == "NonMaxSuppression") {
    if (values.size() < 2 || !values[1])
      throw UserError("NonMaxSuppression's boxes and scores are missing");
    return {non_max_suppression(*values[0], *values[1],
                                nms_params(values, attr_int(s.attrs, "center_point_box", 0)))};
  }
  return {nonzero_indices(*values.at(0))};
}

std::vector<std::string> ModelFunction::output_names() { return tiered().output_names(); }

}  // namespace kiln
