#pragma once
// The dependency engine (MXNet semantics): functions declare the variables they read and
// write; two functions that share a variable, one of them writing it, run in push order;
// everything else may run concurrently. It knows nothing of graphs.
//
// Failures: an exception thrown by a function is stored on the variables it writes; later
// functions that read or write such a variable are skipped and inherit the error;
// wait_for_var / wait_for_all rethrow it once, and the engine stays usable.
#include <exception>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace kiln {

class SharedJob;
struct EngineVar;  // opaque; owned by the engine
using VarHandle = EngineVar*;

struct PushOptions {
  std::string name;  // for tracing and error messages
  int priority = 0;  // higher runs first among functions ready at the same time
  int device = 0;    // worker pool: 0 is the CPU
};

// True while this thread runs a function some engine pushed: a wait there would hold a worker
// that the awaited work may need (a run started inside a step runs its steps itself).
bool in_engine_function();

// Marks this thread as running a pushed function while it lives (a job's part on a worker).
class EngineFunctionScope {
 public:
  EngineFunctionScope();
  ~EngineFunctionScope();
  EngineFunctionScope(const EngineFunctionScope&) = delete;
  EngineFunctionScope& operator=(const EngineFunctionScope&) = delete;
};

// The worker pool of CUDA steps: each of its workers enqueues on a stream of its own.
constexpr int kCudaEngineDevice = 1;

class Engine {
 public:
  using Fn = std::function<void()>;
  // Must be called exactly once, from any thread; pass the error, if any.
  using OnComplete = std::function<void(std::exception_ptr)>;
  using AsyncFn = std::function<void(OnComplete)>;

  virtual ~Engine() = default;

  virtual VarHandle new_var(const std::string& name = "") = 0;
  // A variable listed twice, or both read and written, counts once (as written).
  virtual void push(Fn fn, const std::vector<VarHandle>& reads,
                    const std::vector<VarHandle>& writes, const PushOptions& options = {}) = 0;
  virtual void push_async(AsyncFn fn, const std::vector<VarHandle>& reads,
                          const std::vector<VarHandle>& writes,
                          const PushOptions& options = {}) = 0;
  // Waits for every function pushed so far that uses `var`; rethrows its error once.
  virtual void wait_for_var(VarHandle var) = 0;
  // Waits for every function pushed so far that uses any of `vars` (one wait, however many
  // variables); rethrows the first of their errors, once, and clears them all.
  virtual void wait_for_vars(const std::vector<VarHandle>& vars) = 0;
  // Waits for everything pushed so far; rethrows the first error not yet rethrown.
  virtual void wait_for_all() = 0;
  // Frees `var` after every function pushed so far that uses it; pushing it later throws.
  virtual void delete_var(VarHandle var) = 0;
  virtual const char* kind() const = 0;
  // Threads that may run functions on `device` at once (1 for the naive engine).
  virtual int workers(int device = 0) const = 0;
  // Offers `job` to CPU workers polling now, outside the dependency order (WorkerPool::offer):
  // false where none polls or the engine has no pool. withdraw ends an accepted offer.
  virtual bool offer(SharedJob* job) {
    (void)job;
    return false;
  }
  virtual void withdraw(SharedJob* job) { (void)job; }
};

enum class EngineKind { kThreaded, kNaive };

// kind: KILN_ENGINE (threaded | naive), default threaded. cpu_workers: 0 means
// KILN_ENGINE_WORKERS, else the number of cores.
std::unique_ptr<Engine> make_engine(int cpu_workers = 0);
std::unique_ptr<Engine> make_engine(EngineKind kind, int cpu_workers = 0);

}  // namespace kiln
