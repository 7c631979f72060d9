#pragma once
// The per-step profile of profiled runs as a text table: steps by time, each with its share
// of the time in steps, parts, bytes moved and GFLOP/s (where its op counts FLOPs), then
// the wall time per run, how busy each thread was (the cores' utilisation) and what the
// engine cost between steps (idle time per call, worker wake-ups).
#include <string>
#include <vector>

#include "runtime/exec/executor.h"

namespace kiln {

std::string format_profile(const std::vector<StepTime>& steps, const RunProfile& runs);

}  // namespace kiln
