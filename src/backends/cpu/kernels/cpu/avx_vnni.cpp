// The avxvnni level: avx2's table, with the packed quantized types summed by the VEX-encoded vpdpbusd
// (AVX-VNNI: Alder Lake and later Intel cores, Zen 5) in avx2_packed_blocks.h's loops, one
// instruction where avx2 takes vpmaddubsw and its sums, and batches of the k-quants from folded
// panels (avx_vnni_folded.cpp). Everything else is the avx2 level's.
#include <cstdint>
#include <cstring>

#include "backends/cpu/kernels/cpu/avx2_packed.h"
#include "backends/cpu/kernels/cpu/avx_vnni_folded.h"
#include "backends/cpu/kernels/cpu/isa.h"
#include "backends/cpu/kernels/cpu/packed_weights.h"
#include "backends/cpu/kernels/cpu/x86_intrinsics.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define FERRY_HAVE_AVX_VNNI 1

#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx2,fma,f16c,avxvnni"))), apply_to = function)
#else
#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c,avxvnni")
#endif

#include "backends/cpu/kernels/cpu/avx2_packed_blocks.h"

namespace ferry::kernels::cpu {
namespace {

// avx2_packed_blocks.h's products by vpdpbusd: acc + the products of unsigned u and signed s bytes,
// summed in fours.
struct BlocksAvxVnni {
  static constexpr bool kVnni = true;
  static __m256i dot(__m256i acc, __m256i u, __m256i s) { return _mm256_dpbusd_avx_epi32(acc, u, s); }
};

void matmul_packed_avx_vnni(const MatmulArgs& a, int64_t n_begin, int64_t n_end) {
  if (a.M >= kFolded256MinRows && a.xq != nullptr && matmul_folded_avx_vnni(a, n_begin, n_end)) return;
  if (packed_blocks_256::packed_quantized<BlocksAvxVnni>(a, n_begin, n_end)) return;
  matmul_packed_avx2(a, n_begin, n_end);
}

}  // namespace
}  // namespace ferry::kernels::cpu

#if defined(__clang__)
#pragma clang attribute pop
#else
#pragma GCC pop_options
#endif

#endif  // x86-64 with GCC or Clang

namespace ferry::kernels::cpu {
const Isa* avx_vnni_isa() {
#ifdef FERRY_HAVE_AVX_VNNI
  static const Isa isa = [] {
    Isa level = *avx2_isa();
    level.name = "avxvnni";
    level.matmul_packed = matmul_packed_avx_vnni;
    level.repacks = avx2_packed_type;
    level.packed_types = avx2_packed_type;
    return level;
  }();
  return &isa;
#else
  return nullptr;
#endif
}
}  // namespace ferry::kernels::cpu
