#pragma once
// A one-line progress display on stderr ("kiln: compiling kernels 3/17, 1.4 s") for work a
// person waits on. It draws only where the process enabled it (the CLI does, when stderr is
// a terminal; a library caller is never written to unasked), only once the work has run for
// a second, then ten times a second, and erases itself when the work ends, so a log or a pipe
// never sees it. Log lines and warnings erase it before they print; it is drawn again on
// the next tick.
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <string>
#include <thread>

namespace kiln {

// Turns the display on or off for this process (off by default).
void set_progress_display(bool on);
bool progress_display();
// Erases a drawn progress line (log.cpp calls it before each line it prints).
void erase_progress_line();

class Progress {
 public:
  // `what`: the work, as it reads after "kiln: " ("compiling kernels"); `total`: its steps.
  Progress(std::string what, int total);
  ~Progress();
  Progress(const Progress&) = delete;
  Progress& operator=(const Progress&) = delete;
  // One more step done (any thread).
  void step();

 private:
  void tick();
  std::string what_;
  int total_;
  int done_ = 0;
  bool stop_ = false;
  std::chrono::steady_clock::time_point start_;
  std::mutex mutex_;
  std::condition_variable wake_;
  std::thread ticker_;  // draws while the work runs; none when the display is off
};

}  // namespace kiln
