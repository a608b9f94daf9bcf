// What this x86 CPU (and its OS: saved vector state) can run, read once from CPUID. The SIMD level
// choice (simd.cpp) and the peak probes (peak.cpp) both ask here. All false on other machines.
#pragma once

namespace ferry::kernels {

struct CpuFeatures {
  bool avx2 = false;         // AVX2 with FMA and F16C
  bool avx512 = false;       // AVX-512 F, BW, VL and DQ, with everything avx2 has
  bool avx512_vnni = false;  // and VNNI
  bool avx512_bf16 = false;  // and BF16
  bool avx_vnni = false;     // AVX2 with the VEX-encoded VNNI (Alder Lake, Sapphire Rapids, Zen 5)
  // avx512_bf16 and AMX tiles with int8 and bf16 products, which the OS let this process use
  // (Linux asks for that: arch_prctl ARCH_REQ_XCOMP_PERM, requested here).
  bool amx = false;
  // Who made it, and its family as CPUID leaf 1 gives it (base + extended: AMD Zen 3 and 4 are
  // 0x19, Zen 5 0x1A): choices that depend on the microarchitecture, not on an instruction set
  // (matmul.cpp's gemv prefetch).
  bool intel = false;
  bool amd = false;
  unsigned family = 0;
};

const CpuFeatures& cpu_features();

}  // namespace ferry::kernels
