// The compute-peak probes: one loop per instruction and vector width, each compiled for exactly the
// features it needs (a function-level target attribute) and run only where the CPU has them.
#include "backends/cpu/kernels/peak.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define FERRY_PEAK_X86 1
#include "backends/cpu/kernels/cpu/x86_intrinsics.h"
#endif

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <iterator>
#include <vector>

#include "backends/cpu/kernels/cpu/amx_tiles.h"
#include "backends/cpu/kernels/cpu/quant_blocks.h"
#include "backends/cpu/kernels/cpu_features.h"
#include "core/error.h"

namespace ferry::kernels {

namespace {

// Independent accumulators per probe loop: enough to cover latency x throughput of every
// instruction here on current x86 cores (at most about 5 cycles x 2 per cycle), few enough that
// the 256-bit loops keep them, their sources and a temporary in AVX2's 16 registers.
constexpr int kAccumulators = 12;
constexpr int kPasses = 5;

// A SIMD level by name: its vector width (0: no vector instructions) and the dot-product
// instructions its matmul is built on.
struct Level {
  std::string_view name;
  int bits;
  bool vnni;  // q8_0, q4_0, the other blocks of 32 and iq4_xs use vpdpbusd
  bool bf16;  // bf16 weights use vdpbf16ps
  bool amx;   // prefill of bf16 and every block type uses AMX tiles
  // every repacked block type uses vpdpbusd, the rest as the level below
  bool packed_vnni = false;
};
constexpr Level kLevels[] = {
    {"scalar", 0, false, false, false},
    {"avx2", 256, false, false, false},
    {"avxvnni", 256, false, false, false, true},
    {"avx512", 512, false, false, false},
    {"avx512vnni", 512, true, false, false},
    {"avx512bf16", 512, true, true, false},
    {"amx", 512, true, true, true},
};

const Level* find_level(std::string_view name) {
  for (const Level& level : kLevels) {
    if (level.name == name) return &level;
  }
  return nullptr;
}

// One probe loop: `iterations` times, one instruction (or idiom) into each of kAccumulators
// accumulators of 32-bit lanes. Returns the sum of every lane: the accumulators start at 1, 2, ...,
// kAccumulators in every lane, and the products are of 1 and 0 (x86 multipliers take the same time
// for any operands; 0 is not subnormal), so the sum is `lanes * kAccumulators * (kAccumulators + 1) / 2`
// exactly, a check that keeps the loop from being optimised away (the compiler cannot see through
// the asm statements that do the work).
using ProbeFn = double (*)(int64_t iterations);

double expected_checksum(int lanes) {
  return static_cast<double>(lanes) * kAccumulators * (kAccumulators + 1) / 2;
}

// The AMX probes' accumulators are kAmxSums tiles of 16 x 16 lanes that start at 1, 2, ...
constexpr int kAmxSums = 4;
constexpr double kAmxChecksum = 256.0 * kAmxSums * (kAmxSums + 1) / 2;

bool is_amx(PeakInstruction instruction) {
  return instruction == PeakInstruction::AmxInt8 || instruction == PeakInstruction::AmxBf16;
}

#if defined(FERRY_PEAK_X86)

// Operations per instruction, a multiply-add counting 2 (the products the instruction multiplies
// and adds into its accumulators, x 2), per 512 bits; half at 256 bits:
// - vfmadd231ps: 16 f32 lanes, one multiply-add each: 16 x 2 = 32.
// - vpmaddwd (+ vpaddd): 32 int16 products, added in pairs and then into 16 int32 accumulators:
//   32 x 2 = 64. The vpaddd is the second add of each pair's sum, counted in the 2 per product.
// - vpmaddubsw (+ vpmaddwd by ones + vpaddd): 64 u8 x s8 products, added in pairs, fours and then
//   into the accumulators: 64 x 2 = 128 per vpmaddubsw.
// - vpdpbusd: 16 int32 lanes, each adding 4 u8 x s8 products: 64 x 2 = 128.
// - vdpbf16ps: 16 f32 lanes, each adding 2 bf16 products: 32 x 2 = 64.
// - tdpbssd: 16 x 16 int32 sums, each adding 64 s8 products: 16384 x 2 = 32768.
// - tdpbf16ps: 16 x 16 f32 sums, each adding 32 bf16 products: 8192 x 2 = 16384.
constexpr int kOps512[] = {32, 64, 128, 128, 64, 32768, 16384};
static_assert(std::size(kOps512) == static_cast<size_t>(PeakInstruction::Count));

// Each loop step is one asm statement per accumulator (AT&T operand order: sources, then the
// accumulator), so the instructions are exactly those counted above: the compiler can neither
// share a product between accumulators nor hoist it out of the loop, nor pick other instructions.
// The temporary of a multi-instruction idiom is an early-clobbered output. At 256 bits, 12
// accumulators, two sources, the ones and a temporary are the 16 registers AVX2 has. Every loop
// over the accumulators is unrolled, the first and last included: GCC keeps an array in
// registers only where every index is a constant, else each step loads and stores it.

// 512-bit probes.

__attribute__((target("avx512f"))) double fma_f32_512(int64_t iterations) {
  __m512 acc[kAccumulators];
#pragma GCC unroll 16
  for (int i = 0; i < kAccumulators; ++i) acc[i] = _mm512_set1_ps(static_cast<float>(i + 1));
  const __m512 a = _mm512_set1_ps(1.0f);
  const __m512 b = _mm512_setzero_ps();
  for (int64_t it = 0; it < iterations; ++it) {
#pragma GCC unroll 16
    for (int i = 0; i < kAccumulators; ++i) {
      __asm__("vfmadd231ps %[b], %[a], %[acc]" : [acc] "+v"(acc[i]) : [a] "v"(a), [b] "v"(b));
    }
  }
  double sum = 0.0;
#pragma GCC unroll 16
  for (int i = 0; i < kAccumulators; ++i) sum += static_cast<double>(_mm512_reduce_add_ps(acc[i]));
  return sum;
}

__attribute__((target("avx512f,avx512bw"))) double int16_madd_512(int64_t iterations) {
  __m512i acc[kAccumulators];
#pragma GCC unroll 16
  for (int i = 0; i < kAccumulators; ++i) acc[i] = _mm512_set1_epi32(i + 1);
  const __m512i a = _mm512_set1_epi16(1);
  const __m512i b = _mm512_setzero_si512();
  for (int64_t it = 0; it < iterations; ++it) {
#pragma GCC unroll 16
    for (int i = 0; i < kAccumulators; ++i) {
      __m512i t;
      __asm__("vpmaddwd %[b], %[a], %[t]\n\tvpaddd %[t], %[acc], %[acc]"
              : [acc] "+v"(acc[i]), [t] "=&v"(t)
              : [a] "v"(a), [b] "v"(b));
    }
  }
  double sum = 0.0;
#pragma GCC unroll 16
  for (int i = 0; i < kAccumulators; ++i) sum += _mm512_reduce_add_epi32(acc[i]);
  return sum;
}

__attribute__((target("avx512f,avx512bw"))) double int8_maddubs_512(int64_t iterations) {
  __m512i acc[kAccumulators];
#pragma GCC unroll 16
  for (int i = 0; i < kAccumulators; ++i) acc[i] = _mm512_set1_epi32(i + 1);
  const __m512i a = _mm512_set1_epi8(1);
  const __m512i b = _mm512_setzero_si512();
  const __m512i ones = _mm512_set1_epi16(1);
  for (int64_t it = 0; it < iterations; ++it) {
#pragma GCC unroll 16
    for (int i = 0; i < kAccumulators; ++i) {
      __m512i t;
      __asm__("vpmaddubsw %[b], %[a], %[t]\n\tvpmaddwd %[ones], %[t], %[t]\n\tvpaddd %[t], %[acc], %[acc]"
              : [acc] "+v"(acc[i]), [t] "=&v"(t)
              : [a] "v"(a), [b] "v"(b), [ones] "v"(ones));
    }
  }
  double sum = 0.0;
#pragma GCC unroll 16
  for (int i = 0; i < kAccumulators; ++i) sum += _mm512_reduce_add_epi32(acc[i]);
  return sum;
}

__attribute__((target("avx512f,avx512vnni"))) double vnni_512(int64_t iterations) {
  __m512i acc[kAccumulators];
#pragma GCC unroll 16
  for (int i = 0; i < kAccumulators; ++i) acc[i] = _mm512_set1_epi32(i + 1);
  const __m512i a = _mm512_set1_epi8(1);
  const __m512i b = _mm512_setzero_si512();
  for (int64_t it = 0; it < iterations; ++it) {
#pragma GCC unroll 16
    for (int i = 0; i < kAccumulators; ++i) {
      __asm__("vpdpbusd %[b], %[a], %[acc]" : [acc] "+v"(acc[i]) : [a] "v"(a), [b] "v"(b));
    }
  }
  double sum = 0.0;
#pragma GCC unroll 16
  for (int i = 0; i < kAccumulators; ++i) sum += _mm512_reduce_add_epi32(acc[i]);
  return sum;
}

__attribute__((target("avx512f,avx512bf16"))) double bf16_dot_512(int64_t iterations) {
  __m512 acc[kAccumulators];
#pragma GCC unroll 16
  for (int i = 0; i < kAccumulators; ++i) acc[i] = _mm512_set1_ps(static_cast<float>(i + 1));
  const __m512bh a = _mm512_cvtne2ps_pbh(_mm512_set1_ps(1.0f), _mm512_set1_ps(1.0f));
  const __m512bh b = _mm512_cvtne2ps_pbh(_mm512_setzero_ps(), _mm512_setzero_ps());
  for (int64_t it = 0; it < iterations; ++it) {
#pragma GCC unroll 16
    for (int i = 0; i < kAccumulators; ++i) {
      __asm__("vdpbf16ps %[b], %[a], %[acc]" : [acc] "+v"(acc[i]) : [a] "v"(a), [b] "v"(b));
    }
  }
  double sum = 0.0;
#pragma GCC unroll 16
  for (int i = 0; i < kAccumulators; ++i) sum += static_cast<double>(_mm512_reduce_add_ps(acc[i]));
  return sum;
}

// 256-bit probes. Lanes are summed through memory: AVX2 has no reduce intrinsics.

__attribute__((target("avx2"))) inline double sum_lanes_256(__m256 v) {
  alignas(32) float lanes[8];
  _mm256_store_ps(lanes, v);
  double sum = 0.0;
  for (float x : lanes) sum += static_cast<double>(x);
  return sum;
}

__attribute__((target("avx2"))) inline double sum_lanes_256(__m256i v) {
  alignas(32) int32_t lanes[8];
  _mm256_store_si256(reinterpret_cast<__m256i*>(lanes), v);
  double sum = 0.0;
  for (int32_t x : lanes) sum += x;
  return sum;
}

__attribute__((target("avx2,fma"))) double fma_f32_256(int64_t iterations) {
  __m256 acc[kAccumulators];
#pragma GCC unroll 16
  for (int i = 0; i < kAccumulators; ++i) acc[i] = _mm256_set1_ps(static_cast<float>(i + 1));
  const __m256 a = _mm256_set1_ps(1.0f);
  const __m256 b = _mm256_setzero_ps();
  for (int64_t it = 0; it < iterations; ++it) {
#pragma GCC unroll 16
    for (int i = 0; i < kAccumulators; ++i) {
      __asm__("vfmadd231ps %[b], %[a], %[acc]" : [acc] "+x"(acc[i]) : [a] "x"(a), [b] "x"(b));
    }
  }
  double sum = 0.0;
#pragma GCC unroll 16
  for (int i = 0; i < kAccumulators; ++i) sum += sum_lanes_256(acc[i]);
  return sum;
}

__attribute__((target("avx2"))) double int16_madd_256(int64_t iterations) {
  __m256i acc[kAccumulators];
#pragma GCC unroll 16
  for (int i = 0; i < kAccumulators; ++i) acc[i] = _mm256_set1_epi32(i + 1);
  const __m256i a = _mm256_set1_epi16(1);
  const __m256i b = _mm256_setzero_si256();
  for (int64_t it = 0; it < iterations; ++it) {
#pragma GCC unroll 16
    for (int i = 0; i < kAccumulators; ++i) {
      __m256i t;
      __asm__("vpmaddwd %[b], %[a], %[t]\n\tvpaddd %[t], %[acc], %[acc]"
              : [acc] "+x"(acc[i]), [t] "=&x"(t)
              : [a] "x"(a), [b] "x"(b));
    }
  }
  double sum = 0.0;
#pragma GCC unroll 16
  for (int i = 0; i < kAccumulators; ++i) sum += sum_lanes_256(acc[i]);
  return sum;
}

__attribute__((target("avx2"))) double int8_maddubs_256(int64_t iterations) {
  __m256i acc[kAccumulators];
#pragma GCC unroll 16
  for (int i = 0; i < kAccumulators; ++i) acc[i] = _mm256_set1_epi32(i + 1);
  const __m256i a = _mm256_set1_epi8(1);
  const __m256i b = _mm256_setzero_si256();
  const __m256i ones = _mm256_set1_epi16(1);
  for (int64_t it = 0; it < iterations; ++it) {
#pragma GCC unroll 16
    for (int i = 0; i < kAccumulators; ++i) {
      __m256i t;
      __asm__("vpmaddubsw %[b], %[a], %[t]\n\tvpmaddwd %[ones], %[t], %[t]\n\tvpaddd %[t], %[acc], %[acc]"
              : [acc] "+x"(acc[i]), [t] "=&x"(t)
              : [a] "x"(a), [b] "x"(b), [ones] "x"(ones));
    }
  }
  double sum = 0.0;
#pragma GCC unroll 16
  for (int i = 0; i < kAccumulators; ++i) sum += sum_lanes_256(acc[i]);
  return sum;
}

// AVX-VNNI, the VEX-encoded 256-bit vpdpbusd of CPUs without AVX-512 (Alder Lake and later): the
// assembler needs the {vex} prefix to pick that encoding.
__attribute__((target("avx2,avxvnni"))) double vnni_256_avx(int64_t iterations) {
  __m256i acc[kAccumulators];
#pragma GCC unroll 16
  for (int i = 0; i < kAccumulators; ++i) acc[i] = _mm256_set1_epi32(i + 1);
  const __m256i a = _mm256_set1_epi8(1);
  const __m256i b = _mm256_setzero_si256();
  for (int64_t it = 0; it < iterations; ++it) {
#pragma GCC unroll 16
    for (int i = 0; i < kAccumulators; ++i) {
      __asm__("%{vex%} vpdpbusd %[b], %[a], %[acc]" : [acc] "+x"(acc[i]) : [a] "x"(a), [b] "x"(b));
    }
  }
  double sum = 0.0;
#pragma GCC unroll 16
  for (int i = 0; i < kAccumulators; ++i) sum += sum_lanes_256(acc[i]);
  return sum;
}

// AVX512-VNNI + VL, the EVEX-encoded 256-bit vpdpbusd, for CPUs with AVX-512 VNNI but not AVX-VNNI
// (Cascade Lake, Ice Lake, Zen 4).
__attribute__((target("avx2,avx512f,avx512vl,avx512vnni"))) double vnni_256_evex(int64_t iterations) {
  __m256i acc[kAccumulators];
#pragma GCC unroll 16
  for (int i = 0; i < kAccumulators; ++i) acc[i] = _mm256_set1_epi32(i + 1);
  const __m256i a = _mm256_set1_epi8(1);
  const __m256i b = _mm256_setzero_si256();
  for (int64_t it = 0; it < iterations; ++it) {
#pragma GCC unroll 16
    for (int i = 0; i < kAccumulators; ++i) {
      __asm__("%{evex%} vpdpbusd %[b], %[a], %[acc]" : [acc] "+v"(acc[i]) : [a] "v"(a), [b] "v"(b));
    }
  }
  double sum = 0.0;
#pragma GCC unroll 16
  for (int i = 0; i < kAccumulators; ++i) sum += sum_lanes_256(acc[i]);
  return sum;
}

__attribute__((target("avx2,avx512f,avx512vl,avx512bf16"))) double bf16_dot_256(int64_t iterations) {
  __m256 acc[kAccumulators];
#pragma GCC unroll 16
  for (int i = 0; i < kAccumulators; ++i) acc[i] = _mm256_set1_ps(static_cast<float>(i + 1));
  const __m256bh a = _mm256_cvtne2ps_pbh(_mm256_set1_ps(1.0f), _mm256_set1_ps(1.0f));
  const __m256bh b = _mm256_cvtne2ps_pbh(_mm256_setzero_ps(), _mm256_setzero_ps());
  for (int64_t it = 0; it < iterations; ++it) {
#pragma GCC unroll 16
    for (int i = 0; i < kAccumulators; ++i) {
      __asm__("vdpbf16ps %[b], %[a], %[acc]" : [acc] "+v"(acc[i]) : [a] "v"(a), [b] "v"(b));
    }
  }
  double sum = 0.0;
#pragma GCC unroll 16
  for (int i = 0; i < kAccumulators; ++i) sum += sum_lanes_256(acc[i]);
  return sum;
}

// AMX: kAccumulators tile products per iteration, into kAmxSums sum tiles in turn (independent
// chains), from two source tiles of zeros. Palette 1, every tile 16 rows of 64 bytes. The probe
// loads its own tile configuration and releases the tiles after it (the kernels load theirs
// whenever the current one is not theirs: cpu/amx.cpp).
constexpr cpu::AmxTileConfig kProbeTiles =
    cpu::AmxTileConfig{}.tile(0, 16, 64).tile(1, 16, 64).tile(2, 16, 64).tile(3, 16, 64).tile(4, 16, 64).tile(5, 16,
                                                                                                              64);

template <bool kBf16>
__attribute__((target("amx-tile,amx-int8,amx-bf16"))) double amx_probe(int64_t iterations) {
  alignas(64) static const uint8_t zeros[16 * 64] = {};
  alignas(64) int32_t sums[kAmxSums][16 * 16];
  for (int t = 0; t < kAmxSums; ++t) {
    for (int32_t& v : sums[t]) v = kBf16 ? 0 : t + 1;
    if constexpr (kBf16) {
      for (int32_t& v : sums[t]) {
        const float f = static_cast<float>(t + 1);
        std::memcpy(&v, &f, 4);
      }
    }
  }
  _tile_loadconfig(&kProbeTiles);
  _tile_loadd(0, sums[0], 64);
  _tile_loadd(1, sums[1], 64);
  _tile_loadd(2, sums[2], 64);
  _tile_loadd(3, sums[3], 64);
  _tile_loadd(4, zeros, 64);
  _tile_loadd(5, zeros, 64);
  static_assert(kAccumulators % kAmxSums == 0, "whole rounds over the sum tiles");
  for (int64_t it = 0; it < iterations; ++it) {
    for (int round = 0; round < kAccumulators / kAmxSums; ++round) {
      if constexpr (kBf16) {
        _tile_dpbf16ps(0, 4, 5);
        _tile_dpbf16ps(1, 4, 5);
        _tile_dpbf16ps(2, 4, 5);
        _tile_dpbf16ps(3, 4, 5);
      } else {
        _tile_dpbssd(0, 4, 5);
        _tile_dpbssd(1, 4, 5);
        _tile_dpbssd(2, 4, 5);
        _tile_dpbssd(3, 4, 5);
      }
    }
  }
  _tile_stored(0, sums[0], 64);
  _tile_stored(1, sums[1], 64);
  _tile_stored(2, sums[2], 64);
  _tile_stored(3, sums[3], 64);
  _tile_release();
  double sum = 0.0;
  for (const auto& tile : sums) {
    for (int32_t v : tile) {
      float f;
      std::memcpy(&f, &v, 4);
      sum += kBf16 ? static_cast<double>(f) : v;
    }
  }
  return sum;
}

// The probe for `instruction` at `bits`, or nullptr where this CPU lacks it.
ProbeFn probe_for(PeakInstruction instruction, int bits) {
  const CpuFeatures& f = cpu_features();
  const bool wide = bits == 512;
  switch (instruction) {
    case PeakInstruction::FmaF32:
      if (wide) return f.avx512 ? fma_f32_512 : nullptr;
      return f.avx2 ? fma_f32_256 : nullptr;
    case PeakInstruction::Int16Madd:
      if (wide) return f.avx512 ? int16_madd_512 : nullptr;
      return f.avx2 ? int16_madd_256 : nullptr;
    case PeakInstruction::Int8Maddubs:
      if (wide) return f.avx512 ? int8_maddubs_512 : nullptr;
      return f.avx2 ? int8_maddubs_256 : nullptr;
    case PeakInstruction::Vnni:
      if (wide) return f.avx512_vnni ? vnni_512 : nullptr;
      if (f.avx_vnni) return vnni_256_avx;
      return f.avx512_vnni ? vnni_256_evex : nullptr;  // EVEX-encoded at 256 bits (AVX512VL)
    case PeakInstruction::Bf16Dot:
      if (wide) return f.avx512_bf16 ? bf16_dot_512 : nullptr;
      return f.avx512_bf16 ? bf16_dot_256 : nullptr;
    case PeakInstruction::AmxInt8:
      return wide && f.amx ? amx_probe<false> : nullptr;
    case PeakInstruction::AmxBf16:
      return wide && f.amx ? amx_probe<true> : nullptr;
    case PeakInstruction::Count:
      break;
  }
  return nullptr;
}

int ops_per_instruction(PeakInstruction instruction, int bits) {
  return kOps512[static_cast<size_t>(instruction)] * bits / 512;
}

#else  // not x86: no probes

ProbeFn probe_for(PeakInstruction, int) {
  return nullptr;
}

int ops_per_instruction(PeakInstruction, int) {
  return 0;
}

#endif

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace

const char* peak_instruction_name(PeakInstruction instruction) {
  static constexpr const char* kNames[] = {"fma_f32",  "int16_madd", "int8_maddubs", "vnni_dot",
                                           "bf16_dot", "amx_int8",   "amx_bf16"};
  static_assert(std::size(kNames) == static_cast<size_t>(PeakInstruction::Count));
  const auto i = static_cast<size_t>(instruction);
  return i < std::size(kNames) ? kNames[i] : "unknown";
}

double measure_peak_ops(PeakInstruction instruction, std::string_view simd_level, ThreadPool& pool,
                        double seconds_per_pass) {
  if (static_cast<unsigned>(instruction) >= static_cast<unsigned>(PeakInstruction::Count)) {
    fail(ErrorKind::Usage, "measure_peak_ops: no instruction numbered {}", static_cast<int>(instruction));
  }
  if (!(seconds_per_pass > 0.0)) {
    fail(ErrorKind::Usage, "measure_peak_ops: seconds_per_pass must be positive, not {}", seconds_per_pass);
  }
  const Level* level = find_level(simd_level);
  if (level == nullptr) {
    fail(ErrorKind::Usage,
         "measure_peak_ops: unknown SIMD level '{}': use scalar, avx2, avxvnni, avx512, avx512vnni, avx512bf16 or "
         "amx",
         simd_level);
  }
  if (level->bits == 0) return 0.0;
  const ProbeFn probe = probe_for(instruction, level->bits);
  if (probe == nullptr) return 0.0;
  const double expected = is_amx(instruction) ? kAmxChecksum : expected_checksum(level->bits / 32);
  const auto check = [&](double checksum) {
    // Always true, but the compiler cannot know it: the loops must run.
    if (checksum != expected) {
      fail(ErrorKind::Internal, "measure_peak_ops: the {} probe summed to {}, not {}",
           peak_instruction_name(instruction), checksum, expected);
    }
  };

  // Iterations for one pass of about seconds_per_pass, timed on the calling thread alone: grow a
  // short run until it takes an eighth of a pass, then scale.
  int64_t iterations = 256;
  double elapsed = 0.0;
  for (;;) {
    const auto start = std::chrono::steady_clock::now();
    check(probe(iterations));
    elapsed = seconds_since(start);
    if (elapsed >= seconds_per_pass / 8 || iterations >= (int64_t{1} << 40)) break;
    iterations *= 4;
  }
  iterations = std::max<int64_t>(
      1, static_cast<int64_t>(static_cast<double>(iterations) * seconds_per_pass / std::max(elapsed, 1e-9)));

  const auto parts = static_cast<int64_t>(pool.size());
  const double ops_per_pass = static_cast<double>(parts) * static_cast<double>(iterations) * kAccumulators *
                              ops_per_instruction(instruction, level->bits);
  std::vector<double> checksums(static_cast<size_t>(parts));
  double best = 0.0;
  for (int pass = 0; pass < kPasses; ++pass) {
    const auto start = std::chrono::steady_clock::now();
    pool.parallel_for(parts, [&](int64_t part, int) { checksums[static_cast<size_t>(part)] = probe(iterations); });
    best = std::max(best, ops_per_pass / seconds_since(start));
    for (double checksum : checksums) check(checksum);
  }
  return best;
}

std::optional<PeakInstruction> prefill_instruction(DType w_type, std::string_view simd_level, bool packed) {
  const Level* level = find_level(simd_level);
  if (level == nullptr || level->bits == 0) return std::nullopt;
  switch (w_type) {
    case DType::F32:
    case DType::F16:
      return PeakInstruction::FmaF32;
    case DType::BF16:
      if (level->amx) return PeakInstruction::AmxBf16;
      return level->bf16 ? PeakInstruction::Bf16Dot : PeakInstruction::FmaF32;
    case DType::Q8_0:
    case DType::Q4_0:
      if (level->amx) return PeakInstruction::AmxInt8;
      if (level->vnni || (packed && level->packed_vnni)) return PeakInstruction::Vnni;
      // avx2's packed loops multiply bytes (vpmaddubsw, avx2_packed_blocks.h), its rows int16.
      return packed ? PeakInstruction::Int8Maddubs : PeakInstruction::Int16Madd;
    default:
      if (!cpu::is_block_type(w_type)) break;
      // amx: tdpbssd on every block type's unpacked quants (amx.cpp). Below it, the VNNI levels
      // take the blocks of 32 and iq4_xs's chunks by vpdpbusd (avx512_dot.cpp), the k-quants by
      // vpmaddubsw (simd_blocks.h), as every level without VNNI takes them all; repacked, every
      // type goes by vpdpbusd there and at avxvnni (avx2_packed_blocks.h), by vpmaddubsw below.
      if (level->amx) return PeakInstruction::AmxInt8;
      if (level->vnni && (packed || w_type == DType::Q4_1 || w_type == DType::Q5_0 || w_type == DType::Q5_1 ||
                          w_type == DType::IQ4_NL || w_type == DType::IQ4_XS)) {
        return PeakInstruction::Vnni;
      }
      if (packed && level->packed_vnni) return PeakInstruction::Vnni;
      return PeakInstruction::Int8Maddubs;
  }
  return std::nullopt;
}

}  // namespace ferry::kernels
