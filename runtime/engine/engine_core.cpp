#include "runtime/engine/engine_core.h"

#include <algorithm>

#include "util/error.h"

namespace kiln {
namespace {

thread_local int functions_running = 0;  // > 0 while this thread runs a pushed function

struct RunningScope {
  RunningScope() { ++functions_running; }
  ~RunningScope() { --functions_running; }
};

}  // namespace

bool in_engine_function() { return functions_running > 0; }

EngineFunctionScope::EngineFunctionScope() { ++functions_running; }
EngineFunctionScope::~EngineFunctionScope() { --functions_running; }

VarHandle EngineCore::new_var(const std::string& name) {
  auto* v = new EngineVar();
  v->name = name;
  std::lock_guard lock(vars_mutex_);
  vars_.insert(v);
  return v;
}

void EngineCore::push(Fn fn, const std::vector<VarHandle>& reads,
                      const std::vector<VarHandle>& writes, const PushOptions& options) {
  push_async(
      [fn = std::move(fn)](const OnComplete& done) {
        fn();
        done(nullptr);
      },
      reads, writes, options);
}

EngineCore::~EngineCore() {
  for (VarHandle v : vars_) delete v;
}

void EngineCore::destroy_var(VarHandle var) {
  {
    std::lock_guard lock(errors_mutex_);
    erred_vars_.erase(var);
  }
  {
    std::lock_guard lock(vars_mutex_);
    vars_.erase(var);
  }
  delete var;
}

std::unique_ptr<Opr> EngineCore::make_opr(AsyncFn fn, const std::vector<VarHandle>& reads,
                                          const std::vector<VarHandle>& writes,
                                          const PushOptions& options) {
  auto opr = std::make_unique<Opr>();
  opr->fn = std::move(fn);
  opr->options = options;
  auto check = [&](VarHandle v) {
    if (!v) throw UserError("engine: function '" + options.name + "' uses a null variable");
    {
      std::lock_guard lock(vars_mutex_);
      if (!vars_.count(v)) {
        throw UserError("engine: function '" + options.name +
                        "' uses a variable after delete_var (or one this engine never made)");
      }
    }
    std::lock_guard lock(v->mutex);
    if (v->deleted) {
      throw UserError("engine: function '" + options.name + "' uses variable '" + v->name +
                      "' after delete_var");
    }
  };
  for (VarHandle v : writes) {
    check(v);
    if (std::find(opr->writes.begin(), opr->writes.end(), v) == opr->writes.end())
      opr->writes.push_back(v);
  }
  for (VarHandle v : reads) {
    check(v);
    bool written = std::find(opr->writes.begin(), opr->writes.end(), v) != opr->writes.end();
    if (!written && std::find(opr->reads.begin(), opr->reads.end(), v) == opr->reads.end())
      opr->reads.push_back(v);
  }
  return opr;
}

void EngineCore::start(Opr* opr) {
  std::shared_ptr<ErrorRecord> inherited;
  if (!opr->always_run) {
    for (const auto* list : {&opr->reads, &opr->writes}) {
      for (VarHandle v : *list) {
        std::lock_guard lock(v->mutex);
        if (v->error && !inherited) inherited = v->error;
      }
    }
  }
  if (inherited) {
    complete(opr, std::move(inherited));  // skipped: the error passes on to what it writes
    return;
  }
  auto make_record = [opr](std::exception_ptr e) {
    auto r = std::make_shared<ErrorRecord>();
    r->error = std::move(e);
    r->function = opr->options.name;
    return r;
  };
  // The function may complete (and so free opr) before it returns: it runs from a local
  // copy, and the once-flag lives outside opr.
  AsyncFn fn = std::move(opr->fn);
  auto once = std::make_shared<std::atomic<bool>>(false);
  RunningScope running;
  std::exception_ptr thrown;
  try {
    fn([this, opr, once, make_record](std::exception_ptr e) {
      if (!once->exchange(true)) complete(opr, e ? make_record(std::move(e)) : nullptr);
    });
  } catch (...) {
    thrown = std::current_exception();
  }
  // Completed after the handler has ended: this thread holds no reference of its own to the
  // exception by the time a waiter (another thread) rethrows it.
  if (thrown && !once->exchange(true)) complete(opr, make_record(std::move(thrown)));
}

void EngineCore::complete(Opr* opr, std::shared_ptr<ErrorRecord> error) {
  if (error) {
    for (VarHandle v : opr->writes) {
      std::lock_guard lock(v->mutex);
      v->error = error;
    }
    std::lock_guard lock(errors_mutex_);
    if (std::find(errors_.begin(), errors_.end(), error) == errors_.end()) errors_.push_back(error);
    erred_vars_.insert(opr->writes.begin(), opr->writes.end());
  }
  // Drop this thread's reference before finish() lets a waiter rethrow and free it.
  error.reset();
  finish(opr);
}

void EngineCore::rethrow_for(const std::vector<VarHandle>& vars) {
  std::exception_ptr to_throw;
  for (VarHandle var : vars) {
    std::shared_ptr<ErrorRecord> error;
    {
      std::lock_guard lock(var->mutex);
      error = std::move(var->error);
      var->error.reset();
    }
    if (!error) continue;
    bool first = !error->rethrown.exchange(true);
    {
      // Forget what this wait settled, so a long-lived engine does not collect old failures.
      std::lock_guard lock(errors_mutex_);
      erred_vars_.erase(var);
      if (first) errors_.erase(std::remove(errors_.begin(), errors_.end(), error), errors_.end());
    }
    if (first && !to_throw) to_throw = error->error;
  }
  if (to_throw) std::rethrow_exception(to_throw);
}

void EngineCore::rethrow_any() {
  std::vector<std::shared_ptr<ErrorRecord>> errors;
  std::unordered_set<VarHandle> erred;
  {
    std::lock_guard lock(errors_mutex_);
    errors.swap(errors_);
    erred.swap(erred_vars_);
  }
  for (VarHandle v : erred) {
    std::lock_guard lock(v->mutex);
    v->error.reset();
  }
  for (const auto& e : errors) {
    if (!e->rethrown.exchange(true)) std::rethrow_exception(e->error);
  }
}

void EngineCore::refuse_inside_function(const char* what) {
  if (functions_running > 0) {
    throw UserError(
        std::string("engine: ") + what +
        " called from inside a pushed function would deadlock; push a dependent function instead");
  }
}

}  // namespace kiln
