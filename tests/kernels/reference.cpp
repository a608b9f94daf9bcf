#include "reference.h"

#include "backends/cpu/kernels/kernels.h"
#include "backends/cpu/kernels/simd.h"

namespace ferry::test {

SimdLevelGuard::SimdLevelGuard() : saved_(kernels::simd_level()) {}
SimdLevelGuard::~SimdLevelGuard() {
  kernels::set_simd_level(saved_);
}

}  // namespace ferry::test
