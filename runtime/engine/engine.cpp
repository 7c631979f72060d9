#include "runtime/engine/engine.h"

#include <cstdlib>
#include <string>
#include <thread>

#include "runtime/engine/naive_engine.h"
#include "runtime/engine/threaded_engine.h"
#include "util/error.h"

namespace kiln {

std::unique_ptr<Engine> make_engine(EngineKind kind, int cpu_workers) {
  if (kind == EngineKind::kNaive) return std::make_unique<NaiveEngine>();
  if (cpu_workers <= 0) {
    if (const char* env = std::getenv("KILN_ENGINE_WORKERS"); env && *env) {
      char* end = nullptr;
      long n = std::strtol(env, &end, 10);
      if (*end != '\0' || n < 1 || n > 1024) {
        throw UserError(std::string("KILN_ENGINE_WORKERS: '") + env +
                        "' is not a worker count (1 to 1024)");
      }
      cpu_workers = static_cast<int>(n);
    } else {
      cpu_workers = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
    }
  }
  return std::make_unique<ThreadedEngine>(cpu_workers);
}

std::unique_ptr<Engine> make_engine(int cpu_workers) {
  const char* env = std::getenv("KILN_ENGINE");
  std::string kind = env ? env : "";
  if (kind.empty() || kind == "threaded") return make_engine(EngineKind::kThreaded, cpu_workers);
  if (kind == "naive") return make_engine(EngineKind::kNaive, cpu_workers);
  throw UserError("KILN_ENGINE: '" + kind + "' is not an engine (threaded or naive)");
}

}  // namespace kiln
