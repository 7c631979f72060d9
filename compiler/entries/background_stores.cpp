#include "compiler/entries/background_stores.h"

#include <condition_variable>
#include <exception>
#include <mutex>
#include <set>
#include <thread>
#include <vector>

#include "cache/remote_tier.h"

namespace kiln {

namespace {

class Background {
 public:
  static Background& instance() {
    // What a store uses must outlive the last join, at exit: statics made before this one
    // are destroyed after it, so the remote tier is made first if it was not yet.
    try {
      RemoteTier::process_default();
    } catch (const std::exception&) {
      // A malformed setting: the compile that reads it says so; no store will use a tier.
    }
    static Background b;
    return b;
  }
  void run(const std::string& key, std::function<void()> work) {
    std::lock_guard lock(mutex_);
    pending_.insert(key);
    threads_.emplace_back([this, key, work = std::move(work)] {
      work();
      {
        std::lock_guard done(mutex_);
        pending_.erase(key);
      }
      finished_.notify_all();
    });
  }
  void wait(const std::string& key) {
    std::unique_lock lock(mutex_);
    finished_.wait(lock, [&] { return pending_.count(key) == 0; });
  }
  void wait_all() {
    std::vector<std::thread> threads;
    {
      std::lock_guard lock(mutex_);
      threads.swap(threads_);
    }
    for (auto& t : threads) t.join();
  }
  ~Background() { wait_all(); }

 private:
  std::mutex mutex_;
  std::condition_variable finished_;
  std::multiset<std::string> pending_;
  std::vector<std::thread> threads_;
};

}  // namespace

void store_in_background(const std::string& key, std::function<void()> store) {
  Background::instance().run(key, std::move(store));
}

void wait_for_background_store(const std::string& key) { Background::instance().wait(key); }

void wait_for_background_stores() { Background::instance().wait_all(); }

}  // namespace kiln
