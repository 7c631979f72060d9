#include "runtime/engine/threaded_engine.h"

namespace kiln {

ThreadedEngine::ThreadedEngine(int cpu_workers) : cpu_workers_(cpu_workers) {
  cpu_pool_ = &pool(0);
}

ThreadedEngine::~ThreadedEngine() {
  // Shutdown runs everything already pushed; errors nobody waited for are dropped.
  std::unique_lock lock(pending_mutex_);
  all_done_.wait(lock, [this] { return pending_ == 0; });
  lock.unlock();
  std::lock_guard pools_lock(pools_mutex_);
  pools_.clear();
}

WorkerPool& ThreadedEngine::pool(int device) {
  std::lock_guard lock(pools_mutex_);
  auto& p = pools_[device];
  if (!p) p = std::make_unique<WorkerPool>(workers(device));
  return *p;
}

void ThreadedEngine::push_async(AsyncFn fn, const std::vector<VarHandle>& reads,
                                const std::vector<VarHandle>& writes, const PushOptions& options) {
  enqueue(make_opr(std::move(fn), reads, writes, options));
}

void ThreadedEngine::enqueue(std::unique_ptr<Opr> owned) {
  Opr* opr = owned.release();  // freed by finish()
  {
    std::lock_guard lock(pending_mutex_);
    ++pending_;
  }
  // One count per variable plus a guard, so the function cannot start half-queued.
  opr->wait.store(static_cast<int>(opr->reads.size() + opr->writes.size()) + 1);
  std::vector<Opr*> ready;
  for (const auto* list : {&opr->reads, &opr->writes}) {
    bool write = list == &opr->writes;
    for (VarHandle v : *list) {
      std::lock_guard lock(v->mutex);
      v->queue.emplace_back(opr, write);
      grant(v, ready);
    }
  }
  if (opr->wait.fetch_sub(1) == 1) ready.push_back(opr);
  for (Opr* o : ready) dispatch(o);
}

// Called with var->mutex held: grants the head of the queue while the rules allow.
void ThreadedEngine::grant(VarHandle var, std::vector<Opr*>& ready) {
  while (!var->queue.empty()) {
    auto [opr, write] = var->queue.front();
    if (write) {
      if (var->write_active || var->active_reads > 0) return;
      var->write_active = true;
    } else {
      if (var->write_active) return;
      ++var->active_reads;
    }
    var->queue.pop_front();
    if (opr->wait.fetch_sub(1) == 1) ready.push_back(opr);
    if (write) return;
  }
}

void ThreadedEngine::dispatch(Opr* opr) {
  pool(opr->options.device).submit([this, opr] { start(opr); }, opr->options.priority);
}

void ThreadedEngine::finish(Opr* opr) {
  std::vector<Opr*> ready;
  for (VarHandle v : opr->reads) {
    std::lock_guard lock(v->mutex);
    --v->active_reads;
    grant(v, ready);
  }
  for (VarHandle v : opr->writes) {
    std::lock_guard lock(v->mutex);
    v->write_active = false;
    grant(v, ready);
  }
  if (opr->delete_after) destroy_var(opr->delete_after);  // it was the variable's last user
  delete opr;
  for (Opr* o : ready) dispatch(o);
  std::lock_guard lock(pending_mutex_);
  if (--pending_ == 0) all_done_.notify_all();
}

void ThreadedEngine::wait_for_vars(const std::vector<VarHandle>& vars) {
  refuse_inside_function("wait_for_var");
  // Shared with the function: the waiter may return the moment it is signalled.
  struct Signal {
    std::mutex m;
    std::condition_variable cv;
    bool reached = false;
  };
  auto signal = std::make_shared<Signal>();
  auto opr = make_opr(
      [signal](const OnComplete& done) {
        done(nullptr);  // release the variable first: the waiter may push right after
        std::lock_guard lock(signal->m);
        signal->reached = true;
        signal->cv.notify_all();
      },
      vars, {}, PushOptions{"wait_for_var"});
  opr->always_run = true;
  enqueue(std::move(opr));
  std::unique_lock lock(signal->m);
  signal->cv.wait(lock, [&] { return signal->reached; });
  lock.unlock();
  rethrow_for(vars);
}

void ThreadedEngine::wait_for_all() {
  refuse_inside_function("wait_for_all");
  std::unique_lock lock(pending_mutex_);
  all_done_.wait(lock, [this] { return pending_ == 0; });
  lock.unlock();
  rethrow_any();
}

void ThreadedEngine::delete_var(VarHandle var) {
  auto opr =
      make_opr([](const OnComplete& done) { done(nullptr); }, {}, {var}, PushOptions{"delete_var"});
  opr->always_run = true;
  opr->delete_after = var;
  {
    std::lock_guard lock(var->mutex);
    var->deleted = true;
  }
  enqueue(std::move(opr));
}

}  // namespace kiln
