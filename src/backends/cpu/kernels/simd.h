// Which instruction-set level the CPU kernels run. Chosen once at first use: the best level this
// CPU supports (but avx512bf16 only where its bf16 dot product outruns f32 FMAs, measured; else
// avx512vnni), or the one named by the environment variable FERRY_SIMD
// (scalar|avx2|avxvnni|avx512|avx512vnni|avx512bf16|amx; each has every instruction of those
// before it, but avxvnni, avx2 with AVX-VNNI, and avx512, which has no VNNI).
// simd_level() in kernels.h reports the choice.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace ferry::kernels {

// The levels this machine can run, best first, e.g. {"amx", "avx512bf16", "avx512vnni", "avx512", "avxvnni",
// "avx2", "scalar"}.
std::vector<std::string> available_simd_levels();

// Forces a level for every later kernel call in the process (tests run each level this way).
// Throws Error(Usage) for an unknown name and Error(Unsupported) for a level this CPU lacks.
// Not meant to be called while kernels run on other threads.
void set_simd_level(std::string_view level);

}  // namespace ferry::kernels
