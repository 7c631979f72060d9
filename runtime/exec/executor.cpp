#include "runtime/exec/executor.h"

#include "runtime/device/caller_stream.h"
#include "runtime/device/device.h"
#include "runtime/device/device_completion.h"
#include "runtime/device/device_memory.h"
#include "runtime/device/device_steps.h"
#include "runtime/device/staged_copies.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <set>

#include "runtime/engine/parallel_for.h"
#include "runtime/engine/worker_pool.h"
#include "runtime/exec/memory_plan.h"
#include "runtime/exec/sized_outputs.h"
#include "runtime/exec/thunk_context.h"
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

thread_local int in_order_runs = 0;

}  // namespace

InOrderRuns::InOrderRuns() { ++in_order_runs; }
InOrderRuns::~InOrderRuns() { --in_order_runs; }
bool InOrderRuns::active() { return in_order_runs > 0; }

Executor::Executor(std::shared_ptr<Module> module, std::shared_ptr<const Program> program,
                   Engine* engine)
    : module_(std::move(module)),
      shared_program_(std::move(program)),
      program_(*shared_program_),
      engine_(engine) {
  is_output_.assign(program_.slots.size(), false);
  for (int s : program_.output_slots) is_output_.at(s) = true;
  for (const SlotSpec& spec : program_.slots)
    has_device_slots_ = has_device_slots_ || spec.on_device;
  is_update_output_.assign(program_.output_slots.size(), false);
  for (const ProgramUpdate& u : program_.updates) {
    is_update_output_.at(static_cast<size_t>(u.output)) = true;
    if (u.in_place)
      in_place_slot_.emplace_back(program_.output_slots.at(static_cast<size_t>(u.output)),
                                  program_.input_slots.at(static_cast<size_t>(u.input)));
  }
  for (const auto& step : program_.steps) {
    sized_steps_ = sized_steps_ || step.sized_by_run;
    // (Checked with `if`: the message is built only when it is needed.)
    if (step.thunk < 0 || step.thunk >= module_->info().n_thunks) {
      throw InternalError("step '" + step.label + "' refers to a missing thunk");
    }
    const kiln_thunk_info& thunk = module_->info().thunks[step.thunk];
    if (thunk.n_in != static_cast<int32_t>(step.inputs.size()) ||
        thunk.n_out != static_cast<int32_t>(step.outputs.size())) {
      throw InternalError("step '" + step.label +
                          "' does not match its thunk's inputs and outputs");
    }
  }
  uploads_.assign(program_.steps.size(), false);
  is_param_.assign(program_.slots.size(), false);
  for (const auto& [slot, value] : program_.params) is_param_[static_cast<size_t>(slot)] = true;
  for (size_t si = 0; si < program_.steps.size(); ++si) {
    const StepSpec& step = program_.steps[si];
    bool weights_only = is_device_step(step) && !step.inputs.empty();
    for (int s : step.inputs) weights_only = weights_only && is_param_[static_cast<size_t>(s)];
    for (int s : step.outputs)
      weights_only = weights_only && program_.slots[s].on_device && !is_output_[s];
    uploads_[si] = weights_only;
  }
  if (!engine_) return;
  split_workers_ = engine_->workers(0);
  // A program whose steps form one chain (each depends on the one before) has nothing to
  // run in parallel: handing each step to a worker would only add thread wake-ups.
  std::vector<int> level(program_.slots.size(), 0);
  std::vector<bool> seen(program_.steps.size() + 2, false);
  size_t levels = 0;
  for (const auto& step : program_.steps) {
    int l = 0;
    for (int s : step.inputs) l = std::max(l, level[s]);
    for (int s : step.outputs) level[s] = l + 1;
    if (!seen[static_cast<size_t>(l + 1)]) {
      seen[static_cast<size_t>(l + 1)] = true;
      ++levels;
    }
  }
  parallel_steps_ = levels != program_.steps.size();
}

namespace {

// A small number per thread, for the busy-time slots of profiled executors.
int profile_thread_number() {
  static std::atomic<int> next{0};
  thread_local const int number = next.fetch_add(1, std::memory_order_relaxed);
  return number;
}

int64_t elapsed_ns(std::chrono::steady_clock::time_point since) {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() -
                                                              since)
      .count();
}

}  // namespace

void Executor::set_profiling(bool on) {
  std::lock_guard lock(plan_mutex_);
  if (!step_counters_) step_counters_ = std::make_unique<StepCounters[]>(program_.steps.size());
  if (!thread_busy_ns_) thread_busy_ns_ = std::make_unique<std::atomic<int64_t>[]>(kProfileThreads);
  for (int t = 0; t < kProfileThreads; ++t) thread_busy_ns_[t].store(0, std::memory_order_relaxed);
  profiled_runs_.store(0, std::memory_order_relaxed);
  profiled_wall_ns_.store(0, std::memory_order_relaxed);
  wakeups_at_start_.store(WorkerPool::wakeups(), std::memory_order_relaxed);
  moves_at_start_.store(WorkerPool::moves(), std::memory_order_relaxed);
  stepwise_at_start_.store(stepwise_runs_.load(), std::memory_order_relaxed);
  if (on && !trace_) trace_ = std::make_unique<TraceEvent[]>(kMaxTraceEvents);
  trace_next_.store(0, std::memory_order_relaxed);
  trace_epoch_ns_.store(std::chrono::duration_cast<std::chrono::nanoseconds>(
                            std::chrono::steady_clock::now().time_since_epoch())
                            .count(),
                        std::memory_order_relaxed);
  for (size_t i = 0; i < program_.steps.size(); ++i) {
    step_counters_[i].calls.store(0, std::memory_order_relaxed);
    step_counters_[i].ns.store(0, std::memory_order_relaxed);
    step_counters_[i].parts.store(0, std::memory_order_relaxed);
  }
  profiling_.store(on, std::memory_order_release);
}

std::vector<StepTime> Executor::profile() const {
  std::vector<StepTime> out;
  if (!profiling_.load(std::memory_order_acquire)) return out;
  std::shared_ptr<const Plan> plan;
  {
    std::lock_guard lock(plan_mutex_);
    plan = plan_;
  }
  for (size_t i = 0; i < program_.steps.size(); ++i) {
    const StepCounters& c = step_counters_[i];
    const StepSpec& step = program_.steps[i];
    StepTime t{step.label, c.calls.load(std::memory_order_relaxed),
               c.ns.load(std::memory_order_relaxed), c.parts.load(std::memory_order_relaxed)};
    if (plan && i < plan->stop) {  // shapes past a step sized by its run differ by run
      std::vector<Shape> in, out_shapes;
      for (int s : step.inputs) in.push_back(plan->shapes[static_cast<size_t>(s)]);
      for (int s : step.outputs) out_shapes.push_back(plan->shapes[static_cast<size_t>(s)]);
      for (const auto* list : {&step.inputs, &step.outputs}) {
        for (int s : *list) {
          t.bytes += static_cast<double>(shape_numel(plan->shapes[static_cast<size_t>(s)]) *
                                         dtype_size(program_.slots[static_cast<size_t>(s)].dtype));
        }
      }
      if (step.flops) t.flops = step.flops(in, out_shapes);
    }
    out.push_back(std::move(t));
  }
  return out;
}

std::vector<TraceEvent> Executor::trace(int64_t* dropped) const {
  std::vector<TraceEvent> out;
  const size_t n = trace_next_.load(std::memory_order_acquire);
  if (dropped) *dropped = n > kMaxTraceEvents ? static_cast<int64_t>(n - kMaxTraceEvents) : 0;
  if (!profiling_.load(std::memory_order_acquire) || !trace_) return out;
  out.assign(trace_.get(), trace_.get() + std::min(n, kMaxTraceEvents));
  return out;
}

RunProfile Executor::run_profile() const {
  RunProfile r;
  if (!profiling_.load(std::memory_order_acquire)) return r;
  r.runs = profiled_runs_.load(std::memory_order_relaxed);
  r.wall_ns = profiled_wall_ns_.load(std::memory_order_relaxed);
  for (int t = 0; t < kProfileThreads; ++t) {
    const int64_t ns = thread_busy_ns_[t].load(std::memory_order_relaxed);
    if (ns > 0) r.thread_busy_ns.push_back(ns);
  }
  std::sort(r.thread_busy_ns.rbegin(), r.thread_busy_ns.rend());
  for (size_t i = 0; i < program_.steps.size(); ++i) {
    r.steps += step_counters_[i].calls.load(std::memory_order_relaxed);
  }
  r.wakeups = WorkerPool::wakeups() - wakeups_at_start_.load(std::memory_order_relaxed);
  r.core_moves = WorkerPool::moves() - moves_at_start_.load(std::memory_order_relaxed);
  r.stepwise_runs = stepwise_runs_.load() - stepwise_at_start_.load(std::memory_order_relaxed);
  // Idle time: the runs' wall time less the union of every thunk call and part.
  int64_t dropped = 0;
  std::vector<TraceEvent> events = trace(&dropped);
  if (dropped == 0) {
    std::sort(events.begin(), events.end(),
              [](const TraceEvent& a, const TraceEvent& b) { return a.start_ns < b.start_ns; });
    int64_t covered = 0, open_start = 0, open_end = -1;
    for (const TraceEvent& e : events) {
      if (e.start_ns > open_end) {
        covered += std::max<int64_t>(open_end - open_start, 0);
        open_start = e.start_ns;
        open_end = e.end_ns;
      } else {
        open_end = std::max(open_end, e.end_ns);
      }
    }
    covered += std::max<int64_t>(open_end - open_start, 0);
    r.idle_ns = std::max<int64_t>(r.wall_ns - covered, 0);
  }
  return r;
}

ExecutorStats Executor::stats() const {
  return ExecutorStats{runs_.load(),  split_calls_.load(),   parts_.load(),
                       views_.load(), stepwise_runs_.load(), bands_.load()};
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
    if (t.storage()->on_device() != spec.on_device) {
      // Device memory read on the host (or the reverse) would crash or read garbage.
      throw UserError("input '" + spec.name + "': expected a " +
                      (spec.on_device ? "CUDA device tensor (the function was compiled with "
                                        "device inputs)"
                                      : "host tensor") +
                      ", got a " + (t.storage()->on_device() ? "device" : "host") + " tensor " +
                      t.describe());
    }
    if (spec.on_device && !t.is_contiguous()) {
      throw UserError("input '" + spec.name + "': a device input must be contiguous, got " +
                      t.describe() + " with strides " + dims_to_string(t.strides()));
    }
    if (t.dtype() != spec.dtype) mismatch("wrong dtype");
    if (t.ndim() != static_cast<int>(spec.dims.size())) mismatch("wrong rank");
    for (size_t d = 0; d < spec.dims.size(); ++d) {
      if (spec.dims[d] >= 0 && t.shape()[d] != spec.dims[d]) {
        mismatch("dimension " + std::to_string(d) + " is " + std::to_string(t.shape()[d]));
      }
    }
  }
  for (const ProgramUpdate& u : program_.updates) {
    const Tensor& t = inputs[static_cast<size_t>(u.input)];
    const std::string& name =
        program_.slots[program_.input_slots[static_cast<size_t>(u.input)]].name;
    // The step writes the state's buffer as if it were a fresh contiguous output.
    if (u.in_place && !t.is_contiguous()) {
      throw UserError("input '" + name + "' is updated in place and must be contiguous, got " +
                      t.describe() + " with strides " + dims_to_string(t.strides()));
    }
    for (size_t j = 0; j < inputs.size(); ++j) {
      if (j != static_cast<size_t>(u.input) && inputs[j].defined() &&
          t.storage() == inputs[j].storage()) {
        throw UserError("input '" + name +
                        "' is updated by the run and shares its buffer with input '" +
                        program_.slots[program_.input_slots[j]].name + "'");
      }
    }
  }
}

std::shared_ptr<const Executor::Plan> Executor::make_plan(const std::vector<Tensor>& inputs,
                                                          const std::vector<Tensor>* bound,
                                                          size_t first) const {
  auto owned = std::make_shared<Plan>();
  Plan& plan = *owned;
  std::vector<int> step_of_output(program_.slots.size(), -1);
  const size_t n = program_.slots.size();
  plan.shapes.assign(n, {});
  plan.offset.assign(n, -1);
  plan.first = first;
  plan.stop = program_.steps.size();
  std::vector<bool> known(n, false);
  if (bound) {  // the rest of a run, after a step sized by its run
    for (size_t s = 0; s < n; ++s) {
      if (!(*bound)[s].defined()) continue;
      plan.shapes[s] = (*bound)[s].shape();
      known[s] = true;
    }
  } else {
    for (size_t i = 0; i < inputs.size(); ++i) {
      plan.input_shapes.push_back(inputs[i].shape());
      plan.shapes[program_.input_slots[i]] = inputs[i].shape();
      known[program_.input_slots[i]] = true;
    }
    for (const auto& [slot, value] : program_.params) {
      plan.shapes[slot] = value.shape();
      known[slot] = true;
    }
  }
  std::vector<int> last_use(n, -1);
  std::vector<std::vector<int>> readers(n);
  int64_t total_work = 0, split_work = 0;
  for (size_t si = first; si < program_.steps.size(); ++si) {
    const StepSpec& step = program_.steps[si];
    std::vector<Shape> in_shapes;
    for (int s : step.inputs) {
      check_internal(known[s], "slot " + program_.slots[s].name + " read before written");
      in_shapes.push_back(plan.shapes[s]);
      last_use[s] = static_cast<int>(si);
      readers[s].push_back(static_cast<int>(si));
    }
    if (step.sized_by_run) {  // this plan ends here; the rest is planned once it has run
      plan.stop = si;
      break;
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
      // A shape rule (an op library's, say) may give sizes no machine can hold: say so here,
      // naming the step, before any product of them wraps.
      if (!checked_nbytes(shape, spec.dtype) ||
          *checked_nbytes(shape, spec.dtype) > (uint64_t{1} << 62)) {
        throw OutOfMemoryError(step.label + ": output " + spec.name + " of shape " +
                               dims_to_string(shape) + " (" + std::string(dtype_name(spec.dtype)) +
                               ") needs more than 2^62 bytes");
      }
      plan.shapes[s] = shape;
      step_of_output[s] = static_cast<int>(si);
      known[s] = true;
    }
    // A step's work is the largest tensor it touches. A weight counts only for a step that
    // splits (a GEMM streams all of it), not for one that reads a few rows of it: BERT-mini's
    // embedding Gather (a 7.8M-element table) made a 1.3 ms encoder of split steps look
    // branch-bound, and pushing its steps through the engine cost ~3 us each.
    const bool splits =
        split_workers_ > 1 && (module_->info().thunks[step.thunk].flags & KILN_THUNK_SPLIT);
    int64_t work = 0;
    for (const auto* list : {&step.inputs, &step.outputs}) {
      for (int s : *list) {
        if (!splits && list == &step.inputs && is_param_[static_cast<size_t>(s)]) continue;
        work = std::max(work, shape_numel(plan.shapes[s]));
      }
    }
    total_work += work;
    if (splits) split_work += work;
  }
  // What later steps read stays until this plan's last step: no temporary planned here
  // may take its bytes.
  for (size_t si = plan.stop; si < program_.steps.size(); ++si) {
    for (int s : program_.steps[si].inputs) {
      if (step_of_output[s] >= 0) last_use[s] = std::max(last_use[s], static_cast<int>(plan.stop));
    }
  }
  // A CPU reshape of an arena temporary views its bytes: the root (the temporary that owns
  // them) then lives until the view's last reader, and counts the view's readers as its own.
  plan.view_root.assign(n, -1);
  for (size_t si = first; si < plan.stop; ++si) {
    for (int s : program_.steps[si].outputs) {
      const SlotSpec& spec = program_.slots[s];
      if (spec.view_of < 0 || spec.on_device || is_output_[s]) continue;
      int root = spec.view_of;
      if (plan.view_root[root] >= 0) root = plan.view_root[root];
      const SlotSpec& rs = program_.slots[root];
      if (rs.kind != SlotKind::kTemp || rs.on_device || is_output_[root] ||
          step_of_output[root] < 0 || rs.dtype != spec.dtype ||
          shape_numel(plan.shapes[root]) != shape_numel(plan.shapes[s])) {
        continue;
      }
      plan.view_root[s] = root;
      last_use[root] = std::max(last_use[root], last_use[s]);
      readers[root].insert(readers[root].end(), readers[s].begin(), readers[s].end());
    }
  }
  // A concat whose bands are contiguous (every dimension before its axis is 1) lets each
  // input that is a plain temporary of the run live in its band: the input's producer
  // writes the concat's output in place and the concat copies nothing for it. The output
  // (the band root: a temporary or an output of the run) then owns the bytes from its
  // first writer to the last reader of any band.
  plan.band_root.assign(n, -1);
  plan.band_offset.assign(n, 0);
  std::vector<std::vector<int>> writers(n);
  for (size_t s = 0; s < n; ++s) {
    if (step_of_output[s] >= 0) writers[s].push_back(step_of_output[s]);
  }
  auto plain_temp = [&](int s) {
    const SlotSpec& spec = program_.slots[static_cast<size_t>(s)];
    return spec.kind == SlotKind::kTemp && !spec.on_device && !is_output_[s] &&
           step_of_output[s] >= 0 && plan.view_root[s] < 0 && plan.band_root[s] < 0;
  };
  std::vector<bool> has_bands(n, false);
  for (size_t si = first; si < plan.stop; ++si) {
    const StepSpec& step = program_.steps[si];
    if (step.concat_axis < 0) continue;
    const int root = step.outputs.at(0);
    const Shape& shape = plan.shapes[root];
    const SlotSpec& rs = program_.slots[root];
    const bool state = std::any_of(in_place_slot_.begin(), in_place_slot_.end(),
                                   [root](const auto& p) { return p.first == root; });
    if (rs.kind != SlotKind::kTemp || rs.on_device || plan.view_root[root] >= 0 ||
        plan.band_root[root] >= 0 || state ||
        static_cast<size_t>(step.concat_axis) >= shape.size()) {
      continue;
    }
    bool contiguous_bands = true;
    for (int d = 0; d < step.concat_axis; ++d) contiguous_bands = contiguous_bands && shape[d] == 1;
    if (!contiguous_bands) continue;
    const size_t esize = dtype_size(program_.slots[root].dtype);
    int64_t at = 0;  // bytes into the root
    for (size_t k = 0; k < step.inputs.size(); ++k) {
      const int in = step.inputs[k];
      const int64_t bytes = shape_numel(plan.shapes[in]) * static_cast<int64_t>(esize);
      // Kernels may assume the arena's 64-byte alignment; an input read twice has one place.
      const bool once = std::count(step.inputs.begin(), step.inputs.end(), in) == 1;
      if (plain_temp(in) && !has_bands[in] && once && at % 64 == 0 &&
          program_.slots[in].dtype == program_.slots[root].dtype) {
        plan.band_root[in] = root;
        plan.band_offset[in] = at;
        has_bands[root] = true;
        writers[root].push_back(step_of_output[in]);
        last_use[root] = std::max(last_use[root], last_use[in]);
        readers[root].insert(readers[root].end(), readers[in].begin(), readers[in].end());
      }
      at += bytes;
    }
  }
  // Branches too small to be worth a thread wake-up each run in the caller, in step order.
  // So do programs whose work is mostly in steps that split over the workers themselves:
  // each step then has the cores already, and pushing every step through the engine only
  // adds its bookkeeping (ShuffleNetV2 5.97 -> 4.01 ms, a GPT decoder 8.85 -> 7.57, no zoo
  // model slower).
  plan.parallel = parallel_steps_ && !sized_steps_ && total_work >= kParallelWork &&
                  2 * split_work < total_work;
  // Temporaries (not inputs, params or outputs) share one arena by liveness.
  std::vector<BufferRequest> requests;
  std::vector<int> request_slot;
  for (size_t s = 0; s < n; ++s) {
    if (program_.slots[s].kind != SlotKind::kTemp || is_output_[s]) continue;
    if (step_of_output[s] < 0 || program_.slots[s].on_device || plan.view_root[s] >= 0 ||
        plan.band_root[s] >= 0) {
      continue;
    }
    BufferRequest r;
    r.bytes =
        static_cast<size_t>(shape_numel(plan.shapes[s])) * dtype_size(program_.slots[s].dtype);
    r.first_step = *std::min_element(writers[s].begin(), writers[s].end());
    r.last_step = std::max(last_use[s], r.first_step);
    requests.push_back(r);
    request_slot.push_back(static_cast<int>(s));
  }
  // Steps pushed to the engine may run in any order their data allows, so a buffer may
  // take over another's bytes only when every step using the old one is an ancestor of
  // the step writing the new one; step order alone would serialise parallel branches.
  ReuseRule rule;
  std::vector<std::vector<bool>> ancestor;
  if (plan.parallel) {
    const size_t steps = program_.steps.size();
    ancestor.assign(steps, std::vector<bool>(steps, false));
    for (size_t si = 0; si < steps; ++si) {
      for (int s : program_.steps[si].inputs) {
        int p = step_of_output[s];
        if (p < 0) continue;
        ancestor[si][static_cast<size_t>(p)] = true;
        for (size_t a = 0; a < steps; ++a) {
          if (ancestor[static_cast<size_t>(p)][a]) ancestor[si][a] = true;
        }
      }
    }
    // A band root is written by every band's producer: each must come after the dead one.
    rule = [&](size_t dead, size_t born) {
      const int slot = request_slot[dead];
      for (int w : writers[static_cast<size_t>(request_slot[born])]) {
        const auto& before = ancestor[static_cast<size_t>(w)];
        for (int d : writers[static_cast<size_t>(slot)]) {
          if (!before[static_cast<size_t>(d)]) return false;
        }
        for (int r : readers[slot]) {
          if (!before[static_cast<size_t>(r)]) return false;
        }
      }
      return true;
    };
  }
  MemoryPlan mp = plan_memory(requests, rule);
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
  // A band or a view shares its root's bytes, so it shares the root's aliases both ways
  // (bands first: a view's root may be a band).
  for (const std::vector<int>* roots : {&plan.band_root, &plan.view_root}) {
    for (size_t s = 0; s < n; ++s) {
      const int root = (*roots)[s];
      if (root < 0) continue;
      plan.aliases[s] = plan.aliases[static_cast<size_t>(root)];
      for (int a : plan.aliases[static_cast<size_t>(root)]) {
        plan.aliases[static_cast<size_t>(a)].push_back(static_cast<int>(s));
      }
    }
  }
  return owned;
}

std::shared_ptr<const Executor::Plan> Executor::plan_for(const std::vector<Tensor>& inputs) {
  std::lock_guard lock(plan_mutex_);
  bool same = plan_ && plan_->input_shapes.size() == inputs.size();
  for (size_t i = 0; same && i < inputs.size(); ++i)
    same = plan_->input_shapes[i] == inputs[i].shape();
  if (!same) plan_ = make_plan(inputs);
  return plan_;
}

std::string Executor::largest_temporary(const Plan& plan) const {
  int64_t best = -1;
  size_t slot = 0;
  for (size_t s = 0; s < plan.offset.size(); ++s) {
    if (plan.offset[s] < 0) continue;
    const int64_t bytes =
        shape_numel(plan.shapes[s]) * static_cast<int64_t>(dtype_size(program_.slots[s].dtype));
    if (bytes > best) best = bytes, slot = s;
  }
  if (best < 0) return "none";
  return std::to_string(plan.arena_bytes) + " bytes in all; the largest is " +
         program_.slots[slot].name + " of shape " + dims_to_string(plan.shapes[slot]);
}

std::vector<Tensor> Executor::bind(const std::vector<Tensor>& inputs, const Plan& plan,
                                   BoundValues* reuse, std::shared_ptr<Storage>* arena_out) const {
  std::vector<Tensor> values;
  std::shared_ptr<Storage> arena;
  if (reuse) {  // weights and the arena's values are bound already
    values = std::move(reuse->values);
    arena = std::move(reuse->arena);
    views_.fetch_add(reuse->views, std::memory_order_relaxed);
    bands_.fetch_add(reuse->bands, std::memory_order_relaxed);
  } else {
    values.resize(program_.slots.size());
    for (const auto& [slot, value] : program_.params) values[slot] = value;
  }
  for (size_t i = 0; i < inputs.size(); ++i) values[program_.input_slots[i]] = inputs[i];
  // Each run has its own arena (from the storage pool, or kept from this executor's last
  // run), so overlapping runs never share temporaries.
  if (!arena) {
    try {
      arena = allocate_storage(plan.arena_bytes);
    } catch (const OutOfMemoryError& e) {
      throw OutOfMemoryError("the run's temporaries (" + largest_temporary(plan) +
                             "): " + e.what());
    }
    if (poison_) std::memset(arena->data(), 0xFF, plan.arena_bytes);
  }
  if (arena_out) *arena_out = arena;
  for (const auto& [slot, value] : uploaded_values_) values[slot] = value;
  bind_outputs(values, plan, arena);
  return values;
}

void Executor::bind_outputs(std::vector<Tensor>& values, const Plan& plan,
                            const std::shared_ptr<Storage>& arena) const {
  // Concat outputs holding bands first: a band's producer runs before its concat.
  for (size_t s = 0; s < values.size(); ++s) {
    const int root = plan.band_root[s];
    if (root < 0 || values[static_cast<size_t>(root)].defined()) continue;
    const Shape& shape = plan.shapes[static_cast<size_t>(root)];
    const DType dtype = program_.slots[static_cast<size_t>(root)].dtype;
    if (plan.offset[static_cast<size_t>(root)] >= 0) {
      values[static_cast<size_t>(root)] =
          Tensor(arena, static_cast<size_t>(plan.offset[static_cast<size_t>(root)]), dtype, shape,
                 contiguous_strides(shape));
    } else {  // an output of the run
      values[static_cast<size_t>(root)] = Tensor::empty(dtype, shape);
      if (poison_)
        std::memset(values[static_cast<size_t>(root)].data(), 0xFF,
                    values[static_cast<size_t>(root)].nbytes());
    }
  }
  for (size_t si = plan.first; si < plan.stop; ++si) {
    if (uploads_[si]) continue;
    const StepSpec& step = program_.steps[si];
    for (int s : step.outputs) {
      const SlotSpec& spec = program_.slots[s];
      if (values[s].defined()) continue;  // a concat output bound above
      if (const int root = plan.band_root[s]; root >= 0) {
        const Tensor& r = values[static_cast<size_t>(root)];
        values[s] = Tensor(r.storage(), r.byte_offset() + static_cast<size_t>(plan.band_offset[s]),
                           spec.dtype, plan.shapes[s], contiguous_strides(plan.shapes[s]));
        bands_.fetch_add(1, std::memory_order_relaxed);
        continue;
      }
      const auto in_place = std::find_if(in_place_slot_.begin(), in_place_slot_.end(),
                                         [s](const auto& p) { return p.first == s; });
      if (in_place != in_place_slot_.end()) {
        values[s] = values[static_cast<size_t>(in_place->second)];  // the state's own buffer
      } else if (plan.offset[s] >= 0) {
        values[s] = Tensor(arena, static_cast<size_t>(plan.offset[s]), spec.dtype, plan.shapes[s],
                           contiguous_strides(plan.shapes[s]));
      } else if (plan.view_root[s] >= 0 || (spec.view_of >= 0 && spec.on_device)) {
        // A reshape: the source's buffer (kept alive by the view) and offset.
        const Tensor& src =
            values[static_cast<size_t>(plan.view_root[s] >= 0 ? plan.view_root[s] : spec.view_of)];
        check_internal(src.numel() == shape_numel(plan.shapes[s]),
                       spec.name + ": a view of " + std::to_string(src.numel()) +
                           " elements cannot have shape " + dims_to_string(plan.shapes[s]));
        values[s] = Tensor(src.storage(), src.byte_offset(), spec.dtype, plan.shapes[s],
                           contiguous_strides(plan.shapes[s]));
        if (plan.view_root[s] >= 0) views_.fetch_add(1, std::memory_order_relaxed);
      } else if (spec.on_device) {
        // Device memory, one buffer per value for now (no arena on the device yet).
        Device& device = accelerator();
        const size_t bytes =
            static_cast<size_t>(shape_numel(plan.shapes[s])) * dtype_size(spec.dtype);
        std::shared_ptr<Storage> storage;
        try {
          storage = allocate_device_storage(device, bytes);
        } catch (const Error& e) {
          // The device is too small for this run: a smaller batch or fewer runs at once fit.
          throw UserError(step.label + ": output " + spec.name + ": " + e.what());
        }
        values[s] = Tensor(std::move(storage), 0, spec.dtype, plan.shapes[s],
                           contiguous_strides(plan.shapes[s]));
        if (poison_ && bytes) {
          std::vector<unsigned char> ff(bytes, 0xFF);
          device.copy_to_device(values[s].data(), ff.data(), bytes);
        }
      } else {
        try {
          values[s] = Tensor::empty(spec.dtype, plan.shapes[s]);
        } catch (const OutOfMemoryError& e) {
          throw OutOfMemoryError(step.label + ": output " + spec.name + " of shape " +
                                 dims_to_string(plan.shapes[s]) + ": " + e.what());
        }
        if (poison_) std::memset(values[s].data(), 0xFF, values[s].nbytes());
      }
    }
  }
}

void Executor::run_step(const StepSpec& step, std::vector<Tensor>& values, DeviceStream* stream,
                        StagedCopies* copies) {
  if (!profiling_.load(std::memory_order_relaxed)) {
    run_step_parts(step, values, stream, copies);
    return;
  }
  const auto t0 = std::chrono::steady_clock::now();
  const int parts = run_step_parts(step, values, stream, copies);
  const auto ns =
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - t0);
  StepCounters& c = step_counters_[static_cast<size_t>(&step - program_.steps.data())];
  c.calls.fetch_add(1, std::memory_order_relaxed);
  c.ns.fetch_add(ns.count(), std::memory_order_relaxed);
  if (parts > 1) c.parts.fetch_add(parts, std::memory_order_relaxed);
}

int Executor::run_step_parts(const StepSpec& step, std::vector<Tensor>& values,
                             DeviceStream* stream, StagedCopies* copies) {
  std::vector<kiln_tensor> views;
  views.reserve(step.inputs.size() + step.outputs.size());
  int64_t work = 0;
  for (const auto* list : {&step.inputs, &step.outputs}) {
    for (int s : *list) {
      views.push_back(abi_view(values[s], values[s].shape(), values[s].strides()));
      work = std::max(work, values[s].numel());
    }
  }
  std::vector<kiln_tensor*> ptrs;
  for (auto& v : views) ptrs.push_back(&v);
  const kiln_thunk_info& thunk = module_->info().thunks[step.thunk];
  const bool profiling = profiling_.load(std::memory_order_relaxed);
  auto call = [&](int part, int n_parts) {
    const auto t0 =
        profiling ? std::chrono::steady_clock::now() : std::chrono::steady_clock::time_point{};
    // Adds this call's time to its thread's slot and the trace, thrown or not.
    struct Busy {
      Executor* self;
      bool on;
      std::chrono::steady_clock::time_point t0;
      int step, part, parts;
      ~Busy() {
        if (!on) return;
        const auto t1 = std::chrono::steady_clock::now();
        const int thread = profile_thread_number();
        self->thread_busy_ns_[thread % kProfileThreads].fetch_add(
            std::chrono::duration_cast<std::chrono::nanoseconds>(t1 - t0).count(),
            std::memory_order_relaxed);
        const size_t at = self->trace_next_.fetch_add(1, std::memory_order_relaxed);
        if (at < kMaxTraceEvents) {
          const int64_t epoch = self->trace_epoch_ns_.load(std::memory_order_relaxed);
          auto since = [&](std::chrono::steady_clock::time_point t) {
            return std::chrono::duration_cast<std::chrono::nanoseconds>(t.time_since_epoch())
                       .count() -
                   epoch;
          };
          self->trace_[at] = TraceEvent{step, part, parts, thread, since(t0), since(t1)};
        }
      }
    } busy{this, profiling, t0, static_cast<int>(&step - program_.steps.data()), part, n_parts};
    ThunkContext ctx;
    ctx.set_part(part, n_parts);
    ctx.set_kernels(module_->kernels());
    ctx.set_device(stream, copies);
    int rc = thunk.fn(module_->state(), ctx.abi(), ptrs.data(), ptrs.data() + step.inputs.size());
    if (rc != 0) {
      throw UserError(step.label + ": " +
                      (ctx.message().empty() ? std::string("thunk failed") : ctx.message()));
    }
  };
  // One part per worker, none smaller than the grain: every part of a conv copies its halo
  // rows and streams its weights again, every part of a GEMM streams A again. Four parts
  // per worker cost 5-8% on the zoo's CNNs; two against one, alternated run by run in one
  // process on 2 workers, cost ResNet-18 4-6%, MNASNet 2-5%, ShuffleNetV2 1% and
  // EfficientNet-B0 2%, and the transformers nothing measurable (0.999-1.011).
  int n_parts = 1;
  // A heavy thunk's element costs about as much as a whole grain-sized run of light ones.
  const int64_t grain = (thunk.flags & KILN_THUNK_HEAVY)
                            ? std::max<int64_t>(split_grain_ / kHeavyFactor, 1)
                            : split_grain_;
  if ((thunk.flags & KILN_THUNK_SPLIT) && split_workers_ > 1 && work >= 2 * grain) {
    int64_t most = std::min<int64_t>(split_workers_, work / grain);
    // Parts take whole units (a packed GEMM's column panels, a conv's planes): no more
    // parts than units.
    if (thunk.split_unit > 0 && !step.outputs.empty()) {
      most = std::min(most, values[step.outputs[0]].numel() / thunk.split_unit);
    }
    n_parts = static_cast<int>(std::max<int64_t>(most, 1));
  }
  if (n_parts == 1) {
    call(0, 1);
    return 1;
  }
  split_calls_.fetch_add(1, std::memory_order_relaxed);
  parts_.fetch_add(n_parts, std::memory_order_relaxed);
  parallel_for(
      *engine_, n_parts, [&](int part) { call(part, n_parts); }, step.label);
  return n_parts;
}

bool Executor::is_device_step(const StepSpec& step) const {
  return (module_->info().thunks[step.thunk].flags & KILN_THUNK_DEVICE) != 0;
}

void Executor::upload_weights() {
  if (uploaded_.load(std::memory_order_acquire)) return;
  std::lock_guard lock(upload_mutex_);
  if (uploaded_.load(std::memory_order_relaxed)) return;
  std::vector<Tensor> values(program_.slots.size());
  for (const auto& [slot, value] : program_.params) values[slot] = value;
  try {
    DeviceSteps in_flight;
    for (size_t si = 0; si < program_.steps.size(); ++si) {
      if (!uploads_[si]) continue;
      const StepSpec& step = program_.steps[si];
      std::vector<Shape> in_shapes;
      for (int s : step.inputs) in_shapes.push_back(values[s].shape());
      const std::vector<Shape> out_shapes = step.infer_shape(in_shapes);
      for (size_t k = 0; k < step.outputs.size(); ++k) {
        const int s = step.outputs[k];
        const SlotSpec& spec = program_.slots[s];
        const size_t bytes =
            static_cast<size_t>(shape_numel(out_shapes[k])) * dtype_size(spec.dtype);
        values[s] = Tensor(allocate_device_storage(accelerator(), bytes), 0, spec.dtype,
                           out_shapes[k], contiguous_strides(out_shapes[k]));
        uploaded_values_.emplace_back(s, values[s]);
      }
      enqueue_device_step(step, values, in_flight);
    }
    in_flight.wait();
  } catch (...) {
    uploaded_values_.clear();  // the next run tries again
    throw;
  }
  uploaded_.store(true, std::memory_order_release);
}

void Executor::enqueue_device_step(const StepSpec& step, std::vector<Tensor>& values,
                                   DeviceSteps& in_flight) {
  DeviceStream& stream = thread_stream();
  auto copies = std::make_unique<StagedCopies>();
  try {
    run_step(step, values, &stream, copies.get());
  } catch (...) {
    drain_after_failure(stream);
    throw;
  }
  in_flight.add(step.label, stream, std::move(copies));
}

void Executor::copy_updates(std::vector<Tensor>& values) const {
  for (const ProgramUpdate& u : program_.updates) {
    if (u.in_place) continue;
    // A handle on the caller's tensor: the copy writes its buffer.
    Tensor state = values[static_cast<size_t>(program_.input_slots[static_cast<size_t>(u.input)])];
    copy_into(values[static_cast<size_t>(program_.output_slots[static_cast<size_t>(u.output)])],
              state);
  }
}

void Executor::run_steps(std::vector<Tensor>& values, const Plan& plan) {
  DeviceSteps in_flight;  // declared first: waited for before anything else goes
  std::shared_ptr<const Plan> rest;  // the plan after a step sized by its run
  for (const Plan* p = &plan;;) {
    for (size_t si = p->first; si < p->stop; ++si) {
      if (uploads_[si]) continue;
      const StepSpec& step = program_.steps[si];
      if (!is_device_step(step)) {
        in_flight.wait();  // a host step may read what device steps copied back
        run_step(step, values);
        continue;
      }
      enqueue_device_step(step, values, in_flight);
    }
    if (p->stop == program_.steps.size()) break;
    in_flight.wait();
    run_sized_step(program_.steps[p->stop], values);
    rest = plan_after(*p, values);
    std::shared_ptr<Storage> arena;
    try {
      arena = allocate_storage(rest->arena_bytes);
    } catch (const OutOfMemoryError& e) {
      throw OutOfMemoryError("the run's temporaries after " + program_.steps[p->stop].label + " (" +
                             largest_temporary(*rest) + "): " + e.what());
    }
    if (poison_) std::memset(arena->data(), 0xFF, rest->arena_bytes);
    bind_outputs(values, *rest, arena);
    p = rest.get();
  }
  in_flight.wait();
  copy_updates(values);
}

void Executor::run_sized_step(const StepSpec& step, std::vector<Tensor>& values) {
  // The thunk still gets a view per output (of no elements): it hands its results over.
  for (int s : step.outputs) {
    const SlotSpec& spec = program_.slots[static_cast<size_t>(s)];
    values[static_cast<size_t>(s)] = Tensor::empty(spec.dtype, Shape(spec.dims.size(), 0));
  }
  std::vector<Tensor> got;
  {
    SizedOutputs sink(step.outputs.size());
    run_step(step, values);
    got = sink.take(step.label);
  }
  for (size_t k = 0; k < got.size(); ++k) {
    const int s = step.outputs[k];
    const SlotSpec& spec = program_.slots[static_cast<size_t>(s)];
    bool ok =
        got[k].dtype() == spec.dtype && static_cast<size_t>(got[k].ndim()) == spec.dims.size();
    for (size_t d = 0; ok && d < spec.dims.size(); ++d)
      ok = spec.dims[d] < 0 || spec.dims[d] == got[k].shape()[d];
    if (!ok) {
      throw UserError(step.label + ": output " + spec.name + " came out " + got[k].describe() +
                      "; its type is " + slot_type(spec));
    }
    // Later steps' kernels take their operands dense, as planned buffers are.
    values[static_cast<size_t>(s)] = got[k].contiguous();
  }
}

std::shared_ptr<const Executor::Plan> Executor::plan_after(
    const Plan& before, const std::vector<Tensor>& values) const {
  std::vector<Shape> key;
  for (int s : program_.steps[before.stop].outputs)
    key.push_back(values[static_cast<size_t>(s)].shape());
  std::lock_guard lock(before.rest_mutex);
  auto it = before.rest.find(key);
  if (it != before.rest.end()) return it->second;
  // Sizes that change every run would grow the memo without bound: past a few, start over.
  if (before.rest.size() >= kMaxRestPlans) before.rest.clear();
  std::shared_ptr<const Plan> plan = make_plan({}, &values, before.stop + 1);
  before.rest.emplace(std::move(key), plan);
  return plan;
}

std::vector<const Storage*> Executor::foreign_storages(const std::vector<Tensor>& values) const {
  std::vector<const Storage*> out;
  for (int s : program_.input_slots) out.push_back(values[static_cast<size_t>(s)].storage().get());
  for (const auto& [slot, t] : program_.params) out.push_back(t.storage().get());
  for (const auto& [slot, t] : uploaded_values_) out.push_back(t.storage().get());
  return out;
}

namespace {

// A run's outputs belong to its caller: an output that is one of the caller's inputs, a
// weight (perhaps mapped read-only), or another output of the same run — a graph output
// that reads an input or a constant, or one value named twice — is copied, so writing to
// an output or keeping it never touches anything else. Host tensors only: a device output
// stays where the device step put it.
void own_outputs(std::vector<Tensor>& outputs, std::vector<const Storage*> taken) {
  for (Tensor& t : outputs) {
    if (!t.defined() || t.storage()->on_device()) continue;
    const Storage* s = t.storage().get();
    if (std::find(taken.begin(), taken.end(), s) != taken.end()) t = t.clone();
    taken.push_back(t.storage().get());
  }
}

}  // namespace

std::vector<Tensor> Executor::outputs_of(const std::vector<Tensor>& values) const {
  std::vector<Tensor> outputs;
  outputs.reserve(program_.output_slots.size());
  for (size_t i = 0; i < program_.output_slots.size(); ++i) {
    if (!is_update_output_[i]) outputs.push_back(values[program_.output_slots[i]]);
  }
  return outputs;
}

struct PendingRun::State {
  Engine* engine = nullptr;
  std::shared_ptr<const void> keep_alive;  // the executor, when it is shared
  std::vector<Tensor> values;
  std::vector<VarHandle> vars;  // this run's own: one per written buffer
  std::vector<Tensor> outputs;
  std::vector<const Storage*> foreign;  // see Executor::foreign_storages
  bool waited = false;
};

void Executor::push_device_step(const StepSpec& step,
                                const std::shared_ptr<PendingRun::State>& state,
                                const std::vector<VarHandle>& reads,
                                const std::vector<VarHandle>& writes) {
  // Called once. It hands its reference to the run's buffers on to the completion, which
  // drops both before telling the engine: the buffers and staging blocks are back in their
  // pools by the time a waiter sees the run finish (the engine frees this closure later).
  auto fn = [this, &step, state](const Engine::OnComplete& done) mutable {
    std::shared_ptr<PendingRun::State> held = std::move(state);
    DeviceStream& stream = thread_stream();  // this worker's own
    auto copies = std::make_shared<StagedCopies>();
    std::shared_ptr<DeviceEvent> event;
    try {
      run_step(step, held->values, &stream, copies.get());
      event = stream.record();
    } catch (...) {
      drain_after_failure(stream);
      done(std::current_exception());
      return;
    }
    // The run's buffers (state) stay alive until the device is done with them.
    when_complete(std::move(event), [copies = std::move(copies), done, held = std::move(held),
                                     &step](const std::string& error) mutable {
      if (error.empty()) {
        copies->finish();
      } else {
        copies->abandon();
      }
      copies.reset();
      held.reset();
      done(error.empty() ? nullptr : std::make_exception_ptr(Error(step.label + ": " + error)));
    });
  };
  engine_->push_async(std::move(fn), reads, writes, PushOptions{step.label, 0, kCudaEngineDevice});
}

std::vector<Tensor> Executor::run(const std::vector<Tensor>& inputs) {
  if (profiling_.load(std::memory_order_relaxed)) {
    const auto t0 = std::chrono::steady_clock::now();
    std::vector<Tensor> out = run_unprofiled(inputs);
    profiled_wall_ns_.fetch_add(elapsed_ns(t0), std::memory_order_relaxed);
    profiled_runs_.fetch_add(1, std::memory_order_relaxed);
    return out;
  }
  return run_unprofiled(inputs);
}

std::vector<Tensor> Executor::run_unprofiled(const std::vector<Tensor>& inputs) {
  validate(inputs);
  upload_weights();
  auto plan = plan_for(inputs);
  // Inside a pushed step (a control-flow node running its body) the steps run here: waiting
  // for pushed steps would hold a worker they may need.
  // On a caller's stream (caller_stream.h) the steps go in order onto that one stream.
  if (plan->parallel && !in_engine_function() && !InOrderRuns::active() && !CallerStream::current())
    return start(inputs, plan).get();
  std::unique_ptr<BoundValues> kept = take_bound(plan);
  std::shared_ptr<Storage> arena;
  std::vector<Tensor> values = bind(inputs, *plan, kept.get(), &arena);
  runs_.fetch_add(1, std::memory_order_relaxed);
  {
    // This thread runs every step, between split steps too: a worker polling beside it and
    // the one running helper parts would put three threads on two cores.
    WorkerPool::CallerBusy busy;
    run_steps(values, *plan);
  }
  std::vector<Tensor> outputs = outputs_of(values);
  own_outputs(outputs, foreign_storages(values));
  keep_bound(plan, std::move(arena), std::move(values));
  return outputs;
}

std::unique_ptr<Executor::BoundValues> Executor::take_bound(
    const std::shared_ptr<const Plan>& plan) {
  std::lock_guard lock(bound_mutex_);
  if (!bound_ || bound_->plan != plan || poison_) return nullptr;
  return std::move(bound_);
}

void Executor::keep_bound(const std::shared_ptr<const Plan>& plan, std::shared_ptr<Storage> arena,
                          std::vector<Tensor> values) {
  // A run past a step sized by its run bound values the plan does not describe.
  if (poison_ || has_device_slots_ || sized_steps_) return;
  auto kept = std::make_unique<BoundValues>();
  for (size_t s = 0; s < values.size(); ++s) {
    Tensor& t = values[s];
    // The caller's inputs and outputs (and views or bands of them) are not held between
    // runs: a kept reference would pin them and alias the next run's outputs.
    if (is_param_[s] || (t.defined() && t.storage() == arena)) {
      kept->views += plan->view_root[s] >= 0;
      kept->bands += plan->band_root[s] >= 0;
    } else {
      t = Tensor();
    }
  }
  kept->plan = plan;
  kept->arena = std::move(arena);
  kept->values = std::move(values);
  std::lock_guard lock(bound_mutex_);
  if (!bound_) bound_ = std::move(kept);  // another run's set is kept already
}

PendingRun Executor::run_async(const std::vector<Tensor>& inputs) {
  validate(inputs);
  upload_weights();
  return start(inputs, plan_for(inputs));
}

namespace {

// A pushed step's closure drops its reference to the run's state (its buffers) as the step
// returns, before the engine marks the step done: the engine frees the closure itself later,
// and until then a waiter that saw the run finish would find the buffers still held. (Under
// load a run's device buffers still reach their pool a few milliseconds after it returns:
// another holder, not yet found; see tests/cuda_test.cpp.)
struct DropWhenDone {
  std::shared_ptr<PendingRun::State>& state;
  ~DropWhenDone() { state.reset(); }
};

}  // namespace

PendingRun Executor::start(const std::vector<Tensor>& inputs,
                           const std::shared_ptr<const Plan>& plan) {
  auto state = std::make_shared<PendingRun::State>();
  state->values = bind(inputs, *plan);
  state->outputs = outputs_of(state->values);
  state->foreign = foreign_storages(state->values);
  runs_.fetch_add(1, std::memory_order_relaxed);
  if (!engine_) {
    run_steps(state->values, *plan);
    state->waited = true;
    return PendingRun(std::move(state));
  }
  state->engine = engine_;
  // Pushed functions use `this`: keep a shared executor alive until they have run.
  if (auto self = weak_from_this().lock()) state->keep_alive = self;
  PendingRun::State* st = state.get();
  if (!plan->parallel) {
    VarHandle done = engine_->new_var("run");
    st->vars.push_back(done);
    engine_->push(
        [this, state, plan]() mutable {
          DropWhenDone drop{state};
          run_steps(state->values, *plan);
        },
        {}, {done}, PushOptions{"run of " + std::to_string(program_.steps.size()) + " steps"});
    return PendingRun(std::move(state));
  }
  stepwise_runs_.fetch_add(1, std::memory_order_relaxed);
  std::vector<VarHandle> slot_var(program_.slots.size(), nullptr);
  for (size_t si = 0; si < program_.steps.size(); ++si) {
    if (uploads_[si]) continue;  // done before the run: nothing waits for them
    for (int s : program_.steps[si].outputs) {
      slot_var[s] = engine_->new_var(program_.slots[s].name);
      st->vars.push_back(slot_var[s]);
    }
  }
  // An updated input's old value is read by steps the engine must finish before the step
  // (or the copy) that overwrites it.
  for (const ProgramUpdate& u : program_.updates) {
    const int s = program_.input_slots[static_cast<size_t>(u.input)];
    slot_var[s] = engine_->new_var(program_.slots[s].name);
    st->vars.push_back(slot_var[s]);
  }
  // A step that runs its own threads (BLAS) writes `cores`, every other step reads it: the
  // engine then runs such a step alone, after the steps pushed before it.
  VarHandle cores = engine_->new_var("cores");
  st->vars.push_back(cores);
  for (size_t si = 0; si < program_.steps.size(); ++si) {
    if (uploads_[si]) continue;
    const StepSpec& step = program_.steps[si];
    std::vector<VarHandle> reads, writes;
    for (int s : step.inputs) {
      if (slot_var[s]) reads.push_back(slot_var[s]);
    }
    for (int s : step.outputs) {
      writes.push_back(slot_var[s]);
      for (int a : plan->aliases[s]) writes.push_back(slot_var[a]);
      for (const auto& [value, state] : in_place_slot_) {
        if (value == s) writes.push_back(slot_var[state]);
      }
    }
    (step.exclusive ? writes : reads).push_back(cores);
    if (is_device_step(step)) {
      push_device_step(step, state, reads, writes);
      continue;
    }
    engine_->push(
        [this, &step, state]() mutable {
          DropWhenDone drop{state};
          run_step(step, state->values);
        },
        reads, writes, PushOptions{step.label});
  }
  for (const ProgramUpdate& u : program_.updates) {
    if (u.in_place) continue;
    const int value = program_.output_slots[static_cast<size_t>(u.output)];
    const int input = program_.input_slots[static_cast<size_t>(u.input)];
    engine_->push(
        [state, value, input]() mutable {
          DropWhenDone drop{state};
          Tensor dst = state->values[static_cast<size_t>(input)];
          copy_into(state->values[static_cast<size_t>(value)], dst);
        },
        slot_var[value] ? std::vector<VarHandle>{slot_var[value]} : std::vector<VarHandle>{},
        {slot_var[input]}, PushOptions{"update " + program_.slots[input].name});
  }
  return PendingRun(std::move(state));
}

PendingRun& PendingRun::operator=(PendingRun&& other) noexcept {
  if (this != &other) {
    finish();
    state_ = std::move(other.state_);
  }
  return *this;
}

PendingRun::~PendingRun() { finish(); }

void PendingRun::finish() noexcept {
  if (!state_) return;
  try {
    wait();
  } catch (...) {
    // Destroyed without get(): the error has nobody to go to.
  }
  state_.reset();
}

void PendingRun::wait() {
  if (!state_) throw UserError("PendingRun: no run (moved from, or already taken by get())");
  State& st = *state_;
  if (st.waited) return;
  st.waited = true;
  // One wait for every buffer of this run; the variables are this run's alone, so the
  // error rethrown (once) is this run's. Deleted even when it throws.
  struct Release {
    State& st;
    ~Release() {
      for (VarHandle v : st.vars) st.engine->delete_var(v);
      st.vars.clear();
    }
  } release{st};
  st.engine->wait_for_vars(st.vars);
}

std::vector<Tensor> PendingRun::get() {
  try {
    wait();
  } catch (...) {
    state_.reset();  // taken, like the outputs of a run that succeeded
    throw;
  }
  std::vector<Tensor> outputs = std::move(state_->outputs);
  own_outputs(outputs, std::move(state_->foreign));
  state_.reset();
  return outputs;
}

}  // namespace kiln
