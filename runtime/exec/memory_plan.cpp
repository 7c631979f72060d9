#include "runtime/exec/memory_plan.h"

#include <algorithm>
#include <utility>

namespace kiln {
namespace {
constexpr size_t kAlign = 64;
size_t round_up(size_t n) { return (n + kAlign - 1) / kAlign * kAlign; }
}  // namespace

MemoryPlan plan_memory(const std::vector<BufferRequest>& requests, const ReuseRule& may_reuse) {
  ReuseRule rule = may_reuse ? may_reuse : [&](size_t dead, size_t born) {
    return requests[dead].last_step < requests[born].first_step;
  };
  MemoryPlan plan;
  plan.offsets.assign(requests.size(), 0);
  std::vector<size_t> order(requests.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return requests[a].first_step < requests[b].first_step;
  });
  // Each request goes into the smallest gap between the buffers it may not share with
  // (best fit), else just above the highest of them. Quadratic in the number of
  // temporaries, which stays in the thousands.
  std::vector<size_t> placed;
  std::vector<std::pair<size_t, size_t>> taken;  // [begin, end) of conflicting buffers
  for (size_t r : order) {
    const size_t need = round_up(requests[r].bytes);
    taken.clear();
    for (size_t q : placed) {
      if (!rule(q, r))
        taken.emplace_back(plan.offsets[q], plan.offsets[q] + round_up(requests[q].bytes));
    }
    std::sort(taken.begin(), taken.end());
    size_t best = 0, best_size = 0, cursor = 0;
    bool found = false;
    for (const auto& [begin, end] : taken) {
      if (begin > cursor && begin - cursor >= need && (!found || begin - cursor < best_size)) {
        best = cursor;
        best_size = begin - cursor;
        found = true;
      }
      cursor = std::max(cursor, end);
    }
    plan.offsets[r] = found ? best : cursor;
    plan.arena_bytes = std::max(plan.arena_bytes, plan.offsets[r] + need);
    placed.push_back(r);
  }
  return plan;
}

}  // namespace kiln
