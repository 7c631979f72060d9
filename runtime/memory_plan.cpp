#include "runtime/memory_plan.h"

#include <algorithm>
#include <map>

namespace kiln {
namespace {
constexpr size_t kAlign = 64;
size_t round_up(size_t n) { return (n + kAlign - 1) / kAlign * kAlign; }
}  // namespace

MemoryPlan plan_memory(const std::vector<BufferRequest>& requests) {
  MemoryPlan plan;
  plan.offsets.assign(requests.size(), 0);
  // Requests in order of their first step; free blocks keyed by offset so adjacent ones merge.
  std::vector<size_t> order(requests.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return requests[a].first_step < requests[b].first_step;
  });
  std::map<size_t, size_t> free_blocks;  // offset -> size
  std::multimap<int, size_t> live;       // last_step -> request
  size_t top = 0;
  auto release_until = [&](int step) {
    while (!live.empty() && live.begin()->first < step) {
      size_t r = live.begin()->second;
      live.erase(live.begin());
      size_t off = plan.offsets[r], size = round_up(requests[r].bytes);
      auto it = free_blocks.emplace(off, size).first;
      if (auto next = std::next(it); next != free_blocks.end() && off + size == next->first) {
        it->second += next->second;
        free_blocks.erase(next);
      }
      if (it != free_blocks.begin()) {
        auto prev = std::prev(it);
        if (prev->first + prev->second == it->first) {
          prev->second += it->second;
          free_blocks.erase(it);
        }
      }
    }
  };
  for (size_t r : order) {
    release_until(requests[r].first_step);
    size_t need = round_up(requests[r].bytes);
    // Best fit among free blocks; otherwise grow the arena.
    auto best = free_blocks.end();
    for (auto it = free_blocks.begin(); it != free_blocks.end(); ++it) {
      if (it->second >= need && (best == free_blocks.end() || it->second < best->second)) best = it;
    }
    if (best != free_blocks.end()) {
      plan.offsets[r] = best->first;
      size_t rest = best->second - need;
      size_t rest_off = best->first + need;
      free_blocks.erase(best);
      if (rest) free_blocks.emplace(rest_off, rest);
    } else if (!free_blocks.empty() && std::prev(free_blocks.end())->first +
                                               std::prev(free_blocks.end())->second == top) {
      // Extend the free block at the top of the arena instead of leaving it as a hole.
      auto last = std::prev(free_blocks.end());
      plan.offsets[r] = last->first;
      top = last->first + need;
      free_blocks.erase(last);
    } else {
      plan.offsets[r] = top;
      top += need;
    }
    live.emplace(requests[r].last_step, r);
  }
  plan.arena_bytes = top;
  return plan;
}

}  // namespace kiln
