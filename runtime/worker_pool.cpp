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
    wake = idle_ > 0;
  }
  if (wake) cv_.notify_one();  // busy workers will find it when they come back
}

void WorkerPool::work() {
  std::unique_lock lock(mutex_);
  for (;;) {
    if (queue_.empty()) {
      if (stop_) return;
      ++idle_;
      cv_.wait(lock, [this] { return stop_ || !queue_.empty(); });
      --idle_;
      continue;
    }
    Task task = std::move(const_cast<Item&>(queue_.top()).task);
    queue_.pop();
    lock.unlock();
    task();
    lock.lock();
  }
}

}  // namespace kiln
