#pragma once
// A profiled run's thunk calls and parts in the Trace Event format (a JSON object with
// "traceEvents") that chrome://tracing and Perfetto open: one complete event per call or
// part, named by its step's label, on a row per thread, so the cores' idle gaps show.
#include <string>
#include <vector>

#include "runtime/exec/executor.h"

namespace kiln {

std::string chrome_trace_json(const Program& program, const std::vector<TraceEvent>& events);

}  // namespace kiln
