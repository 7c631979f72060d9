#pragma once
// Liveness-based buffer reuse: every temporary gets an offset into one arena; two
// temporaries share bytes only when one is dead before the other is written.
#include <cstddef>
#include <functional>
#include <vector>

namespace kiln {

struct BufferRequest {
  size_t bytes = 0;
  int first_step = 0;  // step that writes it
  int last_step = 0;   // last step that reads it (inclusive)
};

struct MemoryPlan {
  std::vector<size_t> offsets;  // per request, 64-byte aligned
  size_t arena_bytes = 0;
};

// True when request `dead` is dead before request `born` is first written, in every order
// the steps may run in. Steps that run one after another in step order: last_step <
// first_step (the default). Steps run in parallel need a dependency path instead.
using ReuseRule = std::function<bool(size_t dead, size_t born)>;

MemoryPlan plan_memory(const std::vector<BufferRequest>& requests, const ReuseRule& may_reuse = {});

}  // namespace kiln
