#pragma once

#include <cstdint>
#include <thread>

namespace ferry {

// One step of a spin-then-sleep wait. Spinning before sleeping keeps back-to-back small jobs from
// paying a wake-up each; yielding every 64th step lets a descheduled thread of ours run when
// another process shares the cores, instead of burning the time slice it needs.
inline void spin_relax(uint32_t step) {
  if ((step & 63) == 63) {
    std::this_thread::yield();
  } else {
#if defined(__x86_64__)
    __builtin_ia32_pause();
#endif
  }
}

}  // namespace ferry
