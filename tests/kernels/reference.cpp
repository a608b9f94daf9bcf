#include "reference.h"

#include "kernels/kernels.h"
#include "kernels/simd.h"

namespace ferry::test {

SimdLevelGuard::SimdLevelGuard() : saved_(kernels::simd_level()) {}
SimdLevelGuard::~SimdLevelGuard() {
  kernels::set_simd_level(saved_);
}

}  // namespace ferry::test
