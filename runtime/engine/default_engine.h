#pragma once
// The process-wide engine that compiled functions run on (made on first use from
// KILN_ENGINE / KILN_ENGINE_WORKERS).
#include "runtime/engine/engine.h"

namespace kiln {

Engine& default_engine();

}  // namespace kiln
