#include "runtime/executor.h"

#include <algorithm>
#include <set>

#include "runtime/memory_plan.h"
#include "runtime/thunk_context.h"
#include "util/error.h"
#include "util/strings.h"

namespace kiln {
namespace {

std::string slot_type(const SlotSpec& s) {
  return std::string(dtype_name(s.dtype)) + " " + dims_to_string(s.dims);
}

kiln_tensor abi_view(const Tensor& t, const Shape& shape, const Shape& strides) {
  kiln_tensor v{};
  v.data = t.data();
  v.shape = shape.data();
  v.strides = strides.data();
  v.ndim = static_cast<int32_t>(shape.size());
  v.dtype = static_cast<int32_t>(t.dtype());
  return v;
}

}  // namespace

Executor::Executor(std::shared_ptr<Module> module, Program program, Engine* engine)
    : module_(std::move(module)), program_(std::move(program)), engine_(engine) {
  is_output_.assign(program_.slots.size(), false);
  for (int s : program_.output_slots) is_output_.at(s) = true;
  for (const auto& step : program_.steps) {
    check_internal(step.thunk >= 0 && step.thunk < module_->info().n_thunks,
                   "step '" + step.label + "' refers to a missing thunk");
  }
  // A program whose steps form one chain (each depends on the one before) has nothing to
  // run in parallel: handing each step to a worker would only add thread wake-ups.
  std::vector<int> level(program_.slots.size(), 0);
  std::set<int> levels;
  for (const auto& step : program_.steps) {
    int l = 0;
    for (int s : step.inputs) l = std::max(l, level[s]);
    for (int s : step.outputs) level[s] = l + 1;
    levels.insert(l + 1);
  }
  if (levels.size() == program_.steps.size()) engine_ = nullptr;
  if (engine_) {
    slot_var_.assign(program_.slots.size(), nullptr);
    for (const auto& step : program_.steps) {
      for (int s : step.outputs) {
        slot_var_[s] = engine_->new_var(program_.slots[s].name);
        written_vars_.push_back(slot_var_[s]);
      }
    }
  }
}

Executor::~Executor() {
  for (VarHandle v : slot_var_) {
    if (v) engine_->delete_var(v);  // after any use still pending
  }
}

void Executor::validate(const std::vector<Tensor>& inputs) const {
  if (inputs.size() != program_.input_slots.size()) {
    std::vector<std::string> names;
    for (int s : program_.input_slots) names.push_back(program_.slots[s].name);
    throw UserError("expected " + std::to_string(program_.input_slots.size()) + " inputs (" +
                    join(names, ", ") + "), got " + std::to_string(inputs.size()));
  }
  for (size_t i = 0; i < inputs.size(); ++i) {
    const SlotSpec& spec = program_.slots[program_.input_slots[i]];
    const Tensor& t = inputs[i];
    auto mismatch = [&](const std::string& what) {
      throw UserError("input '" + spec.name + "': " + what + ": expected " + slot_type(spec) +
                      ", got " + (t.defined() ? t.describe() : std::string("no tensor")));
    };
    if (!t.defined()) mismatch("missing");
    if (t.dtype() != spec.dtype) mismatch("wrong dtype");
    if (t.ndim() != static_cast<int>(spec.dims.size())) mismatch("wrong rank");
    for (size_t d = 0; d < spec.dims.size(); ++d) {
      if (spec.dims[d] >= 0 && t.shape()[d] != spec.dims[d]) {
        mismatch("dimension " + std::to_string(d) + " is " + std::to_string(t.shape()[d]));
      }
    }
  }
}

void Executor::make_plan(const std::vector<Tensor>& inputs) {
  Plan plan;
  const size_t n = program_.slots.size();
  plan.shapes.assign(n, {});
  plan.offset.assign(n, -1);
  plan.step_of_output.assign(n, -1);
  std::vector<bool> known(n, false);
  for (size_t i = 0; i < inputs.size(); ++i) {
    plan.input_shapes.push_back(inputs[i].shape());
    plan.shapes[program_.input_slots[i]] = inputs[i].shape();
    known[program_.input_slots[i]] = true;
  }
  for (const auto& [slot, value] : program_.params) {
    plan.shapes[slot] = value.shape();
    known[slot] = true;
  }
  std::vector<int> last_use(n, -1);
  for (size_t si = 0; si < program_.steps.size(); ++si) {
    const StepSpec& step = program_.steps[si];
    std::vector<Shape> in_shapes;
    for (int s : step.inputs) {
      check_internal(known[s], "slot " + program_.slots[s].name + " read before written");
      in_shapes.push_back(plan.shapes[s]);
      last_use[s] = static_cast<int>(si);
    }
    std::vector<Shape> out_shapes;
    try {
      out_shapes = step.infer_shape(in_shapes);
    } catch (const UserError& e) {
      throw UserError(step.label + ": " + e.what());
    }
    check_internal(out_shapes.size() == step.outputs.size(),
                   step.label + ": shape rule gave the wrong number of outputs");
    for (size_t k = 0; k < step.outputs.size(); ++k) {
      int s = step.outputs[k];
      const SlotSpec& spec = program_.slots[s];
      const Shape& shape = out_shapes[k];
      bool ok = shape.size() == spec.dims.size();
      for (size_t d = 0; ok && d < shape.size(); ++d) {
        ok = shape[d] >= 0 && (spec.dims[d] < 0 || spec.dims[d] == shape[d]);
      }
      check_internal(ok, step.label + ": inferred shape " + dims_to_string(shape) +
                             " does not match the static type " + slot_type(spec));
      plan.shapes[s] = shape;
      plan.step_of_output[s] = static_cast<int>(si);
      known[s] = true;
    }
  }
  // Temporaries (not inputs, params or outputs) share one arena by liveness.
  std::vector<BufferRequest> requests;
  std::vector<int> request_slot;
  for (size_t s = 0; s < n; ++s) {
    if (program_.slots[s].kind != SlotKind::kTemp || is_output_[s]) continue;
    if (plan.step_of_output[s] < 0) continue;
    BufferRequest r;
    r.bytes =
        static_cast<size_t>(shape_numel(plan.shapes[s])) * dtype_size(program_.slots[s].dtype);
    r.first_step = plan.step_of_output[s];
    r.last_step = std::max(last_use[s], r.first_step);
    requests.push_back(r);
    request_slot.push_back(static_cast<int>(s));
  }
  MemoryPlan mp = plan_memory(requests);
  for (size_t i = 0; i < requests.size(); ++i) {
    plan.offset[request_slot[i]] = static_cast<int64_t>(mp.offsets[i]);
  }
  plan.arena_bytes = mp.arena_bytes;
  // Temporaries that share bytes must share ordering too: a step writing one waits for
  // every reader of the others (the engine sees the aliases as extra written variables).
  plan.aliases.assign(n, {});
  for (size_t i = 0; i < requests.size(); ++i) {
    for (size_t j = 0; j < requests.size(); ++j) {
      if (i == j) continue;
      size_t a0 = mp.offsets[i], a1 = a0 + requests[i].bytes, b0 = mp.offsets[j],
             b1 = b0 + requests[j].bytes;
      if (a0 < b1 && b0 < a1) plan.aliases[request_slot[i]].push_back(request_slot[j]);
    }
  }
  if (have_plan_ && plan_.arena && plan_.arena->bytes() >= plan.arena_bytes) {
    plan.arena = plan_.arena;
  } else {
    plan.arena = allocate_storage(plan.arena_bytes);
  }
  plan_ = std::move(plan);
  have_plan_ = true;
}

void Executor::run_step(const StepSpec& step, std::vector<Tensor>& values) const {
  std::vector<kiln_tensor> views;
  views.reserve(step.inputs.size() + step.outputs.size());
  for (int s : step.inputs)
    views.push_back(abi_view(values[s], values[s].shape(), values[s].strides()));
  for (int s : step.outputs)
    views.push_back(abi_view(values[s], values[s].shape(), values[s].strides()));
  std::vector<kiln_tensor*> ptrs;
  for (auto& v : views) ptrs.push_back(&v);
  ThunkContext ctx;
  int rc = module_->info().thunks[step.thunk].fn(module_->state(), ctx.abi(), ptrs.data(),
                                                 ptrs.data() + step.inputs.size());
  if (rc != 0) {
    throw UserError(step.label + ": " +
                    (ctx.message().empty() ? std::string("thunk failed") : ctx.message()));
  }
}

void Executor::run_on_engine(std::vector<Tensor>& values) {
  for (const StepSpec& step : program_.steps) {
    std::vector<VarHandle> reads, writes;
    for (int s : step.inputs) {
      if (slot_var_[s]) reads.push_back(slot_var_[s]);
    }
    for (int s : step.outputs) {
      writes.push_back(slot_var_[s]);
      for (int a : plan_.aliases[s]) writes.push_back(slot_var_[a]);
    }
    engine_->push([this, &step, &values] { run_step(step, values); }, reads, writes,
                  PushOptions{step.label});
  }
  // One wait for every buffer: steps still running use `values` and the arena.
  engine_->wait_for_vars(written_vars_);
}

std::vector<Tensor> Executor::run(const std::vector<Tensor>& inputs) {
  validate(inputs);
  std::lock_guard lock(mutex_);
  bool same = have_plan_ && plan_.input_shapes.size() == inputs.size();
  for (size_t i = 0; same && i < inputs.size(); ++i)
    same = plan_.input_shapes[i] == inputs[i].shape();
  if (!same) make_plan(inputs);

  const size_t n = program_.slots.size();
  std::vector<Tensor> values(n);
  for (size_t i = 0; i < inputs.size(); ++i) values[program_.input_slots[i]] = inputs[i];
  for (const auto& [slot, value] : program_.params) values[slot] = value;

  for (const StepSpec& step : program_.steps) {
    for (int s : step.outputs) {
      const SlotSpec& spec = program_.slots[s];
      if (plan_.offset[s] >= 0) {
        values[s] = Tensor(plan_.arena, static_cast<size_t>(plan_.offset[s]), spec.dtype,
                           plan_.shapes[s], contiguous_strides(plan_.shapes[s]));
      } else {
        values[s] = Tensor::empty(spec.dtype, plan_.shapes[s]);
      }
    }
  }
  if (engine_) {
    run_on_engine(values);
  } else {
    for (const StepSpec& step : program_.steps) run_step(step, values);
  }
  std::vector<Tensor> outputs;
  outputs.reserve(program_.output_slots.size());
  for (int s : program_.output_slots) outputs.push_back(values[s]);
  return outputs;
}

}  // namespace kiln
