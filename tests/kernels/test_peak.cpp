// The compute-peak probes (kernels/peak.h): which instruction prefill is built on per weight type
// and level, and that a probe runs exactly where this CPU has its instruction. No timing
// assertions: the figures only have meaning side by side, in bench_kernels.
#include <gtest/gtest.h>

#include <algorithm>
#include <optional>
#include <string>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <cpuid.h>
#endif

#include "backends/cpu/kernels/peak.h"
#include "backends/cpu/kernels/simd.h"
#include "core/thread_pool.h"
#include "reference.h"

using namespace ferry;
using namespace ferry::test;
using kernels::PeakInstruction;

namespace {

// Short passes: these tests check that the probes run, not what they measure.
constexpr double kBriefPass = 1e-4;

constexpr PeakInstruction kInstructions[] = {
    PeakInstruction::FmaF32,  PeakInstruction::Int16Madd, PeakInstruction::Int8Maddubs, PeakInstruction::Vnni,
    PeakInstruction::Bf16Dot, PeakInstruction::AmxInt8,   PeakInstruction::AmxBf16};

// Whether the amx level is offered: AMX in CPUID and the OS's permission, which only asking tells.
bool amx_offered() {
  const auto levels = kernels::available_simd_levels();
  return std::find(levels.begin(), levels.end(), "amx") != levels.end();
}

// Whether this CPU runs `instruction` `bits` wide, decided here independently of peak.cpp.
bool cpu_runs(PeakInstruction instruction, int bits) {
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
  const bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  const bool avx512f = __builtin_cpu_supports("avx512f");
  const bool avx512bw = avx512f && __builtin_cpu_supports("avx512bw");
  const bool avx512vl = avx512f && __builtin_cpu_supports("avx512vl");
  const bool avx512vnni = avx512f && __builtin_cpu_supports("avx512vnni");
  const bool avx512bf16 = avx512f && __builtin_cpu_supports("avx512bf16");
  // AVX-VNNI from CPUID (leaf 7, subleaf 1, EAX bit 4): Clang 14's __builtin_cpu_supports lacks it.
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  const bool avxvnni = avx2 && __get_cpuid_count(7, 1, &eax, &ebx, &ecx, &edx) != 0 && (eax & (1u << 4)) != 0;
  const bool wide = bits == 512;
  switch (instruction) {
    case PeakInstruction::FmaF32:
      return wide ? avx512f : avx2;
    case PeakInstruction::Int16Madd:
    case PeakInstruction::Int8Maddubs:
      return wide ? avx512bw : avx2;
    case PeakInstruction::Vnni:
      return wide ? avx512vnni : avxvnni || (avx2 && avx512vl && avx512vnni);
    case PeakInstruction::Bf16Dot:
      return wide ? avx512bf16 : avx2 && avx512vl && avx512bf16;
    case PeakInstruction::AmxInt8:
    case PeakInstruction::AmxBf16:
      return wide && amx_offered();
    case PeakInstruction::Count:
      break;
  }
#else
  (void)instruction;
  (void)bits;
#endif
  return false;
}

}  // namespace

TEST(PeakInstruction, NamesEveryInstruction) {
  EXPECT_STREQ(kernels::peak_instruction_name(PeakInstruction::FmaF32), "fma_f32");
  EXPECT_STREQ(kernels::peak_instruction_name(PeakInstruction::Int16Madd), "int16_madd");
  EXPECT_STREQ(kernels::peak_instruction_name(PeakInstruction::Int8Maddubs), "int8_maddubs");
  EXPECT_STREQ(kernels::peak_instruction_name(PeakInstruction::Vnni), "vnni_dot");
  EXPECT_STREQ(kernels::peak_instruction_name(PeakInstruction::Bf16Dot), "bf16_dot");
  EXPECT_STREQ(kernels::peak_instruction_name(PeakInstruction::AmxInt8), "amx_int8");
  EXPECT_STREQ(kernels::peak_instruction_name(PeakInstruction::AmxBf16), "amx_bf16");
}

TEST(PeakPrefillInstruction, NoneAtScalarOrAnUnknownLevel) {
  for (DType dtype : {DType::F32, DType::F16, DType::BF16, DType::Q8_0, DType::Q4_0, DType::Q4_K, DType::IQ4_XS}) {
    EXPECT_EQ(kernels::prefill_instruction(dtype, "scalar"), std::nullopt) << dtype_name(dtype);
    EXPECT_EQ(kernels::prefill_instruction(dtype, "neon"), std::nullopt) << dtype_name(dtype);
  }
  EXPECT_EQ(kernels::prefill_instruction(DType::I32, "avx512"), std::nullopt);
}

TEST(PeakPrefillInstruction, FollowsTheWeightTypeAndLevel) {
  struct Row {
    DType dtype;
    const char* level;
    PeakInstruction expected;
  };
  const Row rows[] = {
      {DType::F32, "avx2", PeakInstruction::FmaF32},
      {DType::F16, "avx512bf16", PeakInstruction::FmaF32},
      {DType::F32, "amx", PeakInstruction::FmaF32},
      {DType::BF16, "avx2", PeakInstruction::FmaF32},
      {DType::BF16, "avx512vnni", PeakInstruction::FmaF32},
      {DType::BF16, "avx512bf16", PeakInstruction::Bf16Dot},
      {DType::BF16, "amx", PeakInstruction::AmxBf16},
      {DType::Q8_0, "avx2", PeakInstruction::Int16Madd},
      {DType::Q4_0, "avx512", PeakInstruction::Int16Madd},
      {DType::Q4_0, "avx512vnni", PeakInstruction::Vnni},
      {DType::Q8_0, "avx512bf16", PeakInstruction::Vnni},
      {DType::Q4_0, "amx", PeakInstruction::AmxInt8},
      {DType::Q8_0, "amx", PeakInstruction::AmxInt8},
      {DType::Q4_1, "avx2", PeakInstruction::Int8Maddubs},
      {DType::Q5_0, "avx2", PeakInstruction::Int8Maddubs},
      {DType::IQ4_NL, "avx512", PeakInstruction::Int8Maddubs},
      {DType::Q2_K, "avx512vnni", PeakInstruction::Int8Maddubs},
      {DType::Q4_K, "avx512bf16", PeakInstruction::Int8Maddubs},
      {DType::Q6_K, "amx", PeakInstruction::AmxInt8},
      {DType::Q3_K, "amx", PeakInstruction::AmxInt8},
      {DType::Q4_1, "amx", PeakInstruction::AmxInt8},
      {DType::IQ4_XS, "amx", PeakInstruction::AmxInt8},
      {DType::Q5_1, "avx512vnni", PeakInstruction::Vnni},
      {DType::IQ4_NL, "avx512bf16", PeakInstruction::Vnni},
      {DType::IQ4_XS, "avx512vnni", PeakInstruction::Vnni},
      {DType::Q3_K, "avx512bf16", PeakInstruction::Int8Maddubs},
      {DType::Q4_K, "amx", PeakInstruction::AmxInt8},
      {DType::Q5_K, "amx", PeakInstruction::AmxInt8},
      {DType::IQ4_XS, "avx2", PeakInstruction::Int8Maddubs},
  };
  for (const Row& row : rows) {
    EXPECT_EQ(kernels::prefill_instruction(row.dtype, row.level), std::optional<PeakInstruction>(row.expected))
        << dtype_name(row.dtype) << " at " << row.level;
  }
  // Repacked at load: q4_k by vpdpbusd at the VNNI levels, the tiles at amx; q8_0, q4_0, q4_k,
  // q5_k, q6_k, q4_1, q5_0, q5_1, iq4_nl, iq4_xs, q2_k and q3_k by vpmaddubsw at avx2 (and avx512) and vpdpbusd at
  // avxvnni (q8_0, q4_0 by vpmaddwd in rows, the others by vpmaddubsw).
  EXPECT_EQ(kernels::prefill_instruction(DType::Q4_K, "avx512vnni", true), PeakInstruction::Vnni);
  EXPECT_EQ(kernels::prefill_instruction(DType::Q4_K, "avx512bf16", true), PeakInstruction::Vnni);
  EXPECT_EQ(kernels::prefill_instruction(DType::Q4_K, "amx", true), PeakInstruction::AmxInt8);
  EXPECT_EQ(kernels::prefill_instruction(DType::Q4_0, "avx512vnni", true), PeakInstruction::Vnni);
  EXPECT_EQ(kernels::prefill_instruction(DType::Q8_0, "avx2", true), PeakInstruction::Int8Maddubs);
  EXPECT_EQ(kernels::prefill_instruction(DType::Q4_0, "avx2", true), PeakInstruction::Int8Maddubs);
  EXPECT_EQ(kernels::prefill_instruction(DType::Q4_0, "avx2"), PeakInstruction::Int16Madd);
  EXPECT_EQ(kernels::prefill_instruction(DType::Q8_0, "avxvnni", true), PeakInstruction::Vnni);
  EXPECT_EQ(kernels::prefill_instruction(DType::Q4_0, "avxvnni", true), PeakInstruction::Vnni);
  EXPECT_EQ(kernels::prefill_instruction(DType::Q8_0, "avxvnni"), PeakInstruction::Int16Madd);
  EXPECT_EQ(kernels::prefill_instruction(DType::Q4_1, "avxvnni"), PeakInstruction::Int8Maddubs);
  EXPECT_EQ(kernels::prefill_instruction(DType::Q4_K, "avxvnni", true), PeakInstruction::Vnni);
  EXPECT_EQ(kernels::prefill_instruction(DType::Q4_K, "avx2", true), PeakInstruction::Int8Maddubs);
  EXPECT_EQ(kernels::prefill_instruction(DType::Q6_K, "avxvnni", true), PeakInstruction::Vnni);
  EXPECT_EQ(kernels::prefill_instruction(DType::Q6_K, "avx2", true), PeakInstruction::Int8Maddubs);
  EXPECT_EQ(kernels::prefill_instruction(DType::Q5_K, "avxvnni", true), PeakInstruction::Vnni);
  EXPECT_EQ(kernels::prefill_instruction(DType::Q3_K, "avxvnni"), PeakInstruction::Int8Maddubs);
  for (DType packed_by_vnni :
       {DType::Q4_1, DType::Q5_0, DType::Q5_1, DType::IQ4_NL, DType::IQ4_XS, DType::Q2_K, DType::Q3_K}) {
    EXPECT_EQ(kernels::prefill_instruction(packed_by_vnni, "avxvnni", true), PeakInstruction::Vnni)
        << dtype_name(packed_by_vnni);
    EXPECT_EQ(kernels::prefill_instruction(packed_by_vnni, "avx2", true), PeakInstruction::Int8Maddubs)
        << dtype_name(packed_by_vnni);
    // avx512 without VNNI takes avx2's packed loops
    EXPECT_EQ(kernels::prefill_instruction(packed_by_vnni, "avx512", true), PeakInstruction::Int8Maddubs)
        << dtype_name(packed_by_vnni);
  }
  EXPECT_EQ(kernels::prefill_instruction(DType::BF16, "avxvnni", true), PeakInstruction::FmaF32);
}

TEST(PeakProbe, FmaRunsAtEveryAvailableVectorLevel) {
  ThreadPool pool(1);
  for (const std::string& level : kernels::available_simd_levels()) {
    const double ops = kernels::measure_peak_ops(PeakInstruction::FmaF32, level, pool, kBriefPass);
    if (level == "scalar") {
      EXPECT_EQ(ops, 0.0);
    } else {
      EXPECT_GT(ops, 0.0) << level;
    }
  }
}

TEST(PeakProbe, RunsEachInstructionExactlyWhereTheCpuHasIt) {
  ThreadPool pool(2);
  for (const char* level : {"avx2", "avxvnni", "avx512", "avx512vnni", "avx512bf16", "amx"}) {
    const int bits = std::string(level).starts_with("avx512") || std::string(level) == "amx" ? 512 : 256;
    for (PeakInstruction instruction : kInstructions) {
      const double ops = kernels::measure_peak_ops(instruction, level, pool, kBriefPass);
      if (cpu_runs(instruction, bits)) {
        EXPECT_GT(ops, 0.0) << kernels::peak_instruction_name(instruction) << " at " << level;
      } else {
        EXPECT_EQ(ops, 0.0) << kernels::peak_instruction_name(instruction) << " at " << level;
      }
    }
  }
  for (PeakInstruction instruction : kInstructions) {
    EXPECT_EQ(kernels::measure_peak_ops(instruction, "scalar", pool, kBriefPass), 0.0);
  }
}

TEST(PeakProbe, RejectsAnUnknownLevelAndAPassThatIsNotPositive) {
  ThreadPool pool(1);
  expect_error(ErrorKind::Usage, [&] { kernels::measure_peak_ops(PeakInstruction::FmaF32, "neon", pool, kBriefPass); },
               {"neon", "avx512bf16"});
  expect_error(ErrorKind::Usage, [&] { kernels::measure_peak_ops(PeakInstruction::FmaF32, "avx2", pool, 0.0); },
               {"seconds_per_pass"});
}
