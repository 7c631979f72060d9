#pragma once
// Runs a Program's steps on a loaded module: validates inputs, infers shapes, plans memory
// by liveness (reused across calls while input shapes are unchanged) and pushes each thunk
// to the dependency engine with a variable per buffer, so independent branches run at the
// same time. Without an engine the thunks run one after another in the caller's thread.
#include <memory>
#include <mutex>
#include <vector>

#include "runtime/engine.h"
#include "runtime/module.h"
#include "runtime/program.h"

namespace kiln {

class Executor {
 public:
  Executor(std::shared_ptr<Module> module, Program program, Engine* engine = nullptr);
  ~Executor();
  // Inputs in Program::input_slots order. Outputs are fresh tensors owned by the caller.
  std::vector<Tensor> run(const std::vector<Tensor>& inputs);
  const Program& program() const { return program_; }
  const Module& module() const { return *module_; }

 private:
  struct Plan {
    std::vector<Shape> input_shapes;        // the key: plan is valid while these match
    std::vector<Shape> shapes;              // per slot
    std::vector<int64_t> offset;            // per slot: arena offset for temps, -1 otherwise
    std::vector<int> step_of_output;        // per slot: producing step or -1
    std::vector<std::vector<int>> aliases;  // per temp slot: other temps sharing arena bytes
    size_t arena_bytes = 0;
    std::shared_ptr<Storage> arena;
  };
  void validate(const std::vector<Tensor>& inputs) const;
  void make_plan(const std::vector<Tensor>& inputs);
  void run_step(const StepSpec& step, std::vector<Tensor>& values) const;
  void run_on_engine(std::vector<Tensor>& values);

  std::shared_ptr<Module> module_;
  Program program_;
  Engine* engine_;
  std::vector<VarHandle> slot_var_;  // per slot written by a step (engine runs only)
  std::vector<VarHandle> written_vars_;
  std::vector<bool> is_output_;
  std::mutex mutex_;  // one run at a time: the arena is shared between calls
  Plan plan_;
  bool have_plan_ = false;
};

}  // namespace kiln
