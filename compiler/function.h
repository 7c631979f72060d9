#pragma once
// A compiled graph: call it with input tensors, get output tensors.
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "graph/tensor_type.h"
#include "runtime/exec/executor.h"

namespace kiln {

struct PhaseTimes {
  // lookup: cache lookup and verification; wait: time spent waiting for another process
  // compiling the same key.
  double rewrite_ms = 0, key_ms = 0, lookup_ms = 0, wait_ms = 0, codegen_ms = 0, compile_ms = 0,
         load_ms = 0;
  double remote_ms = 0;  // the remote tier: fetch and verify, or upload
  // Binding the graph's weights: preparing them from the plan (folding, packing) for a
  // weight set this module has not seen, else only looking them up.
  double prepare_ms = 0;
  // A module built from kernels (compile_ms covers all three): the kernels not yet cached,
  // compiled concurrently (wall time), the binding unit, and the link.
  double kernels_ms = 0, binding_ms = 0, link_ms = 0;
};

// A module built from kernels (LinkMode::kKernels): how many distinct kernels it binds, how
// many came from the kernel cache and how many were compiled, and each compile's time.
struct KernelReport {
  int kernels = 0, reused = 0, compiled = 0;
  int fetched = 0;  // of the reused, those fetched from the remote tier
  int jobs = 0;    // compiles run at once
  int served = 0;  // of the compiled, those a compile server took (the rest: clang processes)
  std::vector<std::pair<std::string, double>> compile_ms;  // symbol (op), ms
};

enum class CacheStatus {
  kMemo,         // already loaded in this process
  kHit,          // loaded from the on-disk cache
  kRemoteHit,    // fetched from the remote tier, verified, stored locally, loaded
  kMiss,         // compiled, then stored
  kBypassed,     // KILN_CACHE=0 or CompileOptions::use_cache = false
  kUncacheable,  // an op has no cache_version: compiled, never stored
};
const char* to_string(CacheStatus status);

struct CompileInfo {
  std::string key;
  CacheStatus cache = CacheStatus::kMiss;
  std::string cache_note;             // e.g. a recovered bad entry, or --explain's answer
  std::filesystem::path source_path;  // the stitched C source, kept beside the module
  std::filesystem::path module_path;
  std::string compiler_log;  // warnings, if any (empty for a clean compile)
  PhaseTimes times;
  // Where its placed nodes run ("" for a host-only module): the device's backend ("cuda"),
  // and the device in words (the GPU's name, or the emulator, which always says it is one).
  std::string backend;
  std::string device;
  KernelReport kernels;  // all zero for a module not built on this call, or built as one unit
  // State updates (Graph::add_update): written in place by their step, or copied after.
  int updates_in_place = 0, updates_copied = 0;
  // Where the prepared weights came from: "none needed", "memory" (this process prepared
  // these weights before), "cache" (a prepared-weights entry, mapped) or "prepared" (now).
  std::string weights;
};

class Function {
 public:
  // `pin` keeps the module's cache entry from being evicted while this function lives.
  Function(std::shared_ptr<Executor> executor, std::vector<std::string> input_names,
           std::vector<TensorType> input_types, std::vector<std::string> output_names,
           CompileInfo info, std::shared_ptr<const void> pin = nullptr);

  // Inputs in graph-input order.
  std::vector<Tensor> operator()(const std::vector<Tensor>& inputs) const;
  // Inputs by name; a missing or unknown name is a UserError naming it.
  std::vector<Tensor> run(const std::map<std::string, Tensor>& inputs) const;
  // Starts a run on the engine and returns at once; get() waits and returns the outputs
  // (or rethrows the failing step's error). Runs may overlap; inputs must stay unchanged
  // until the run is finished.
  PendingRun run_async(const std::vector<Tensor>& inputs) const;
  PendingRun run_async(const std::map<std::string, Tensor>& inputs) const;
  ExecutorStats stats() const { return executor_->stats(); }
  // Per-step wall time of the runs after set_profiling(true) (see Executor::profile).
  void set_profiling(bool on) const { executor_->set_profiling(on); }
  std::vector<StepTime> profile() const { return executor_->profile(); }
  RunProfile run_profile() const { return executor_->run_profile(); }
  // The thunk calls and parts of the profiled runs (see Executor::trace), and the same as
  // a Trace Event JSON document for chrome://tracing or Perfetto.
  std::vector<TraceEvent> trace() const { return executor_->trace(); }
  std::string trace_json() const;

  const std::vector<std::string>& input_names() const { return input_names_; }
  const std::vector<TensorType>& input_types() const { return input_types_; }
  const std::vector<std::string>& output_names() const { return output_names_; }
  const CompileInfo& info() const { return info_; }

 private:
  std::vector<Tensor> ordered(const std::map<std::string, Tensor>& inputs) const;
  std::shared_ptr<Executor> executor_;
  std::vector<std::string> input_names_;
  std::vector<TensorType> input_types_;
  std::vector<std::string> output_names_;
  CompileInfo info_;
  std::shared_ptr<const void> pin_;
};

// `inputs` by name in the order of `names`; a missing or unknown name is a UserError naming
// it (and the expected type, from `types`).
std::vector<Tensor> inputs_in_order(const std::vector<std::string>& names,
                                    const std::vector<TensorType>& types,
                                    const std::map<std::string, Tensor>& inputs);

}  // namespace kiln
