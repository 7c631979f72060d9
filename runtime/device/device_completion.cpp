#include "runtime/device/device_completion.h"

#include <atomic>
#include <condition_variable>
#include <deque>
#include <exception>
#include <mutex>
#include <thread>
#include <utility>

#include "runtime/device/device.h"

namespace kiln {
namespace {

// Events are waited in order: a stream completes its work in order, and work on different
// streams finishes independently (no stream waits on the host), so an early event that is
// slow only delays the notice of later ones, never their work.
class Completions {
 public:
  Completions() {
    std::thread([this] { work(); }).detach();
  }  // lives as long as the process
  void add(std::shared_ptr<DeviceEvent> event, std::function<void(std::string)> done) {
    std::lock_guard lock(mutex_);
    queue_.emplace_back(std::move(event), std::move(done));
    cv_.notify_one();
  }

  uint64_t delivered() const { return delivered_.load(std::memory_order_relaxed); }

 private:
  void work() {
    for (;;) {
      std::pair<std::shared_ptr<DeviceEvent>, std::function<void(std::string)>> item;
      {
        std::unique_lock lock(mutex_);
        cv_.wait(lock, [this] { return !queue_.empty(); });
        item = std::move(queue_.front());
        queue_.pop_front();
      }
      std::string error;
      try {
        item.first->wait();
      } catch (const std::exception& e) {
        error = e.what();
      }
      item.first.reset();
      delivered_.fetch_add(1, std::memory_order_relaxed);  // before: the callback wakes waiters
      item.second(std::move(error));
    }
  }

  std::atomic<uint64_t> delivered_{0};
  std::mutex mutex_;
  std::condition_variable cv_;
  std::deque<std::pair<std::shared_ptr<DeviceEvent>, std::function<void(std::string)>>> queue_;
};

Completions& completions() {
  static Completions* c = new Completions;  // never destroyed: its thread may be waiting
  return *c;
}

}  // namespace

void when_complete(std::shared_ptr<DeviceEvent> event, std::function<void(std::string)> done) {
  completions().add(std::move(event), std::move(done));
}

uint64_t completions_delivered() { return completions().delivered(); }

}  // namespace kiln
