#include "runtime/engine/worker_pool.h"

#include <algorithm>

#if defined(__linux__)
#include <sched.h>
#endif

#include "runtime/engine/cpu_relax.h"

namespace kiln {
namespace {

thread_local bool tls_pool_worker = false;
thread_local int tls_caller_depth = 0;

}  // namespace

WorkerPool::CallerBusy::CallerBusy() : counted_(!tls_pool_worker && tls_caller_depth++ == 0) {
  if (counted_) callers_.fetch_add(1, std::memory_order_acq_rel);
}

WorkerPool::CallerBusy::~CallerBusy() {
  if (tls_pool_worker) return;
  --tls_caller_depth;
  if (counted_) callers_.fetch_sub(1, std::memory_order_acq_rel);
}

WorkerPool::WorkerPool(int threads, int cores, std::chrono::microseconds spin) : spin_(spin) {
  max_busy_ =
      std::max(1, cores > 0 ? cores : static_cast<int>(std::thread::hardware_concurrency()));
  for (int i = 0; i < threads; ++i) threads_.emplace_back([this] { work(); });
}

WorkerPool::~WorkerPool() {
  {
    std::lock_guard lock(mutex_);
    stop_ = true;
  }
  cv_.notify_all();
  for (auto& t : threads_) t.join();
}

void WorkerPool::submit(Task task, int priority) {
  bool wake;
  {
    std::lock_guard lock(mutex_);
    queue_.push(Item{priority, seq_++, std::move(task)});
    queued_.fetch_add(1, std::memory_order_release);
    // A polling worker takes a task without help; wake a sleeper only for the surplus.
    wake = idle_ > 0 && static_cast<int64_t>(queue_.size()) > spinning_;
  }
  if (wake) cv_.notify_one();  // busy workers will find it when they come back
}

// A poller on the core of the caller that offers it jobs can only take that caller's time:
// the scheduler leaves a thread that keeps yielding where it is while it looks cache-hot,
// idle cores or not, and early in a process (a new thread starts beside its creator) this
// lasted ~100 ms: MobileNetV2 int8 ran 1.55 ms a run, its worker joining 1 split step in 40,
// instead of 0.86. Narrowing the poller's affinity to the other cores moves it at once; the
// full set is restored right after (it stays where it landed), so nothing is pinned.
void WorkerPool::leave_callers_core() {
#if defined(__linux__)
  const int caller = caller_cpu_.load(std::memory_order_relaxed);
  if (caller < 0 || sched_getcpu() != caller) return;
  cpu_set_t all;
  if (sched_getaffinity(0, sizeof all, &all) != 0 || !CPU_ISSET(caller, &all) ||
      CPU_COUNT(&all) < 2) {
    return;
  }
  cpu_set_t others = all;
  CPU_CLR(caller, &others);
  if (sched_setaffinity(0, sizeof others, &others) == 0) {
    sched_setaffinity(0, sizeof all, &all);
    moves_.fetch_add(1, std::memory_order_relaxed);
  }
#endif
}

bool WorkerPool::offer(SharedJob* job) {
  if (pollers_.load(std::memory_order_acquire) == 0) return false;
#if defined(__linux__)
  caller_cpu_.store(sched_getcpu(), std::memory_order_relaxed);
#endif

  job->generation_ = generations_.fetch_add(1, std::memory_order_relaxed) + 1;
  SharedJob* none = nullptr;
  return offered_.compare_exchange_strong(none, job, std::memory_order_seq_cst);
}

void WorkerPool::withdraw(SharedJob* job) {
  SharedJob* expected = job;
  offered_.compare_exchange_strong(expected, nullptr, std::memory_order_seq_cst);
  // A worker that read the slot before it cleared had counted itself in first (both
  // sequentially consistent), so this sees it and waits for it to leave the job.
  while (joining_.load(std::memory_order_seq_cst) != 0) cpu_relax();
}

// Joins the offered job once per offer (a job may sit in the slot after its parts ran out,
// until its caller withdraws it). The count is the pool's, not the job's: the job may end
// between reading the slot and counting in, and its memory with it.
void WorkerPool::join_offered(uint64_t& last_generation) {
  joining_.fetch_add(1, std::memory_order_seq_cst);
  SharedJob* job = offered_.load(std::memory_order_seq_cst);
  if (job && job->generation_ != last_generation) {
    last_generation = job->generation_;
    job->join();
  }
  joining_.fetch_sub(1, std::memory_order_release);
}

int WorkerPool::polling() {
  std::lock_guard lock(mutex_);
  return spinning_;
}

int WorkerPool::sleeping() {
  std::lock_guard lock(mutex_);
  return idle_;
}

WorkerPool::PollEnd WorkerPool::poll() {
  auto until = std::chrono::steady_clock::now() + spin_;
  uint64_t last_generation = 0;
  for (;;) {
    // Acquire: the offer's caller_cpu_ is then this offer's, and the poller leaves that core
    // before joining (checked only after yielding, an offer made meanwhile was joined there).
    if (offered_.load(std::memory_order_acquire)) {
      leave_callers_core();
      const uint64_t before = last_generation;
      join_offered(last_generation);
      if (last_generation != before) until = std::chrono::steady_clock::now() + spin_;
    }
    if (queued_.load(std::memory_order_acquire) != 0 || stop_.load(std::memory_order_acquire)) {
      return PollEnd::kSawTask;
    }
    if (std::chrono::steady_clock::now() >= until) return PollEnd::kTimedOut;
    if (busy_.load(std::memory_order_acquire) + callers_.load(std::memory_order_acquire) >
        max_busy_) {
      // A caller took a core since this poll began (a run, a split step): a poller beyond
      // the core count would preempt the threads doing the work. The surplus leaves, one
      // poller at a time, so the pollers within the count go on.
      if (busy_.fetch_sub(1, std::memory_order_acq_rel) + callers_.load(std::memory_order_acquire) >
          max_busy_) {
        return PollEnd::kLeft;
      }
      busy_.fetch_add(1, std::memory_order_acq_rel);
    }
    std::this_thread::yield();
    leave_callers_core();
  }
}

void WorkerPool::work() {
  tls_pool_worker = true;
  std::unique_lock lock(mutex_);
  for (;;) {
    if (queue_.empty()) {
      if (stop_) return;
      if (busy_.fetch_add(1, std::memory_order_acq_rel) + callers_.load(std::memory_order_acquire) <
          max_busy_) {
        ++spinning_;
        pollers_.fetch_add(1, std::memory_order_release);
        lock.unlock();
        const PollEnd end = poll();
        lock.lock();
        pollers_.fetch_sub(1, std::memory_order_release);
        --spinning_;
        if (end != PollEnd::kLeft) busy_.fetch_sub(1, std::memory_order_acq_rel);
        // A task another poller took first: poll again rather than sleep, or one submit
        // seen by two pollers left none polling.
        if (end == PollEnd::kSawTask) continue;
      } else {
        busy_.fetch_sub(1, std::memory_order_acq_rel);
      }
      if (!queue_.empty() || stop_) continue;
      ++idle_;
      cv_.wait(lock, [this] { return stop_ || !queue_.empty(); });
      --idle_;
      if (!stop_) wakeups_.fetch_add(1, std::memory_order_relaxed);
      continue;
    }
    Task task = std::move(const_cast<Item&>(queue_.top()).task);
    queue_.pop();
    queued_.fetch_sub(1, std::memory_order_relaxed);
    lock.unlock();
    busy_.fetch_add(1, std::memory_order_acq_rel);
    task();
    busy_.fetch_sub(1, std::memory_order_acq_rel);
    lock.lock();
  }
}

}  // namespace kiln
