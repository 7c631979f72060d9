#include "frontend/onnx/onnx_importer.h"

#include <onnx/onnx_pb.h>

#include "frontend/onnx/onnx_model.h"
#include "ops/reference.h"
#include "ops/registry.h"
#include "util/error.h"
#include "util/strings.h"

namespace kiln {
namespace {
// Folding runs `perform` at load time: worth it for shape arithmetic, not for big tensors.
constexpr int64_t kFoldLimit = 1 << 16;
}  // namespace

bool OnnxImporter::has_input(const onnx::NodeProto& n, int i) {
  return i < n.input_size() && !n.input(i).empty();
}

const std::string& OnnxImporter::input_name(const onnx::NodeProto& n, int i) const {
  if (!has_input(n, i)) throw UserError("input " + std::to_string(i) + " is missing");
  return n.input(i);
}

const Tensor* OnnxImporter::known(const std::string& name) const {
  auto it = known_.find(name);
  return it == known_.end() ? nullptr : &it->second;
}

void OnnxImporter::add_known(const std::string& name, Tensor value, bool parameter) {
  known_[name] = std::move(value);
  known_is_parameter_[name] = parameter;
}

Tensor convert_tensor(const Tensor& t, DType to) {
  Tensor out = Tensor::empty(to, t.shape());
  std::vector<Tensor> outs{out};
  OpRegistry::instance()
      .create("convert", {{"to", std::string(dtype_name(to))}})
      ->perform({t}, outs);
  return out;
}

void OnnxImporter::record_value_deps(const onnx::NodeProto& n) {
  std::set<std::string> deps;
  for (int i = 0; i < n.input_size(); ++i) {
    const std::string& in = n.input(i);
    if (in.empty() || known(in)) continue;
    if (graph_inputs_.count(in)) {
      deps.insert(in);
    } else if (auto it = value_deps_.find(in); it != value_deps_.end()) {
      deps.insert(it->second.begin(), it->second.end());
    } else {
      return;  // reads a value that no input's value alone decides
    }
  }
  if (deps.empty()) return;
  for (int k = 0; k < n.output_size(); ++k) {
    if (!n.output(k).empty()) value_deps_[n.output(k)] = deps;
  }
}

std::optional<DType> OnnxImporter::compute_type(DType storage) {
  switch (storage) {
    case DType::kFloat16:
    case DType::kBFloat16:
      return DType::kFloat32;
    case DType::kInt16:
    case DType::kUInt16:
      return DType::kInt32;
    case DType::kUInt32:
    case DType::kUInt64:
      return DType::kInt64;
    default:
      return std::nullopt;
  }
}

std::optional<DType> OnnxImporter::storage(const std::string& name) const {
  auto it = storage_.find(name);
  if (it == storage_.end()) return std::nullopt;
  return it->second;
}

DType OnnxImporter::logical_dtype(const onnx::NodeProto& n, int i) {
  if (auto s = storage(input_name(n, i))) return *s;
  return type_of(n, i).dtype;
}

const SymValue* OnnxImporter::sym(const std::string& name) const {
  auto it = sym_.find(name);
  return it == sym_.end() ? nullptr : &it->second;
}

void OnnxImporter::add_sym(const std::string& name, SymValue v) {
  bool constant = true;
  for (const DimExpr& e : v.elems) constant = constant && e.value().has_value();
  if (!constant) {
    sym_[name] = std::move(v);
    return;
  }
  Tensor t =
      Tensor::empty(v.dtype, v.scalar ? Shape{} : Shape{static_cast<int64_t>(v.elems.size())});
  for (size_t i = 0; i < v.elems.size(); ++i) {
    const int64_t x = *v.elems[i].value();
    if (is_float(v.dtype)) {
      t.store(static_cast<int64_t>(i), static_cast<double>(x));
    } else {
      t.store_int(static_cast<int64_t>(i), x);
    }
  }
  add_known(name, std::move(t), false);
}

int OnnxImporter::sym_source(Variable* v) {
  for (size_t k = 0; k < sym_sources_.size(); ++k) {
    if (sym_sources_[k] == v) return static_cast<int>(k);
  }
  sym_sources_.push_back(v);
  return static_cast<int>(sym_sources_.size()) - 1;
}

std::optional<SymValue> OnnxImporter::sym_in(const onnx::NodeProto& n, int i) {
  const std::string& name = input_name(n, i);
  if (const SymValue* s = sym(name)) return *s;
  const Tensor* t = known(name);
  if (!t || is_float(t->dtype()) || t->ndim() > 1 || t->numel() > 64) return std::nullopt;
  SymValue v{t->dtype(), t->ndim() == 0, {}};
  for (int64_t k = 0; k < t->numel(); ++k) v.elems.push_back(DimExpr::constant(t->load_int(k)));
  return v;
}

std::vector<DimExpr> OnnxImporter::to_node_inputs(const std::vector<DimExpr>& exprs,
                                                  std::vector<Var>& inputs) {
  std::vector<DimExpr> out;
  for (const DimExpr& e : exprs) {
    out.push_back(e.remap([&](int source) {
      Variable* v = sym_sources_.at(static_cast<size_t>(source));
      for (size_t k = 0; k < inputs.size(); ++k) {
        if (inputs[k].var() == v) return static_cast<int>(k);
      }
      inputs.push_back(Var(graph_, v));
      return static_cast<int>(inputs.size()) - 1;
    }));
  }
  return out;
}

std::optional<std::vector<DimExpr>> OnnxImporter::dims_in(const onnx::NodeProto& n, int i,
                                                          std::vector<Var>& inputs) {
  auto v = sym_in(n, i);
  if (!v) return std::nullopt;
  return to_node_inputs(v->elems, inputs);
}

Variable* OnnxImporter::variable(const std::string& name) {
  auto it = vars_.find(name);
  if (it != vars_.end()) return it->second;
  if (auto s = sym_.find(name); s != sym_.end()) {
    // A symbolic value used as data: computed at run time from its sources' shapes.
    std::vector<Var> sources;
    const auto exprs = to_node_inputs(s->second.elems, sources);
    std::vector<Variable*> ins;
    for (const Var& v : sources) ins.push_back(v.var());
    Node* node =
        graph_->add_node(OpRegistry::instance().create(
                             "dim_values", {{"dims", dim_exprs_to_string(exprs)},
                                            {"dtype", std::string(dtype_name(s->second.dtype))},
                                            {"scalar", int64_t{s->second.scalar}}}),
                         ins, name);
    vars_[name] = node->outputs[0];
    return node->outputs[0];
  }
  auto k = known_.find(name);
  if (k == known_.end()) return nullptr;
  // Known values used as data become constants on first use; weights stay parameters.
  Variable* v = known_is_parameter_[name] ? graph_->add_parameter(k->second, name)
                                          : graph_->add_constant(k->second, name);
  vars_[name] = v;
  return v;
}

const OnnxComposite* OnnxImporter::composite(const std::string& name) const {
  auto it = composites_.find(name);
  return it == composites_.end() ? nullptr : &it->second;
}

void OnnxImporter::alias(const std::string& to, const std::string& from) {
  if (to == from) return;
  if (auto st = storage(from)) set_storage(to, *st);
  // Asking for the alias's value at load time names the graph input it comes from.
  if (graph_inputs_.count(from)) value_deps_[to] = {from};
  if (auto d = value_deps_.find(from); d != value_deps_.end()) value_deps_[to] = d->second;
  if (const OnnxComposite* c = composite(from)) {
    composites_[to] = *c;
  } else if (const Tensor* v = known(from)) {
    add_known(to, *v, known_is_parameter_[from]);
  } else if (const SymValue* s = sym(from)) {
    add_sym(to, *s);
  } else if (Variable* v = variable(from)) {
    vars_[to] = v;
  } else {
    throw UserError("'" + from + "' is not produced by any earlier node");
  }
}

Var OnnxImporter::in(const onnx::NodeProto& n, int i) {
  const std::string& name = input_name(n, i);
  if (const OnnxComposite* c = composite(name))
    throw UserError("input " + std::to_string(i) + " '" + name + "' is " +
                    (is_optional(c->kind) ? "an " : "a ") + value_kind_name(c->kind) +
                    "; the op takes a tensor");
  Variable* v = variable(name);
  if (!v)
    throw UserError("input " + std::to_string(i) + " '" + name +
                    "' is not produced by any earlier node");
  return Var(graph_, v);
}

const Tensor& OnnxImporter::const_in(const onnx::NodeProto& n, int i, const std::string& what) {
  const std::string& name = input_name(n, i);
  const Tensor* t = known(name);
  if (!t && sym(name)) {
    std::vector<std::string> shown;
    for (const DimExpr& e : sym(name)->elems) shown.push_back(e.value() ? e.str() : "?");
    throw UnsupportedError("input " + std::to_string(i) + " '" + name + "' (" + what +
                           ") follows a dynamic dimension ([" + join(shown, ", ") +
                           "]), which this input cannot take");
  }
  if (!t && !graph_inputs_.count(name)) {
    if (auto deps = value_deps_.find(name); deps != value_deps_.end() && !deps->second.empty()) {
      const std::string& in = *deps->second.begin();
      throw InputValueNeeded(in, "input " + std::to_string(i) + " '" + name + "' (" + what +
                                     ") is computed from graph input '" + in +
                                     "', whose value then decides the graph; it must be given "
                                     "when the model loads (kiln run reads it from the call's "
                                     "inputs)");
    }
  }
  if (!t && graph_inputs_.count(name)) {
    throw InputValueNeeded(name, "input " + std::to_string(i) + " '" + name + "' (" + what +
                                     ") is a graph input whose value decides the graph; it "
                                     "must be given when the model loads (kiln run reads it "
                                     "from the call's inputs)");
  }
  if (!t) {
    throw UnsupportedError(
        "input " + std::to_string(i) + " '" + name + "' (" + what +
        ") must be known when the model loads (a constant, an initializer or shape "
        "arithmetic on static shapes)");
  }
  return *t;
}

std::vector<int64_t> OnnxImporter::const_ints(const onnx::NodeProto& n, int i,
                                              const std::string& what) {
  const Tensor& t = const_in(n, i, what);
  if (is_float(t.dtype()) || t.ndim() > 1) {
    throw UserError("input " + std::to_string(i) + " '" + n.input(i) + "' (" + what +
                    ") must be a 0-D or 1-D integer tensor, got " + t.describe());
  }
  std::vector<int64_t> out;
  for (int64_t k = 0; k < t.numel(); ++k) out.push_back(t.load_int(k));
  return out;
}

TensorType OnnxImporter::type_of(const onnx::NodeProto& n, int i) {
  const std::string& name = input_name(n, i);
  if (const Tensor* t = known(name)) return TensorType{t->dtype(), t->shape()};
  if (const SymValue* s = sym(name)) {
    return TensorType{s->dtype, s->scalar ? Shape{} : Shape{static_cast<int64_t>(s->elems.size())}};
  }
  Variable* v = variable(name);
  if (!v)
    throw UserError("input " + std::to_string(i) + " '" + name +
                    "' is not produced by any earlier node");
  return v->type;
}

bool OnnxImporter::fold_inputs(const onnx::NodeProto& n, Graph& scratch,
                               std::vector<Tensor>& values,
                               std::map<std::string, Variable*>& scratch_vars) {
  int64_t total = 0;
  for (int i = 0; i < n.input_size(); ++i) {
    if (n.input(i).empty()) continue;
    const Tensor* t = known(n.input(i));
    if (!t) return false;
    total += t->numel();
    if (scratch_vars.count(n.input(i))) continue;
    scratch_vars[n.input(i)] = input(scratch, n.input(i), t->dtype(), t->shape()).var();
    values.push_back(*t);
  }
  return total <= kFoldLimit;
}

void OnnxImporter::finish_fold(const onnx::NodeProto& n, Graph& scratch,
                               const std::vector<Var>& outs, const std::vector<Tensor>& values) {
  std::vector<Variable*> out_vars;
  for (const Var& v : outs) out_vars.push_back(v.var());
  // A converter may hand back an input itself (Identity): evaluate_reference needs outputs
  // computed by nodes, so those are taken from the values directly.
  std::vector<Tensor> results(outs.size());
  std::vector<Variable*> computed;
  for (Variable* v : out_vars) {
    if (v->kind == VarKind::kNodeOutput) computed.push_back(v);
  }
  scratch.set_outputs(computed);
  auto evaluated = computed.empty() ? std::vector<Tensor>{} : evaluate_reference(scratch, values);
  size_t next = 0;
  for (size_t k = 0; k < out_vars.size(); ++k) {
    Variable* v = out_vars[k];
    if (v->kind == VarKind::kNodeOutput) {
      results[k] = evaluated[next++];
    } else if (v->kind == VarKind::kConstant) {
      results[k] = *v->value;
    } else {
      for (size_t i = 0; i < scratch.inputs().size(); ++i) {
        if (scratch.inputs()[i] == v) results[k] = values[i];
      }
    }
  }
  for (size_t k = 0; k < results.size() && static_cast<int>(k) < n.output_size(); ++k) {
    if (n.output(static_cast<int>(k)).empty()) continue;
    Tensor value = results[k].clone();
    if (auto compute = compute_type(value.dtype())) {
      // A folded Cast to a storage type: kept in its compute type, like every such value.
      set_storage(n.output(static_cast<int>(k)), value.dtype());
      value = convert_tensor(value, *compute);
    }
    add_known(n.output(static_cast<int>(k)), std::move(value), false);
  }
}

}  // namespace kiln
