#include "runtime/worker_pool.h"

namespace kiln {

WorkerPool::WorkerPool(int threads) {
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
    wake = idle_ > 0;
  }
  if (wake) cv_.notify_one();  // busy workers will find it when they come back
}

void WorkerPool::work() {
  std::unique_lock lock(mutex_);
  for (;;) {
    if (queue_.empty()) {
      if (stop_) return;
      lock.unlock();
      const auto until = std::chrono::steady_clock::now() + kSpin;
      while (queued_.load(std::memory_order_acquire) == 0 &&
             std::chrono::steady_clock::now() < until) {
        std::this_thread::yield();
      }
      lock.lock();
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
    task();
    lock.lock();
  }
}

}  // namespace kiln
