#include "util/progress.h"

#include <atomic>
#include <cstdio>

#include "util/escape.h"

namespace kiln {

namespace {

std::atomic<bool> g_on{false};
std::mutex g_line_mutex;  // one line on the terminal, whoever draws or erases it
bool g_drawn = false;

// Work shorter than a second never draws (DESIGN: progress for work over a second): a cache
// hit or a small model stays silent.
constexpr auto kQuiet = std::chrono::milliseconds(1000);
constexpr auto kEvery = std::chrono::milliseconds(100);

}  // namespace

void set_progress_display(bool on) { g_on.store(on); }
bool progress_display() { return g_on.load(); }

void erase_progress_line() {
  std::lock_guard lock(g_line_mutex);
  if (!g_drawn) return;
  std::fputs("\r\033[K", stderr);
  std::fflush(stderr);
  g_drawn = false;
}

Progress::Progress(std::string what, int total)
    : what_(terminal_text(what)), total_(total), start_(std::chrono::steady_clock::now()) {
  if (g_on.load() && total > 0) ticker_ = std::thread([this] { tick(); });
}

Progress::~Progress() {
  if (!ticker_.joinable()) return;
  {
    std::lock_guard lock(mutex_);
    stop_ = true;
  }
  wake_.notify_all();
  ticker_.join();
  erase_progress_line();
}

void Progress::step() {
  std::lock_guard lock(mutex_);
  ++done_;
}

void Progress::tick() {
  std::unique_lock lock(mutex_);
  if (wake_.wait_until(lock, start_ + kQuiet, [&] { return stop_; })) return;
  for (;;) {
    const double s =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
    const int done = done_;
    lock.unlock();
    {
      std::lock_guard line(g_line_mutex);
      std::fprintf(stderr, "\r\033[Kkiln: %s %d/%d, %.1f s", what_.c_str(), done, total_, s);
      std::fflush(stderr);
      g_drawn = true;
    }
    lock.lock();
    if (wake_.wait_for(lock, kEvery, [&] { return stop_; })) return;
  }
}

}  // namespace kiln
