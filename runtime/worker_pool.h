#pragma once
// A fixed set of threads taking tasks by priority (higher first, then first come).
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <queue>
#include <thread>
#include <vector>

namespace kiln {

class WorkerPool {
 public:
  using Task = std::function<void()>;
  explicit WorkerPool(int threads);
  ~WorkerPool();  // runs what is queued, then joins
  WorkerPool(const WorkerPool&) = delete;
  WorkerPool& operator=(const WorkerPool&) = delete;

  void submit(Task task, int priority);
  int size() const { return static_cast<int>(threads_.size()); }

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

  std::mutex mutex_;
  std::condition_variable cv_;
  std::priority_queue<Item> queue_;
  uint64_t seq_ = 0;
  int idle_ = 0;
  bool stop_ = false;
  std::vector<std::thread> threads_;
};

}  // namespace kiln
