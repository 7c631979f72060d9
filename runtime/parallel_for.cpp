#include "runtime/parallel_for.h"

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <exception>
#include <memory>
#include <mutex>

namespace kiln {
namespace {

// Shared with helpers, which may start after the caller has returned (and then find
// nothing left to claim).
struct Parts {
  std::function<void(int)> body;
  int n = 0;
  std::atomic<int> next{0};
  std::mutex mutex;
  std::condition_variable all_done;
  int done = 0;
  std::exception_ptr error;

  void claim_and_run() {
    for (int part; (part = next.fetch_add(1)) < n;) {
      std::exception_ptr e;
      try {
        body(part);
      } catch (...) {
        e = std::current_exception();
      }
      std::lock_guard lock(mutex);
      if (e && !error) error = e;
      if (++done == n) all_done.notify_all();
    }
  }
};

}  // namespace

void parallel_for(Engine& engine, int n_parts, const std::function<void(int)>& body,
                  const std::string& name) {
  if (n_parts <= 0) return;
  if (n_parts == 1) {
    body(0);
    return;
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
  std::unique_lock lock(parts->mutex);
  parts->all_done.wait(lock, [&] { return parts->done == parts->n; });
  if (parts->error) std::rethrow_exception(parts->error);
}

}  // namespace kiln
