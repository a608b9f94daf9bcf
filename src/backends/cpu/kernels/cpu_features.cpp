#include "backends/cpu/kernels/cpu_features.h"

#if defined(__x86_64__)
#include <cpuid.h>
#endif
#if defined(__linux__)
#include <sys/syscall.h>
#include <unistd.h>
#endif

namespace ferry::kernels {

namespace {

// Linux hands out the 8 KiB of AMX tile state only to a process that asks (kernel 5.16+):
// arch_prctl(ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA). Refused (an older kernel, a sandbox), the
// tiles would fault: the level is then not offered.
bool os_grants_amx() {
#if defined(__linux__) && defined(__x86_64__)
  constexpr long kArchReqXcompPerm = 0x1023;
  constexpr long kXfeatureXtiledata = 18;
  return syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) == 0;
#else
  return false;
#endif
}

CpuFeatures detect() {
  CpuFeatures f;
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  // F16C from leaf 1 (ECX bit 29): Clang's __builtin_cpu_supports does not know it. The OS side
  // (saved AVX and AVX-512 state) is covered by __builtin_cpu_supports.
  const bool f16c = __get_cpuid(1, &eax, &ebx, &ecx, &edx) != 0 && (ecx & bit_F16C) != 0;
  const unsigned base_family = (eax >> 8) & 0xF;
  f.family = base_family == 0xF ? base_family + ((eax >> 20) & 0xFF) : base_family;
  __builtin_cpu_init();  // in case this runs before libgcc's own constructor has
  f.intel = __builtin_cpu_is("intel");
  f.amd = __builtin_cpu_is("amd");
  f.avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && f16c;
  f.avx512 = f.avx2 && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
             __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq");
  // The dot-product extensions straight from leaf 7, which not every compiler's
  // __builtin_cpu_supports knows (Clang 14 has no "avxvnni"): subleaf 0 ECX bit 11 AVX512_VNNI;
  // subleaf 1 EAX bit 5 AVX512_BF16, bit 4 AVX-VNNI.
  // AMX from subleaf 0 EDX: bit 22 AMX-BF16, 24 AMX-TILE, 25 AMX-INT8.
  bool amx_cpu = false;
  if (__get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx) != 0) {
    f.avx512_vnni = f.avx512 && (ecx & (1u << 11)) != 0;
    constexpr unsigned kAmx = (1u << 22) | (1u << 24) | (1u << 25);
    amx_cpu = (edx & kAmx) == kAmx;
  }
  if (__get_cpuid_count(7, 1, &eax, &ebx, &ecx, &edx) != 0) {
    f.avx512_bf16 = f.avx512_vnni && (eax & (1u << 5)) != 0;
    f.avx_vnni = f.avx2 && (eax & (1u << 4)) != 0;
  }
  f.amx = f.avx512_bf16 && amx_cpu && os_grants_amx();
#endif
  return f;
}

}  // namespace

const CpuFeatures& cpu_features() {
  static const CpuFeatures features = detect();
  return features;
}

}  // namespace ferry::kernels
