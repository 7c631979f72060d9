#pragma once
// Splits one piece of work into parts run by the engine's CPU workers and the caller. The
// caller and helpers claim parts until none are left, and the caller then waits only for
// parts already running, so it never waits on a queued function: safe from inside a pushed
// function, and no slower than running alone when every worker is busy.
#include <functional>
#include <string>

#include "runtime/engine/engine.h"

namespace kiln {

// Runs body(part) for every part in [0, n_parts) and returns when all have finished;
// rethrows the first exception a part threw (after every part has finished).
void parallel_for(Engine& engine, int n_parts, const std::function<void(int)>& body,
                  const std::string& name);

}  // namespace kiln
