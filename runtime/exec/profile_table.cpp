#include "runtime/exec/profile_table.h"

#include <algorithm>
#include <cstdio>

namespace kiln {

std::string format_profile(const std::vector<StepTime>& steps, const RunProfile& runs) {
  std::string out;
  char line[512];
  const double n = std::max<int64_t>(runs.runs, 1);
  int64_t step_ns = 0;
  for (const StepTime& s : steps) step_ns += s.total_ns;
  const double wall_ms = static_cast<double>(runs.wall_ns) / n / 1e6;
  std::snprintf(line, sizeof line,
                "profile: %lld runs, %.3f ms per run (wall), %.3f ms per run in steps\n",
                static_cast<long long>(runs.runs), wall_ms, static_cast<double>(step_ns) / n / 1e6);
  out += line;
  if (!runs.thread_busy_ns.empty() && runs.wall_ns > 0) {
    out += "threads busy in thunks (share of wall time):";
    for (int64_t busy : runs.thread_busy_ns) {
      std::snprintf(line, sizeof line, " %.0f%%",
                    100.0 * static_cast<double>(busy) / static_cast<double>(runs.wall_ns));
      out += line;
    }
    out += "\n";
  }
  if (runs.runs > 0 && runs.steps > 0) {
    const double steps_per_run = static_cast<double>(runs.steps) / n;
    std::snprintf(line, sizeof line,
                  "engine: %.1f thunk calls per run, %.1f worker wake-ups per run", steps_per_run,
                  static_cast<double>(runs.wakeups) / n);
    out += line;
    if (runs.core_moves > 0) {
      // A worker found polling on its caller's core and moved: while it sat there it took
      // the caller's time instead of sharing the work.
      std::snprintf(line, sizeof line, ", %lld move%s of a worker off its caller's core",
                    static_cast<long long>(runs.core_moves), runs.core_moves == 1 ? "" : "s");
      out += line;
    }
    if (runs.idle_ns >= 0) {
      // Time in which no thread ran a thunk: what the engine costs between steps.
      const double idle_ns = static_cast<double>(runs.idle_ns) / n;
      std::snprintf(line, sizeof line, ", %.1f us per run with no thunk running (%.0f ns per call)",
                    idle_ns / 1e3, idle_ns / steps_per_run);
      out += line;
    }
    out += runs.stepwise_runs > 0 ? "; steps pushed one by one (branches)\n"
                                  : "; steps in order on the caller\n";
  }
  std::vector<const StepTime*> order;
  for (const StepTime& s : steps) order.push_back(&s);
  std::stable_sort(order.begin(), order.end(),
                   [](const StepTime* a, const StepTime* b) { return a->total_ns > b->total_ns; });
  std::snprintf(line, sizeof line, "%10s %7s %6s %10s %9s  %s\n", "ms/run", "share", "parts",
                "MB moved", "GFLOP/s", "step");
  out += line;
  for (const StepTime* s : order) {
    const double ms = static_cast<double>(s->total_ns) / n / 1e6;
    const double share = step_ns > 0 ? 100.0 * static_cast<double>(s->total_ns) / step_ns : 0;
    const double parts =
        s->calls > 0 && s->parts > 0 ? static_cast<double>(s->parts) / s->calls : 1;
    char gflops[32] = "-";
    if (s->flops > 0 && s->total_ns > 0 && s->calls > 0) {
      const double per_call_ns = static_cast<double>(s->total_ns) / static_cast<double>(s->calls);
      std::snprintf(gflops, sizeof gflops, "%.1f", s->flops / per_call_ns);
    }
    std::snprintf(line, sizeof line, "%10.3f %6.1f%% %6.1f %10.3f %9s  ", ms, share, parts,
                  s->bytes / 1e6, gflops);
    out += line + s->label + "\n";
  }
  return out;
}

}  // namespace kiln
