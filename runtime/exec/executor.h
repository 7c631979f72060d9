#pragma once
// Runs a Program's steps on a loaded module: validates inputs, infers shapes, plans memory
// by liveness (the plan is kept while input shapes are unchanged) and runs each thunk.
// A program with parallel branches pushes each step to the dependency engine with a
// variable per buffer, so independent branches run at the same time; a pure chain runs in
// one thread. Large splittable thunks (KILN_THUNK_SPLIT) are divided across CPU workers.
// A step that runs threads of its own (StepSpec::exclusive: a BLAS call) runs alone.
// Program::updates overwrite inputs after (or, in place, during) the run.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "runtime/engine/engine.h"
#include "runtime/exec/program.h"
#include "runtime/module/module.h"

namespace kiln {

class DeviceStream;
class DeviceSteps;
class Executor;
class StagedCopies;

// The outcome of Executor::run_async: get() waits for the run and returns its outputs, or
// rethrows the error of the step that failed. Destroying an unfinished run waits for it.
class PendingRun {
 public:
  PendingRun() = default;
  PendingRun(PendingRun&&) noexcept = default;
  PendingRun& operator=(PendingRun&&) noexcept;
  ~PendingRun();
  void wait();                // rethrows the run's error, once
  std::vector<Tensor> get();  // wait() and then the outputs, once
  bool valid() const { return state_ != nullptr; }

  struct State;

 private:
  friend class Executor;
  explicit PendingRun(std::shared_ptr<State> state) : state_(std::move(state)) {}
  void finish() noexcept;
  std::shared_ptr<State> state_;
};

// Time spent in one step over the runs since profiling was switched on (wall time of the
// thunk call, its split parts included).
struct StepTime {
  std::string label;
  int64_t calls = 0;
  int64_t total_ns = 0;
  int64_t parts = 0;  // parts its split calls ran (0: never split)
  // Per call, at the shapes of the latest run: bytes of its inputs and outputs, and its
  // floating-point operations (0 when its op does not count them).
  double bytes = 0, flops = 0;
};

// How busy the threads were over the profiled runs of Executor::run: wall time of those
// runs, and per thread that ran thunk calls or parts, the time it spent in them.
struct RunProfile {
  int64_t runs = 0;
  int64_t wall_ns = 0;
  std::vector<int64_t> thread_busy_ns;  // busiest first
  // The engine's own cost: thunk calls made, the time of those runs in which no thread ran
  // a thunk (binding, dispatch, hand-offs between threads; -1 when the trace overflowed),
  // and how often a sleeping worker had to be woken (any pool of the process).
  int64_t steps = 0;
  int64_t idle_ns = -1;
  int64_t wakeups = 0;
  int64_t core_moves = 0;     // pollers moved off their caller's core (WorkerPool::moves)
  int64_t stepwise_runs = 0;  // runs whose steps went through the engine one by one
};

// One thunk call or split part of a profiled run: which step, which part of how many, the
// thread that ran it (a small process-wide number) and when, in ns since profiling was
// switched on.
struct TraceEvent {
  int step = 0;
  int part = 0, parts = 1;
  int thread = 0;
  int64_t start_ns = 0, end_ns = 0;
};

struct ExecutorStats {
  int64_t runs = 0;
  int64_t split_calls = 0;    // thunk calls divided into parts
  int64_t parts = 0;          // parts those calls ran
  int64_t views = 0;          // CPU reshapes bound as views of a temporary (nothing copied)
  int64_t stepwise_runs = 0;  // runs whose steps went to the engine one by one (branches)
  int64_t bands = 0;          // concat inputs bound in their band of the output (nothing copied)
};

// While one lives, the runs this thread starts run their steps on it in order, never handing
// them to the engine one by one: a control-flow body runs once per iteration, and a thread
// hand-off per step and iteration costs more than its branches gain (a 4x64 RNN Loop of 256
// iterations: 44 us per iteration). Split steps still split across the workers.
class InOrderRuns {
 public:
  InOrderRuns();
  ~InOrderRuns();
  InOrderRuns(const InOrderRuns&) = delete;
  InOrderRuns& operator=(const InOrderRuns&) = delete;
  static bool active();
};

class Executor : public std::enable_shared_from_this<Executor> {
 public:
  // Without an engine every step runs in the caller's thread and nothing is split. Executors
  // of one module and weight set share their program.
  Executor(std::shared_ptr<Module> module, std::shared_ptr<const Program> program,
           Engine* engine = nullptr);
  // Inputs in Program::input_slots order. Outputs are fresh tensors owned by the caller.
  std::vector<Tensor> run(const std::vector<Tensor>& inputs);
  // Starts a run and returns at once; input errors (count, dtype, shape) throw here, step
  // failures from get(). Runs may overlap: each has its own buffers. Inputs must not be
  // written until the run is finished.
  PendingRun run_async(const std::vector<Tensor>& inputs);

  const Program& program() const { return program_; }
  const Module& module() const { return *module_; }
  ExecutorStats stats() const;
  // Smallest number of elements a part of a split thunk call gets: below it a thread
  // wake-up costs more than the part saves.
  static constexpr int64_t kSplitGrain = int64_t(1) << 16;
  // KILN_THUNK_HEAVY thunks split at kSplitGrain / kHeavyFactor elements: a convolution
  // output element costs tens to thousands of multiply-adds.
  static constexpr int64_t kHeavyFactor = 16;
  // A branched program whose steps touch fewer elements than this in all runs its steps
  // in order in one thread: parallel branches would save less than the wake-ups cost.
  static constexpr int64_t kParallelWork = int64_t(1) << 16;
  // <= 0: the default. Clamped so that 2 * grain cannot overflow.
  void set_split_grain(int64_t elements) {
    split_grain_ = elements > 0 ? std::min(elements, INT64_MAX / 4) : kSplitGrain;
  }
  // Fill outputs and temporaries with 0xFF bytes before each run, so an element a thunk
  // fails to write shows up (NaN, -1) instead of stale data from a reused buffer.
  void set_poison_buffers(bool on) { poison_ = on; }
  // Per-step timing: off by default (one relaxed load per step then); switching it on
  // clears what was recorded. Safe while runs are in flight.
  void set_profiling(bool on);
  std::vector<StepTime> profile() const;  // in program order; empty when profiling is off
  RunProfile run_profile() const;         // empty when profiling is off
  // The thunk calls and parts of the profiled runs, in the order they finished; at most
  // kMaxTraceEvents (later ones are counted in *dropped). Read it between runs.
  static constexpr size_t kMaxTraceEvents = size_t(1) << 18;
  std::vector<TraceEvent> trace(int64_t* dropped = nullptr) const;

 private:
  struct Plan {
    std::vector<Shape> input_shapes;        // the key: plan is valid while these match
    std::vector<Shape> shapes;              // per slot
    std::vector<int64_t> offset;            // per slot: arena offset for temps, -1 otherwise
    std::vector<std::vector<int>> aliases;  // per temp slot: other temps sharing arena bytes
    // Per slot: the arena temporary whose bytes this CPU view (a reshape) binds, else -1.
    std::vector<int> view_root;
    // Per slot: the concat output whose band this temporary is bound to, else -1, and
    // the band's byte offset in it.
    std::vector<int> band_root;
    std::vector<int64_t> band_offset;
    size_t arena_bytes = 0;
    bool parallel = false;  // push each step to the engine (else run them in order)
    // The steps it covers, [first, stop): stop is a step sized by its run (StepSpec::
    // sized_by_run), or the end. The plans of the steps after it, by the shapes its outputs
    // came out with (plan_after).
    size_t first = 0, stop = 0;
    mutable std::mutex rest_mutex;
    mutable std::map<std::vector<Shape>, std::shared_ptr<const Plan>> rest;
  };
  static constexpr size_t kMaxRestPlans = 16;
  std::vector<Tensor> run_unprofiled(const std::vector<Tensor>& inputs);
  void validate(const std::vector<Tensor>& inputs) const;
  // bound: the run's values so far, when planning the steps from `first` on (after a step
  // sized by its run); else the plan starts from the inputs and weights.
  std::shared_ptr<const Plan> make_plan(const std::vector<Tensor>& inputs,
                                        const std::vector<Tensor>* bound = nullptr,
                                        size_t first = 0) const;
  // The plan of the steps after before.stop, from the shapes its outputs came out with.
  std::shared_ptr<const Plan> plan_after(const Plan& before,
                                         const std::vector<Tensor>& values) const;
  std::shared_ptr<const Plan> plan_for(const std::vector<Tensor>& inputs);
  PendingRun start(const std::vector<Tensor>& inputs, const std::shared_ptr<const Plan>& plan);
  // The values of the last in-order run, kept for the next run of the same plan: binding
  // and releasing a model's ~200 slots (a Tensor each, two small vectors and a reference)
  // cost ~40 us per run, 6% of a 0.65 ms MobileNetV3. Only what lives in the run's arena or
  // is a weight is kept; inputs, outputs and anything in their buffers are bound anew.
  struct BoundValues {
    std::shared_ptr<const Plan> plan;
    std::shared_ptr<Storage> arena;
    std::vector<Tensor> values;
    int64_t views = 0, bands = 0;  // kept views and bands, counted again on reuse
  };
  // reuse: a kept set for this plan (consumed); arena: where the arena bound goes.
  std::vector<Tensor> bind(const std::vector<Tensor>& inputs, const Plan& plan,
                           BoundValues* reuse = nullptr,
                           std::shared_ptr<Storage>* arena_out = nullptr) const;
  // Binds the outputs of the plan's steps (arena temporaries, views, bands, fresh outputs).
  void bind_outputs(std::vector<Tensor>& values, const Plan& plan,
                    const std::shared_ptr<Storage>& arena) const;
  std::unique_ptr<BoundValues> take_bound(const std::shared_ptr<const Plan>& plan);
  void keep_bound(const std::shared_ptr<const Plan>& plan, std::shared_ptr<Storage> arena,
                  std::vector<Tensor> values);
  // The arena's size and its largest temporary, for an allocation that failed.
  std::string largest_temporary(const Plan& plan) const;
  // stream/copies: where a device step's work goes (see ThunkContext::set_device).
  void run_step(const StepSpec& step, std::vector<Tensor>& values, DeviceStream* stream = nullptr,
                StagedCopies* copies = nullptr);
  // The step itself; returns the parts it ran in.
  int run_step_parts(const StepSpec& step, std::vector<Tensor>& values, DeviceStream* stream,
                     StagedCopies* copies);
  // Every step of the run, planning again after each step sized by its run.
  void run_steps(std::vector<Tensor>& values, const Plan& plan);
  // Runs a step sized by its run and binds the outputs it gave.
  void run_sized_step(const StepSpec& step, std::vector<Tensor>& values);
  // Runs a device step's thunk on this thread's stream; in_flight waits for its work.
  void enqueue_device_step(const StepSpec& step, std::vector<Tensor>& values,
                           DeviceSteps& in_flight);
  bool is_device_step(const StepSpec& step) const;
  // Runs the device steps that read nothing but weights (their uploads) once, keeping
  // their outputs on the device for every later run; no-op after the first call.
  void upload_weights();
  // Pushes a device step as an async engine function: it enqueues on its worker's stream
  // and completes when the stream has done that work.
  void push_device_step(const StepSpec& step, const std::shared_ptr<PendingRun::State>& state,
                        const std::vector<VarHandle>& reads, const std::vector<VarHandle>& writes);
  std::vector<Tensor> outputs_of(const std::vector<Tensor>& values) const;
  // The storages a run's outputs must not share: its inputs' (the caller's) and its weights'.
  std::vector<const Storage*> foreign_storages(const std::vector<Tensor>& values) const;
  // The updates that are not in place: each value copied into its input (after the steps).
  void copy_updates(std::vector<Tensor>& values) const;

  std::shared_ptr<Module> module_;
  std::shared_ptr<const Program> shared_program_;
  const Program& program_;
  Engine* engine_;
  bool parallel_steps_ = false;  // the program branches: large runs push step by step
  int split_workers_ = 1;        // > 1: split large splittable thunks across workers
  int64_t split_grain_ = kSplitGrain;
  bool poison_ = false;
  bool has_device_slots_ = false;  // device values are not kept between runs
  bool sized_steps_ = false;       // some step is sized by its run: plans in segments
  std::mutex bound_mutex_;
  std::unique_ptr<BoundValues> bound_;
  std::vector<bool> is_output_;
  std::vector<bool> is_update_output_;              // per output position
  std::vector<std::pair<int, int>> in_place_slot_;  // update value slot -> its input's slot
  mutable std::mutex plan_mutex_;
  std::shared_ptr<const Plan> plan_;
  std::atomic<int64_t> runs_{0}, split_calls_{0}, parts_{0};
  mutable std::atomic<int64_t> views_{0}, bands_{0};  // counted in bind
  std::atomic<int64_t> stepwise_runs_{0};
  struct StepCounters {
    std::atomic<int64_t> calls{0}, ns{0}, parts{0};
  };
  std::atomic<bool> profiling_{false};
  std::unique_ptr<StepCounters[]> step_counters_;  // per step, allocated once
  // Busy time per thread (a process-wide thread number modulo kProfileThreads), wall time
  // and count of profiled runs.
  static constexpr int kProfileThreads = 64;
  std::unique_ptr<std::atomic<int64_t>[]> thread_busy_ns_;
  std::atomic<int64_t> profiled_runs_{0}, profiled_wall_ns_{0};
  std::unique_ptr<TraceEvent[]> trace_;  // kMaxTraceEvents, allocated on first switch-on
  std::atomic<size_t> trace_next_{0};
  std::atomic<int64_t> trace_epoch_ns_{0};     // steady_clock, when profiling was switched on
  std::atomic<int64_t> wakeups_at_start_{0};   // WorkerPool::wakeups() then
  std::atomic<int64_t> moves_at_start_{0};     // WorkerPool::moves() then
  std::atomic<int64_t> stepwise_at_start_{0};  // stepwise_runs_ then
  std::vector<bool> uploads_;                  // per step: a device step of weights alone
  std::vector<bool> is_param_;                 // per slot: a weight (program_.params)
  std::mutex upload_mutex_;
  std::atomic<bool> uploaded_{false};
  std::vector<std::pair<int, Tensor>> uploaded_values_;  // slot -> its device tensor
};

}  // namespace kiln
