#include "kernels/cpu/isa.h"

namespace ferry::kernels::cpu {
const Isa* avx2_isa() {
  return nullptr;
}
}  // namespace ferry::kernels::cpu
