#pragma once
// Liveness-based buffer reuse: every temporary gets an offset into one arena; two
// temporaries share bytes only when their lifetimes (first write .. last read) do not overlap.
#include <cstddef>
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

MemoryPlan plan_memory(const std::vector<BufferRequest>& requests);

}  // namespace kiln
