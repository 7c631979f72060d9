#pragma once
// Work that polling workers join straight from a slot of their pool, without the queue: a
// split step's parts (parallel_for). Queueing a helper through the engine (an operation, the
// pool's mutex and priority queue, a std::function per part) cost 1-2 us per split step,
// about a tenth of a small CNN's run on two cores.
#include <cstdint>

namespace kiln {

class SharedJob {
 public:
  // Runs what is left of the job on a worker; may find nothing left.
  virtual void join() = 0;

 protected:
  ~SharedJob() = default;

 private:
  friend class WorkerPool;
  uint64_t generation_ = 0;  // tells a job from an earlier one at the same address
};

}  // namespace kiln
