// Sets the process-wide q8_0 activation mode for a test and restores the one it found when the
// test ends.
#pragma once

#include "backends/cpu/kernels/kernels.h"

namespace ferry::test {

class Q8ActivationsGuard {
 public:
  Q8ActivationsGuard() : saved_(kernels::q8_0_activations()) {}
  explicit Q8ActivationsGuard(kernels::Q8Activations mode) : Q8ActivationsGuard() {
    kernels::set_q8_0_activations(mode);
  }
  ~Q8ActivationsGuard() { kernels::set_q8_0_activations(saved_); }
  Q8ActivationsGuard(const Q8ActivationsGuard&) = delete;
  Q8ActivationsGuard& operator=(const Q8ActivationsGuard&) = delete;

 private:
  kernels::Q8Activations saved_;
};

}  // namespace ferry::test
