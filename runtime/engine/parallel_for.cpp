#include "runtime/engine/parallel_for.h"

#include "runtime/engine/cpu_relax.h"
#include "runtime/engine/shared_job.h"
#include "runtime/engine/worker_pool.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <exception>
#include <memory>
#include <mutex>
#include <thread>

namespace kiln {
namespace {

// Shared with helpers, which may start after the caller has returned (and then find
// nothing left to claim).
struct Parts {
  std::function<void(int)> body;
  int n = 0;
  std::atomic<int> next{0};
  std::atomic<int> done{0};
  std::mutex mutex;
  std::condition_variable all_done;
  std::exception_ptr error;

  void claim_and_run() {
    for (int part; (part = next.fetch_add(1)) < n;) {
      try {
        body(part);
      } catch (...) {
        std::lock_guard lock(mutex);
        if (!error) error = std::current_exception();
      }
      if (done.fetch_add(1, std::memory_order_acq_rel) + 1 == n) {
        std::lock_guard lock(mutex);  // the waiter checks `done` under it: no lost wake-up
        all_done.notify_all();
      }
    }
  }
};

// The parts offered to polling workers (Engine::offer): on the caller's stack, since the
// caller withdraws the offer, which waits for every worker inside, before it returns.
struct OfferedParts final : SharedJob {
  const std::function<void(int)>* body = nullptr;
  int n = 0;
  std::atomic<int> next{0};
  std::atomic<int> done{0};
  std::mutex mutex;
  std::exception_ptr error;

  void run_parts() {
    for (int part; (part = next.fetch_add(1, std::memory_order_relaxed)) < n;) {
      try {
        (*body)(part);
      } catch (...) {
        std::lock_guard lock(mutex);
        if (!error) error = std::current_exception();
      }
      done.fetch_add(1, std::memory_order_acq_rel);
    }
  }
  void join() override {
    if (next.load(std::memory_order_relaxed) >= n) return;
    EngineFunctionScope scope;  // as a queued helper part runs
    run_parts();
  }
};

// Polls `ready` with pauses for up to 50 us (a sched_yield may give the core away for a
// time slice); true once it holds.
template <class Ready>
bool spin_until(Ready ready) {
  const auto until = std::chrono::steady_clock::now() + std::chrono::microseconds(50);
  for (unsigned i = 0;; ++i) {
    if (ready()) return true;
    cpu_relax();
    if (i % 64 == 63 && std::chrono::steady_clock::now() >= until) return false;
  }
}

}  // namespace

void parallel_for(Engine& engine, int n_parts, const std::function<void(int)>& body,
                  const std::string& name) {
  if (n_parts <= 0) return;
  if (n_parts == 1) {
    body(0);
    return;
  }
  WorkerPool::CallerBusy busy;  // this thread runs parts: one fewer worker polls
  {
    OfferedParts job;
    job.body = &body;
    job.n = n_parts;
    if (engine.workers(0) > 1 && engine.offer(&job)) {
      job.run_parts();
      // A worker's last part ends within microseconds of the caller's (or it never joined,
      // and the caller ran every part): pauses first, then yields for a long part.
      spin_until([&] { return job.done.load(std::memory_order_acquire) == n_parts; });
      while (job.done.load(std::memory_order_acquire) < n_parts) std::this_thread::yield();
      engine.withdraw(&job);
      if (job.error) std::rethrow_exception(job.error);
      return;
    }
  }
  auto parts = std::make_shared<Parts>();
  parts->body = body;
  parts->n = n_parts;
  const int helpers = std::min(n_parts, engine.workers(0)) - 1;
  PushOptions options{name + " (helper)", 1 << 20, 0};  // ahead of new graph steps
  for (int h = 0; h < helpers; ++h) {
    engine.push([parts] { parts->claim_and_run(); }, {}, {}, options);
  }
  parts->claim_and_run();
  // The helpers' last parts end within microseconds of the caller's; sleeping on the
  // condition variable would add a futex wake-up to every split step.
  spin_until([&] { return parts->done.load(std::memory_order_acquire) == parts->n; });
  std::unique_lock lock(parts->mutex);
  parts->all_done.wait(lock,
                       [&] { return parts->done.load(std::memory_order_acquire) == parts->n; });
  if (parts->error) std::rethrow_exception(parts->error);
}

}  // namespace kiln
