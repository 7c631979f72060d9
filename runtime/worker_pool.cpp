#include "runtime/worker_pool.h"

#include <algorithm>

namespace kiln {

WorkerPool::WorkerPool(int threads) {
  max_busy_ = std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
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

void WorkerPool::work() {
  std::unique_lock lock(mutex_);
  for (;;) {
    if (queue_.empty()) {
      if (stop_) return;
      if (busy_.fetch_add(1, std::memory_order_acq_rel) + callers_.load(std::memory_order_acquire) <
          max_busy_) {
        ++spinning_;
        lock.unlock();
        const auto until = std::chrono::steady_clock::now() + kSpin;
        while (queued_.load(std::memory_order_acquire) == 0 &&
               std::chrono::steady_clock::now() < until) {
          std::this_thread::yield();
        }
        lock.lock();
        --spinning_;
      }
      busy_.fetch_sub(1, std::memory_order_acq_rel);
      if (!queue_.empty() || stop_) continue;
      ++idle_;
      cv_.wait(lock, [this] { return stop_ || !queue_.empty(); });
      --idle_;
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
