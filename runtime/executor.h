#pragma once
// Runs a Program's steps on a loaded module: validates inputs, infers shapes, plans memory
// by liveness (reused across calls while input shapes are unchanged) and calls each thunk.
#include <memory>
#include <mutex>
#include <vector>

#include "runtime/module.h"
#include "runtime/program.h"

namespace kiln {

class Executor {
 public:
  Executor(std::shared_ptr<Module> module, Program program);
  // Inputs in Program::input_slots order. Outputs are fresh tensors owned by the caller.
  std::vector<Tensor> run(const std::vector<Tensor>& inputs);
  const Program& program() const { return program_; }
  const Module& module() const { return *module_; }

 private:
  struct Plan {
    std::vector<Shape> input_shapes;  // the key: plan is valid while these match
    std::vector<Shape> shapes;        // per slot
    std::vector<int64_t> offset;      // per slot: arena offset for temps, -1 otherwise
    std::vector<int> step_of_output;  // per slot: producing step or -1
    size_t arena_bytes = 0;
    std::shared_ptr<Storage> arena;
  };
  void validate(const std::vector<Tensor>& inputs) const;
  void make_plan(const std::vector<Tensor>& inputs);

  std::shared_ptr<Module> module_;
  Program program_;
  std::vector<bool> is_output_;
  std::mutex mutex_;  // one run at a time: the arena is shared between calls
  Plan plan_;
  bool have_plan_ = false;
};

}  // namespace kiln
