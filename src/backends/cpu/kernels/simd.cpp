#include "backends/cpu/kernels/simd.h"

#include <fmt/ranges.h>

#include <atomic>
#include <cstdlib>

#include "backends/cpu/kernels/cpu/isa.h"
#include "backends/cpu/kernels/cpu_features.h"
#include "backends/cpu/kernels/kernels.h"
#include "backends/cpu/kernels/peak.h"
#include "core/error.h"
#include "core/thread_pool.h"

namespace ferry::kernels {

namespace {

constexpr const char* kLevelNames = "scalar, avx2, avxvnni, avx512, avx512vnni, avx512bf16 or amx";

// nullptr when the level is known but this CPU (or build) cannot run it.
const cpu::Isa* isa_named(std::string_view level) {
  if (level == "scalar") return &cpu::scalar_isa();
  const CpuFeatures& cpu = cpu_features();
  if (level == "avx2") return cpu.avx2 ? cpu::avx2_isa() : nullptr;
  if (level == "avxvnni") return cpu.avx_vnni ? cpu::avx_vnni_isa() : nullptr;
  if (level == "avx512") return cpu.avx512 ? cpu::avx512_isa() : nullptr;
  if (level == "avx512vnni") return cpu.avx512_vnni ? cpu::avx512_vnni_isa() : nullptr;
  if (level == "avx512bf16") return cpu.avx512_bf16 ? cpu::avx512_bf16_isa() : nullptr;
  if (level == "amx") return cpu.amx ? cpu::amx_isa() : nullptr;
  fail(ErrorKind::Usage, "unknown SIMD level '{}': use {}", level, kLevelNames);
}

const cpu::Isa* choose_isa(std::string_view level) {
  const cpu::Isa* isa = isa_named(level);
  if (!isa) {
    fail(ErrorKind::Unsupported, "SIMD level '{}' is not available on this CPU; available: {}", level,
         fmt::join(available_simd_levels(), ", "));
  }
  return isa;
}

// Whether bf16 weights run faster through vdpbf16ps than widened to f32 through FMAs, on the
// measured peaks of the two instructions on one core (about 10 ms). vdpbf16ps does twice the work
// of an FMA; AMD Zen 4 issues it at the FMA's rate, but the Sapphire Rapids we measured at half
// that (86 against 176 Gops), so there the f32 path is faster. The margin keeps a noisy
// measurement from flipping the choice, and with it the order of the sums, between runs.
bool bf16_dot_outruns_fma() {
  constexpr double kMargin = 1.25;
  constexpr double kSecondsPerPass = 0.002;
  ThreadPool one(1);
  const double bf16 = measure_peak_ops(PeakInstruction::Bf16Dot, "avx512bf16", one, kSecondsPerPass);
  const double fma = measure_peak_ops(PeakInstruction::FmaF32, "avx512bf16", one, kSecondsPerPass);
  return bf16 > kMargin * fma;
}

// The best level this CPU has, except that avx512bf16 is taken only where its dot product pays
// (bf16_dot_outruns_fma); elsewhere avx512vnni, the same level without it.
const cpu::Isa* default_isa() {
  if (const char* env = std::getenv("FERRY_SIMD"); env != nullptr && *env != '\0') {
    try {
      return choose_isa(env);
    } catch (const Error& e) {
      throw Error(e.kind(), std::string("FERRY_SIMD: ") + e.what());
    }
  }
  const std::string best = available_simd_levels().front();
  if (best == "avx512bf16" && !bf16_dot_outruns_fma()) return choose_isa("avx512vnni");
  return choose_isa(best);
}

std::atomic<const cpu::Isa*> g_isa{nullptr};

}  // namespace

std::vector<std::string> available_simd_levels() {
  std::vector<std::string> levels;
  for (const char* level : {"amx", "avx512bf16", "avx512vnni", "avx512"}) {
    if (isa_named(level)) levels.emplace_back(level);
  }
  // No CPU has AVX-VNNI and AVX-512 without AVX512-VNNI, so avxvnni ranks below every AVX-512 level.
  if (isa_named("avxvnni")) levels.emplace_back("avxvnni");
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
