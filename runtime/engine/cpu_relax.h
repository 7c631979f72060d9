#pragma once
// One pause in a spin-wait: tells the core that this thread polls (it yields pipeline
// resources to a sibling hyperthread and saves power) without giving up its time slice as
// sched_yield would.
#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace kiln {

inline void cpu_relax() {
#if defined(__x86_64__)
  _mm_pause();
#elif defined(__aarch64__)
  __asm__ __volatile__("yield");
#endif
}

}  // namespace kiln
