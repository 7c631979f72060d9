#include "compiler/module_plan.h"

#include "compiler/backend.h"

#include <algorithm>
#include <charconv>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <string_view>

#include "cache/entry_meta.h"
#include "graph/wire_text.h"
#include "ops/cop.h"
#include "ops/device_placed.h"
#include "ops/registry.h"
#include "ops/transfer.h"
#include "rewrite/constant_recipe.h"
#include "runtime/engine/default_engine.h"
#include "runtime/engine/parallel_for.h"
#include "util/error.h"
#include "util/strings.h"

namespace kiln {
namespace {

// The plan as wire text (graph/wire_text.h).
constexpr std::string_view kMagic = "kiln-plan 1\n";

// The op a step's shape rule comes from, from its name and props: the registry's ops,
// device placement's wrappers and transfers.
std::shared_ptr<const Op> recreate_op(const std::string& name, const Attrs& props) {
  if (name == "to_device" || name == "to_host")
    return std::make_shared<Transfer>(name == "to_device");
  if (const Backend* backend = backend_of_placed(name)) {
    auto inner = std::dynamic_pointer_cast<const COp>(
        OpRegistry::instance().create(name.substr(name.find(':') + 1), props));
    if (!inner) throw UserError("op '" + name + "' has no code");
    return std::make_shared<DevicePlaced>(*backend->op_code(), std::move(inner));
  }
  return OpRegistry::instance().create(name, props);
}

// A step's FLOP count: its op's.
FlopRule flop_rule(std::shared_ptr<const Op> op) {
  return [op = std::move(op)](const std::vector<Shape>& in, const std::vector<Shape>& out) {
    return op->flops(in, out);
  };
}

// A step's shape rule: its op's, given the dtypes of the slots it reads.

ShapeRule shape_rule(std::shared_ptr<const Op> op, const Program& p,
                     const std::vector<int>& inputs) {
  std::vector<DType> dtypes;
  for (int s : inputs) dtypes.push_back(p.slots.at(static_cast<size_t>(s)).dtype);
  return [op = std::move(op), dtypes = std::move(dtypes)](const std::vector<Shape>& shapes) {
    return op->infer_run_shape(shapes, dtypes);
  };
}

// Flattens recipes into preparation steps, each distinct recipe once.
class RecipeFlattener {
 public:
  RecipeFlattener(int n_sources, std::vector<PrepStep>& steps)
      : n_sources_(n_sources), steps_(steps) {}
  int value_of(const RecipePtr& r) {
    if (!r) throw InternalError("module plan: a constant has no recipe");
    if (r->source >= 0) {
      if (r->source >= n_sources_) throw InternalError("module plan: recipe source out of range");
      return r->source;
    }
    auto it = done_.find(r.get());
    if (it != done_.end()) return it->second;
    PrepStep step;
    step.op = r->op;
    step.props = r->props;
    step.output = r->output;
    for (const auto& in : r->inputs) step.inputs.push_back(value_of(in));
    steps_.push_back(std::move(step));
    const int v = n_sources_ + static_cast<int>(steps_.size()) - 1;
    done_[r.get()] = v;
    return v;
  }

 private:
  int n_sources_;
  std::vector<PrepStep>& steps_;
  std::map<const ConstantRecipe*, int> done_;
};

// The step's concat axis in [0, rank) (StepSpec::concat_axis), or -1. A CUDA node's op
// does not say it: device buffers are never bound in place.
int concat_axis_of(const COp* cop, const Program& p, const StepSpec& step) {
  const std::optional<int> axis = cop ? cop->concat_axis() : std::nullopt;
  if (!axis || step.outputs.size() != 1) return -1;
  const auto rank = static_cast<int>(p.slots.at(static_cast<size_t>(step.outputs[0])).dims.size());
  const int a = *axis < 0 ? *axis + rank : *axis;
  return a >= 0 && a < rank ? a : -1;
}

}  // namespace

std::shared_ptr<const ModulePlan> ModulePlan::from_graph(const Graph& graph, const Graph& sources) {
  auto plan = std::shared_ptr<ModulePlan>(new ModulePlan());
  for (const Variable* c : sources.constants()) plan->sources_.push_back(c->type);
  Program& p = plan->skeleton_;
  std::vector<int> slot(graph.variables().size(), -1);
  auto add_slot = [&](const Variable* v, SlotKind kind) {
    slot.at(static_cast<size_t>(v->id)) = static_cast<int>(p.slots.size());
    p.slots.push_back(SlotSpec{v->name, v->type.dtype, v->type.dims, kind});
    if (v->owner) {
      const auto* op = dynamic_cast<const COp*>(v->owner->op.get());
      p.slots.back().on_device = op && op->output_on_device();
    } else {
      p.slots.back().on_device = v->on_device;
    }
    return slot[static_cast<size_t>(v->id)];
  };
  auto slot_of = [&](const Variable* v) { return slot.at(static_cast<size_t>(v->id)); };
  for (const Variable* v : graph.inputs()) p.input_slots.push_back(add_slot(v, SlotKind::kInput));
  RecipeFlattener flatten(static_cast<int>(sources.constants().size()), plan->prep_);
  for (const Variable* v : graph.constants()) {
    const int s = add_slot(v, SlotKind::kParam);
    plan->params_.emplace_back(s, flatten.value_of(v->recipe));
  }
  for (const auto& node : graph.nodes()) {
    StepSpec step;
    step.thunk = node->id;
    for (const Variable* v : node->inputs) step.inputs.push_back(slot_of(v));
    for (const Variable* v : node->outputs) step.outputs.push_back(add_slot(v, SlotKind::kTemp));
    const auto* cop = dynamic_cast<const COp*>(node->op.get());
    if (const int k = cop ? cop->view_of(*node) : -1; k >= 0) {
      p.slots[static_cast<size_t>(step.outputs.at(0))].view_of =
          step.inputs.at(static_cast<size_t>(k));
    }
    step.label = node->label();
    step.exclusive = cop && cop->c_threads_itself();
    step.sized_by_run = cop && cop->c_sized_by_run();
    step.concat_axis = concat_axis_of(cop, p, step);
    step.infer_shape = shape_rule(node->op, p, step.inputs);
    step.flops = flop_rule(node->op);
    p.steps.push_back(std::move(step));
    plan->step_ops_.push_back(StepOp{node->op->name(), node->op->props()});
  }
  for (const Variable* v : graph.outputs()) p.output_slots.push_back(slot_of(v));
  plan->finish();
  return plan;
}

std::string ModulePlan::serialize() const {
  WireWriter w(kMagic);
  const Program& p = skeleton_;
  w.section("sources");
  w.num(static_cast<int64_t>(sources_.size()));
  for (const TensorType& t : sources_) {
    w.num(static_cast<int64_t>(t.dtype));
    w.num(t.rank());
    for (int64_t d : t.dims) w.num(d);
  }
  w.section("slots");
  w.num(static_cast<int64_t>(p.slots.size()));
  for (const SlotSpec& s : p.slots) {
    w.word(s.name);
    w.num(static_cast<int64_t>(s.dtype));
    w.num(static_cast<int64_t>(s.dims.size()));
    for (int64_t d : s.dims) w.num(d);
    w.num(static_cast<int64_t>(s.kind));
    w.num(s.on_device ? 1 : 0);
    w.num(s.view_of + 1);  // 0: not a view
  }
  w.section("inputs");
  w.ints(p.input_slots);
  w.section("outputs");
  w.ints(p.output_slots);
  w.section("prep");
  w.num(static_cast<int64_t>(prep_.size()));
  for (const PrepStep& s : prep_) {
    w.word(s.op);
    w.attrs(s.props);
    w.num(s.output);
    w.ints(s.inputs);
  }
  w.section("params");
  w.num(static_cast<int64_t>(params_.size()));
  for (const auto& [slot, value] : params_) {
    w.num(slot);
    w.num(value);
  }
  w.section("steps");
  w.num(static_cast<int64_t>(p.steps.size()));
  for (size_t i = 0; i < p.steps.size(); ++i) {
    const StepSpec& s = p.steps[i];
    w.num(s.thunk);
    w.word(s.label);
    w.word(step_ops_[i].op);
    w.attrs(step_ops_[i].props);
    w.ints(s.inputs);
    w.ints(s.outputs);
  }
  w.section("end");
  return w.take();
}

std::shared_ptr<const ModulePlan> ModulePlan::parse(const std::string& text,
                                                    const std::string& where) {
  try {
    return parse_wire(text, where);
  } catch (const WireError& e) {
    throw CacheEntryError(e.what());
  }
}

std::shared_ptr<const ModulePlan> ModulePlan::parse_wire(const std::string& text,
                                                         const std::string& where) {
  auto plan = std::shared_ptr<ModulePlan>(new ModulePlan());
  WireReader r(text, kMagic, where);
  Program& p = plan->skeleton_;
  r.expect("sources");
  plan->sources_.resize(r.count("sources"));
  for (TensorType& t : plan->sources_) {
    t.dtype = r.dtype();
    t.dims = r.dims();
  }
  r.expect("slots");
  p.slots.resize(r.count("slots"));
  const auto n_slots = static_cast<int64_t>(p.slots.size());
  for (SlotSpec& s : p.slots) {
    s.name = r.word("slot name");
    s.dtype = r.dtype();
    s.dims = r.dims();
    s.kind = static_cast<SlotKind>(r.index("slot kind", 3));
    s.on_device = r.index("slot side", 2) == 1;
    s.view_of = r.index("slot view", n_slots + 1) - 1;
  }
  r.expect("inputs");
  p.input_slots = r.ints("input slot", n_slots);
  r.expect("outputs");
  p.output_slots = r.ints("output slot", n_slots);
  r.expect("prep");
  plan->prep_.resize(r.count("prep"));
  const auto n_sources = static_cast<int64_t>(plan->sources_.size());
  for (size_t i = 0; i < plan->prep_.size(); ++i) {
    PrepStep& s = plan->prep_[i];
    s.op = r.word("prep op");
    s.props = r.attrs();
    s.output = r.index("prep output", 1 << 20);
    s.inputs = r.ints("prep input", n_sources + static_cast<int64_t>(i));
  }
  r.expect("params");
  plan->params_.resize(r.count("params"));
  for (auto& [slot, value] : plan->params_) {
    slot = r.index("param slot", n_slots);
    value = r.index("param value", n_sources + static_cast<int64_t>(plan->prep_.size()));
  }
  r.expect("steps");
  p.steps.resize(r.count("steps"));
  for (StepSpec& s : p.steps) {
    s.thunk = r.index("thunk", 1 << 30);
    s.label = r.word("step label");
    StepOp op;
    op.op = r.word("step op");
    op.props = r.attrs();
    plan->step_ops_.push_back(std::move(op));
    s.inputs = r.ints("step input", n_slots);
    s.outputs = r.ints("step output", n_slots);
  }
  r.expect("end");
  r.finish();
  try {
    plan->finish();
  } catch (const Error& e) {
    throw CacheEntryError(where + ": " + e.what());
  }
  return plan;
}

void ModulePlan::finish() {
  Program& p = skeleton_;
  const auto n_slots = static_cast<int>(p.slots.size());
  for (const SlotSpec& s : p.slots) {
    if (s.view_of < -1 || s.view_of >= n_slots) throw UserError("a slot views a slot out of range");
  }
  std::vector<bool> read(sources_.size(), false);
  for (const PrepStep& s : prep_) {
    for (int i : s.inputs) {
      if (i < static_cast<int>(sources_.size())) read[static_cast<size_t>(i)] = true;
    }
  }
  prepared_from_.clear();
  for (size_t i = 0; i < read.size(); ++i) {
    if (read[i]) prepared_from_.push_back(static_cast<int>(i));
  }
  for (size_t i = 0; i < p.steps.size(); ++i) {
    if (p.steps[i].infer_shape) continue;  // from_graph: the graph's own op
    std::shared_ptr<const Op> op;
    try {
      op = recreate_op(step_ops_[i].op, step_ops_[i].props);
    } catch (const Error& e) {
      throw UserError(p.steps[i].label + ": " + e.what());
    }
    p.steps[i].flops = flop_rule(op);
    const auto* cop = dynamic_cast<const COp*>(op.get());
    p.steps[i].exclusive = cop && cop->c_threads_itself();
    p.steps[i].sized_by_run = cop && cop->c_sized_by_run();
    p.steps[i].concat_axis = concat_axis_of(cop, p, p.steps[i]);
    p.steps[i].infer_shape = shape_rule(std::move(op), p, p.steps[i].inputs);
  }
}

void ModulePlan::check_sources(const Graph& given) const {
  const auto& constants = given.constants();
  if (constants.size() != sources_.size()) {
    throw UserError("graph '" + given.name() + "' has " + std::to_string(constants.size()) +
                    " constants; its module was built for " + std::to_string(sources_.size()));
  }
  for (size_t i = 0; i < constants.size(); ++i) {
    const Variable* c = constants[i];
    const TensorType& want = sources_[i];
    if (!c->value || c->value->dtype() != want.dtype || c->value->shape() != want.dims) {
      throw UserError("constant '" + c->name + "' of graph '" + given.name() + "' holds " +
                      (c->value ? c->value->describe() : std::string("no value")) +
                      "; its module was built for " + want.to_string());
    }
  }
}

std::vector<Tensor> ModulePlan::prepare(const Graph& given) const {
  const auto n_sources = sources_.size();
  std::vector<Tensor> values(prep_.size());
  auto value = [&](int i) -> const Tensor& {
    return static_cast<size_t>(i) < n_sources ? *given.constants()[static_cast<size_t>(i)]->value
                                              : values[static_cast<size_t>(i) - n_sources];
  };
  // Steps by depth (a step runs after the steps it reads): the steps of one depth are
  // independent, and run on all cores (folding and packing a ResNet's weights is hundreds of
  // independent convolutions' worth).
  std::vector<int> depth(prep_.size(), 0);
  int depths = 0;
  for (size_t k = 0; k < prep_.size(); ++k) {
    for (int i : prep_[k].inputs) {
      if (static_cast<size_t>(i) < n_sources) continue;
      const size_t from = static_cast<size_t>(i) - n_sources;
      if (from >= k)
        throw InternalError("module plan: step " + std::to_string(k) + " reads a later step");
      depth[k] = std::max(depth[k], depth[from] + 1);
    }
    depths = std::max(depths, depth[k] + 1);
  }
  std::vector<std::vector<size_t>> by_depth(static_cast<size_t>(depths));
  for (size_t k = 0; k < prep_.size(); ++k) by_depth[static_cast<size_t>(depth[k])].push_back(k);
  for (const std::vector<size_t>& steps : by_depth) {
    const auto run = [&](int part) {
      const size_t k = steps[static_cast<size_t>(part)];
      const PrepStep& s = prep_[k];
      std::vector<Tensor> inputs;
      for (int i : s.inputs) inputs.push_back(value(i));
      try {
        values[k] = run_transform(s.op, s.props, s.output, inputs);
      } catch (const Error& e) {
        throw UserError("graph '" + given.name() + "': preparing its weights (step " +
                        std::to_string(k) + ", " + s.op + attrs_to_string(s.props) +
                        "): " + e.what());
      }
    };
    // Waking the workers costs more than preparing a small model's weights on this thread.
    size_t bytes = 0;
    for (size_t k : steps)
      for (int i : prep_[k].inputs) bytes += value(i).nbytes();
    if (steps.size() > 1 && bytes >= (size_t{1} << 20)) {
      parallel_for(default_engine(), static_cast<int>(steps.size()), run, "prepare weights");
    } else {
      for (size_t part = 0; part < steps.size(); ++part) run(static_cast<int>(part));
    }
  }
  return values;
}

std::vector<Tensor> ModulePlan::prepared_in(const Graph& optimized) const {
  std::vector<Tensor> values(prep_.size());
  const auto& constants = optimized.constants();
  if (constants.size() != params_.size()) throw InternalError("module plan: not this graph's plan");
  for (size_t i = 0; i < params_.size(); ++i) {
    const auto v = static_cast<size_t>(params_[i].second);
    if (v >= sources_.size()) values[v - sources_.size()] = *constants[i]->value;
  }
  return values;
}

std::vector<int> ModulePlan::kept_steps() const {
  std::vector<int> steps;
  for (const auto& [slot, value] : params_) {
    const int step = value - static_cast<int>(sources_.size());
    if (step >= 0 && std::find(steps.begin(), steps.end(), step) == steps.end())
      steps.push_back(step);
  }
  std::sort(steps.begin(), steps.end());
  return steps;
}

void ModulePlan::check_prepared(const std::vector<Tensor>& prepared) const {
  if (prepared.size() != prep_.size())
    throw UserError("prepared values: " + std::to_string(prepared.size()) + " for " +
                    std::to_string(prep_.size()) + " steps");
  for (const auto& [slot, value] : params_) {
    const int step = value - static_cast<int>(sources_.size());
    if (step < 0) continue;
    const Tensor& t = prepared[static_cast<size_t>(step)];
    const SlotSpec& spec = skeleton_.slots.at(static_cast<size_t>(slot));
    if (!t.defined() || t.dtype() != spec.dtype || t.shape() != Shape(spec.dims)) {
      throw UserError("prepared value of step " + std::to_string(step) + " is " +
                      (t.defined() ? t.describe() : std::string("missing")) + "; parameter '" +
                      spec.name + "' takes " + std::string(dtype_name(spec.dtype)) + " " +
                      dims_to_string(spec.dims));
    }
  }
}

Program ModulePlan::program(const Graph& given, const std::vector<Tensor>& prepared) const {
  Program p = skeleton_;
  const auto n_sources = sources_.size();
  p.params.reserve(params_.size());
  for (const auto& [slot, value] : params_) {
    const auto i = static_cast<size_t>(value);
    p.params.emplace_back(
        slot, i < n_sources ? *given.constants()[i]->value : prepared.at(i - n_sources));
  }
  return p;
}

}  // namespace kiln
