#include "runtime/split_parts.h"

#include <algorithm>
#include <vector>

namespace kiln {
namespace {

// When `workers` equal workers are done with `parts` parts of `units`, each claimed by the
// first free worker, in units of work.
int64_t finish_time(int64_t units, int64_t parts, int64_t workers) {
  std::vector<int64_t> busy_until(static_cast<size_t>(workers), 0);
  for (int64_t p = 0; p < parts; ++p) {
    const int64_t size = units * (p + 1) / parts - units * p / parts;  // kiln_part_range's cut
    *std::min_element(busy_until.begin(), busy_until.end()) += size;
  }
  return *std::max_element(busy_until.begin(), busy_until.end());
}

}  // namespace

int64_t split_part_count(int64_t units, int64_t workers, int64_t most) {
  if (most <= workers) return std::max<int64_t>(most, 1);
  most -= most % workers;
  if (units <= 0) return most;
  int64_t best = most, best_time = finish_time(units, most, workers);
  for (int64_t parts = most - workers; parts >= workers; parts -= workers) {
    const int64_t t = finish_time(units, parts, workers);
    if (t < best_time) {
      best = parts;
      best_time = t;
    }
  }
  return best;
}

}  // namespace kiln
