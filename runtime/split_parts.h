#pragma once
// How many parts a split step runs in: whole rounds per worker, and of those counts the one
// whose parts the workers finish soonest.
#include <cstdint>

namespace kiln {

// Parts for a step of `units` indivisible units (0: unknown, any count balances) on
// `workers` workers, at most `most` parts (most <= units where units are known). A count
// past the workers is a multiple of them (three equal parts on two workers leave one worker
// two of them). Among those, the count whose parts, cut as kiln_part_range cuts them and
// claimed in order by whichever worker is free, finish first; the larger count on a tie
// (more parts even out a slow worker). Six attention heads on two workers: 4 parts of
// 1, 2, 1, 2 heads end after 4 heads' time, 2 parts of 3 after 3.
int64_t split_part_count(int64_t units, int64_t workers, int64_t most);

}  // namespace kiln
