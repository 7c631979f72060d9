#include "util/log.h"

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <string>

#include "util/escape.h"
#include "util/progress.h"

namespace kiln {
namespace {
std::atomic<int> g_level{-1};
std::mutex g_out_mutex;
}  // namespace

int debug_level() {
  int level = g_level.load(std::memory_order_relaxed);
  if (level < 0) {
    const char* env = std::getenv("KILN_DEBUG");
    level = env ? std::atoi(env) : 0;
    if (level < 0) level = 0;
    g_level.store(level, std::memory_order_relaxed);
  }
  return level;
}

void set_debug_level(int level) { g_level.store(level < 0 ? 0 : level); }

// Messages carry names from models, cache entries and servers: terminal_text keeps them from
// moving the cursor or hiding what follows.
void log_line(std::string_view message) {
  const std::string text = terminal_text(message);
  std::lock_guard lock(g_out_mutex);
  erase_progress_line();
  std::fprintf(stderr, "kiln: %s\n", text.c_str());
}

void warn(std::string_view message) {
  const std::string text = terminal_text(message);
  std::lock_guard lock(g_out_mutex);
  erase_progress_line();
  std::fprintf(stderr, "kiln: warning: %s\n", text.c_str());
}

}  // namespace kiln
