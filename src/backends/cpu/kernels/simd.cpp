#include "backends/cpu/kernels/simd.h"

#include <fmt/ranges.h>

#include <atomic>
#include <cstdlib>

#if defined(__x86_64__)
#include <cpuid.h>
#endif

#include "backends/cpu/kernels/cpu/isa.h"
#include "backends/cpu/kernels/kernels.h"
#include "core/error.h"

namespace ferry::kernels {

namespace {

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
// F16C straight from CPUID (leaf 1, ECX bit 29): Clang's __builtin_cpu_supports does not know it.
// The OS side (saved AVX state) is covered by __builtin_cpu_supports("avx2").
bool cpu_has_f16c() {
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  return __get_cpuid(1, &eax, &ebx, &ecx, &edx) != 0 && (ecx & bit_F16C) != 0;
}
#endif

bool cpu_has_avx2() {
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
  return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && cpu_has_f16c();
#else
  return false;
#endif
}

bool cpu_has_avx512() {
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
  return cpu_has_avx2() && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
         __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq");
#else
  return false;
#endif
}

// nullptr when the level is known but this CPU (or build) cannot run it.
const cpu::Isa* isa_named(std::string_view level) {
  if (level == "scalar") return &cpu::scalar_isa();
  if (level == "avx2") return cpu_has_avx2() ? cpu::avx2_isa() : nullptr;
  if (level == "avx512") return cpu_has_avx512() ? cpu::avx512_isa() : nullptr;
  fail(ErrorKind::Usage, "unknown SIMD level '{}': use scalar, avx2 or avx512", level);
}

const cpu::Isa* choose_isa(std::string_view level) {
  const cpu::Isa* isa = isa_named(level);
  if (!isa) {
    fail(ErrorKind::Unsupported, "SIMD level '{}' is not available on this CPU; available: {}", level,
         fmt::join(available_simd_levels(), ", "));
  }
  return isa;
}

const cpu::Isa* default_isa() {
  if (const char* env = std::getenv("FERRY_SIMD"); env != nullptr && *env != '\0') {
    try {
      return choose_isa(env);
    } catch (const Error& e) {
      throw Error(e.kind(), std::string("FERRY_SIMD: ") + e.what());
    }
  }
  return choose_isa(available_simd_levels().front());
}

std::atomic<const cpu::Isa*> g_isa{nullptr};

}  // namespace

std::vector<std::string> available_simd_levels() {
  std::vector<std::string> levels;
  if (isa_named("avx512")) levels.emplace_back("avx512");
  if (isa_named("avx2")) levels.emplace_back("avx2");
  levels.emplace_back("scalar");
  return levels;
}

void set_simd_level(std::string_view level) {
  g_isa.store(choose_isa(level), std::memory_order_release);
}

const char* simd_level() {
  return cpu::active_isa().name;
}

namespace cpu {
const Isa& active_isa() {
  const Isa* isa = g_isa.load(std::memory_order_acquire);
  if (isa == nullptr) {
    const Isa* chosen = default_isa();
    // The first caller wins; a concurrent set_simd_level is not overwritten.
    g_isa.compare_exchange_strong(isa, chosen, std::memory_order_acq_rel);
    isa = g_isa.load(std::memory_order_acquire);
  }
  return *isa;
}
}  // namespace cpu

}  // namespace ferry::kernels
