#pragma once
// The naive engine: every function runs to completion inside push(), in the caller's
// thread (an async function's push returns once on_complete was called). Same error
// semantics as the threaded engine; for debugging (KILN_ENGINE=naive) and as its oracle.
#include <condition_variable>
#include <unordered_set>

#include "runtime/engine/engine_core.h"

namespace kiln {

class NaiveEngine : public EngineCore {
 public:
  void push_async(AsyncFn fn, const std::vector<VarHandle>& reads,
                  const std::vector<VarHandle>& writes, const PushOptions& options) override;
  void wait_for_var(VarHandle var) override { wait_for_vars({var}); }
  void wait_for_vars(const std::vector<VarHandle>& vars) override;
  void wait_for_all() override;
  void delete_var(VarHandle var) override;
  const char* kind() const override { return "naive"; }
  int workers(int) const override { return 1; }

 private:
  void finish(Opr* opr) override;
  std::mutex mutex_;
  std::condition_variable finished_;
  std::unordered_set<Opr*> finished_oprs_;  // completed, their push not yet returned
};

}  // namespace kiln
