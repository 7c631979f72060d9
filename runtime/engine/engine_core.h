#pragma once
// What both engines share: variables, functions in flight (Opr), error records and how a
// function is started and completed. The engines differ only in when a function starts.
#include <atomic>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_set>
#include <utility>
#include <vector>

#include "runtime/engine/engine.h"

namespace kiln {

// One failure, shared by every variable it reached (directly or through skipped readers),
// so it is rethrown once however many variables carry it.
struct ErrorRecord {
  std::exception_ptr error;
  std::string function;  // the name of the function that threw
  std::atomic<bool> rethrown{false};
};

struct Opr;

struct EngineVar {
  std::string name;
  std::mutex mutex;
  std::deque<std::pair<Opr*, bool>> queue;  // waiting functions, in push order; true = writes
  int active_reads = 0;
  bool write_active = false;
  bool deleted = false;  // delete_var was called: no more pushes
  std::shared_ptr<ErrorRecord> error;
};

struct Opr {
  Engine::AsyncFn fn;
  std::vector<VarHandle> reads, writes;  // disjoint, without duplicates
  PushOptions options;
  std::atomic<int> wait{0};  // variables not yet granted, plus one while being pushed
  bool always_run = false;   // engine-internal (waits, deletion): never skipped
  VarHandle delete_after = nullptr;
};

class EngineCore : public Engine {
 public:
  VarHandle new_var(const std::string& name) override;
  // A synchronous function is an async one that completes when it returns.
  void push(Fn fn, const std::vector<VarHandle>& reads, const std::vector<VarHandle>& writes,
            const PushOptions& options) final;
  ~EngineCore() override;

 protected:
  // Builds an Opr: merges duplicates (a variable both read and written counts as written)
  // and rejects null or deleted variables with a UserError naming the function.
  std::unique_ptr<Opr> make_opr(AsyncFn fn, const std::vector<VarHandle>& reads,
                                const std::vector<VarHandle>& writes, const PushOptions& options);
  // Runs `opr` (or skips it when a variable it uses carries an error), then calls
  // finish(opr) exactly once, possibly from another thread (async functions); a second
  // on_complete, or one followed by a throw, is ignored.
  void start(Opr* opr);
  virtual void finish(Opr* opr) = 0;

  void rethrow_for(const std::vector<VarHandle>& vars);  // the first error among them, once
  void rethrow_any();  // the first error not yet rethrown; clears them all
  static void refuse_inside_function(const char* what);
  void destroy_var(VarHandle var);

 private:
  void complete(Opr* opr, std::shared_ptr<ErrorRecord> error);

  std::mutex vars_mutex_;
  std::unordered_set<VarHandle> vars_;
  std::mutex errors_mutex_;
  std::vector<std::shared_ptr<ErrorRecord>> errors_;
  std::unordered_set<VarHandle> erred_vars_;
};

}  // namespace kiln
