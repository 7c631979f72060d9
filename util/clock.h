#pragma once
// The two clocks kiln times things with: phases (steady, in ms) and entry stamps (unix seconds).
#include <chrono>

namespace kiln {

using Clock = std::chrono::steady_clock;

inline double ms_since(Clock::time_point t) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t).count();
}

inline double unix_now() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

}  // namespace kiln
