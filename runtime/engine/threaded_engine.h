#pragma once
// The threaded engine: each variable keeps its waiting functions in push order and grants
// them in turn (readers together, a writer alone); a function whose variables are all
// granted goes to its device's worker pool.
#include <condition_variable>
#include <map>
#include <memory>

#include "runtime/engine/engine_core.h"
#include "runtime/engine/worker_pool.h"

namespace kiln {

class ThreadedEngine : public EngineCore {
 public:
  explicit ThreadedEngine(int cpu_workers);
  ~ThreadedEngine() override;

  void push_async(AsyncFn fn, const std::vector<VarHandle>& reads,
                  const std::vector<VarHandle>& writes, const PushOptions& options) override;
  void wait_for_var(VarHandle var) override { wait_for_vars({var}); }
  void wait_for_vars(const std::vector<VarHandle>& vars) override;
  void wait_for_all() override;
  void delete_var(VarHandle var) override;
  const char* kind() const override { return "threaded"; }
  int workers(int device) const override { return device == 0 ? cpu_workers_ : kDeviceWorkers; }
  bool offer(SharedJob* job) override { return cpu_pool_->offer(job); }
  void withdraw(SharedJob* job) override { cpu_pool_->withdraw(job); }
  // A device's functions only enqueue work and return: two workers (two streams) let
  // independent branches overlap on the device without a thread per branch.
  static constexpr int kDeviceWorkers = 2;

 private:
  void enqueue(std::unique_ptr<Opr> opr);
  void finish(Opr* opr) override;
  void grant(VarHandle var, std::vector<Opr*>& ready);
  void dispatch(Opr* opr);
  WorkerPool& pool(int device);

  int cpu_workers_;
  WorkerPool* cpu_pool_ = nullptr;  // pool(0), kept from the start: pool() takes a mutex
  std::mutex pools_mutex_;
  std::map<int, std::unique_ptr<WorkerPool>> pools_;
  std::mutex pending_mutex_;
  std::condition_variable all_done_;
  int64_t pending_ = 0;
};

}  // namespace kiln
