#pragma once
// A fixed set of threads taking tasks by priority (higher first, then first come). An idle
// worker polls for kSpin before it sleeps: a graph's next split step usually comes within
// microseconds, and a sleeping worker's wake-up costs tens of them. Polling workers, working
// ones and callers running split parts (CallerBusy) together stay within the core count: a
// poller beyond that would only take time from threads doing work.
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <queue>
#include <thread>
#include <vector>

#include "runtime/engine/shared_job.h"

namespace kiln {

class WorkerPool {
 public:
  using Task = std::function<void()>;
  // 100 us let a worker fall asleep between split steps across a run of small ones (a
  // transformer's layer norms and transposes): GPT-style decoder runs had a 10% slower
  // upper quartile than at 1 ms, the median 1-2%.
  static constexpr std::chrono::microseconds kSpin{1000};
  // cores: how many threads may run or poll at once (0: the machine's count).
  explicit WorkerPool(int threads, int cores = 0, std::chrono::microseconds spin = kSpin);
  ~WorkerPool();  // runs what is queued, then joins
  WorkerPool(const WorkerPool&) = delete;
  WorkerPool& operator=(const WorkerPool&) = delete;

  void submit(Task task, int priority);
  // Puts `job` where polling workers join it: false when no worker polls now or another
  // job holds the slot (then queue a task instead, which wakes a sleeper). A poller that
  // stops polling meanwhile leaves the job to its caller, who must run it all if need be.
  bool offer(SharedJob* job);
  // Ends the offer; returns once no worker is inside the job (it may then be destroyed).
  void withdraw(SharedJob* job);
  int size() const { return static_cast<int>(threads_.size()); }
  int polling();   // workers polling for a task now
  int sleeping();  // workers asleep, waiting to be woken for a task
  // Times a sleeping worker was woken, in every pool of the process: a wake-up costs tens
  // of microseconds, so a profile reports them per run.
  static int64_t wakeups() { return wakeups_.load(std::memory_order_relaxed); }
  // Times a poller found itself on its caller's core and moved off it (leave_callers_core).
  static int64_t moves() { return moves_.load(std::memory_order_relaxed); }
  // A thread outside the pool running steps or split parts (a run on its caller's thread,
  // parallel_for's caller) holds a core as a worker would: while one does, one fewer worker
  // polls. A caller that only waits (a branched program's) does not count, so every worker
  // may poll for its steps. Nests; a pool worker is counted already and adds nothing.
  class CallerBusy {
   public:
    CallerBusy();
    ~CallerBusy();
    CallerBusy(const CallerBusy&) = delete;
    CallerBusy& operator=(const CallerBusy&) = delete;

   private:
    bool counted_;
  };

 private:
  struct Item {
    int priority;
    uint64_t seq;
    Task task;
    bool operator<(const Item& o) const {
      return priority != o.priority ? priority < o.priority : seq > o.seq;
    }
  };
  void work();
  void join_offered(uint64_t& last_generation);
  void leave_callers_core();
  // How a poll ended: kLeft, early and no longer counted in busy_; kTimedOut; kSawTask, a
  // task queued or the pool stopping (both counted still).
  enum class PollEnd { kLeft, kTimedOut, kSawTask };
  PollEnd poll();

  std::mutex mutex_;
  std::condition_variable cv_;
  std::priority_queue<Item> queue_;
  uint64_t seq_ = 0;
  int idle_ = 0;                   // asleep on cv_
  int spinning_ = 0;               // polling; each will take a task without a wake-up
  std::atomic<bool> stop_{false};  // also read by polling workers, without the mutex
  std::atomic<int> busy_{0};       // polling or running a task
  int max_busy_ = 1;               // the core count
  std::chrono::microseconds spin_;
  static inline std::atomic<int> callers_{0};
  static inline std::atomic<int64_t> wakeups_{0};
  static inline std::atomic<int64_t> moves_{0};
  std::atomic<int64_t> queued_{0};  // queue_.size(), readable without the mutex
  std::atomic<int> pollers_{0};     // spinning_, readable without the mutex
  std::atomic<SharedJob*> offered_{nullptr};
  std::atomic<int> caller_cpu_{-1};  // the core the last offer came from
  std::atomic<int> joining_{0};  // workers between reading offered_ and leaving its job
  std::atomic<uint64_t> generations_{0};
  std::vector<std::thread> threads_;
};

}  // namespace kiln
