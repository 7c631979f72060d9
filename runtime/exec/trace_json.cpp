#include "runtime/exec/trace_json.h"

#include <nlohmann/json.hpp>

#include "util/json_text.h"

namespace kiln {

std::string chrome_trace_json(const Program& program, const std::vector<TraceEvent>& events) {
  nlohmann::json list = nlohmann::json::array();
  for (const TraceEvent& e : events) {
    const bool known = e.step >= 0 && static_cast<size_t>(e.step) < program.steps.size();
    list.push_back({{"name", known ? program.steps[static_cast<size_t>(e.step)].label
                                   : "step " + std::to_string(e.step)},
                    {"cat", "thunk"},
                    {"ph", "X"},
                    {"pid", 1},
                    {"tid", e.thread},
                    // The format's times are microseconds.
                    {"ts", static_cast<double>(e.start_ns) / 1e3},
                    {"dur", static_cast<double>(e.end_ns - e.start_ns) / 1e3},
                    {"args", {{"step", e.step}, {"part", e.part}, {"parts", e.parts}}}});
  }
  return json_text(nlohmann::json{{"traceEvents", list}, {"displayTimeUnit", "ms"}}, 1) + "\n";
}

}  // namespace kiln
