#include "runtime/engine/naive_engine.h"

namespace kiln {

void NaiveEngine::push_async(AsyncFn fn, const std::vector<VarHandle>& reads,
                             const std::vector<VarHandle>& writes, const PushOptions& options) {
  std::unique_ptr<Opr> opr = make_opr(std::move(fn), reads, writes, options);
  Opr* raw = opr.get();
  start(raw);
  // An async function may complete later, from another thread: push is synchronous anyway.
  std::unique_lock lock(mutex_);
  finished_.wait(lock, [&] { return finished_oprs_.count(raw) > 0; });
  finished_oprs_.erase(raw);
}

void NaiveEngine::finish(Opr* opr) {
  // Notify under the lock: once it is released the pusher may return and the engine die.
  std::lock_guard lock(mutex_);
  finished_oprs_.insert(opr);
  finished_.notify_all();
}

void NaiveEngine::wait_for_vars(const std::vector<VarHandle>& vars) {
  refuse_inside_function("wait_for_var");
  make_opr([](const OnComplete&) {}, vars, {},
           PushOptions{"wait_for_var"});  // rejects deleted variables
  rethrow_for(vars);
}

void NaiveEngine::wait_for_all() {
  refuse_inside_function("wait_for_all");
  rethrow_any();
}

void NaiveEngine::delete_var(VarHandle var) {
  make_opr([](const OnComplete&) {}, {}, {var},
           PushOptions{"delete_var"});  // rejects a deleted var
  destroy_var(var);
}

}  // namespace kiln
