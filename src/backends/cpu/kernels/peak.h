// The machine's compute peaks, the ceiling for prefill: a matmul with many activation rows is
// bound by the arithmetic of its inner loop, so its operations per second divided by the peak of
// the instruction that loop is built on says how close a kernel comes. A probe like the bandwidth
// probe (bandwidth.h): measured here, not taken from a datasheet.
#pragma once

#include <optional>
#include <string_view>

#include "core/dtype.h"
#include "core/thread_pool.h"

namespace ferry::kernels {

// The instructions CPU matmul inner loops are built on.
enum class PeakInstruction {
  FmaF32,       // vfmadd231ps: f32 multiply-add
  Int16Madd,    // vpmaddwd + vpaddd: int16 products summed in pairs into int32
  Int8Maddubs,  // vpmaddubsw + vpmaddwd (ones) + vpaddd: the int8 dot product before VNNI
  Vnni,         // vpdpbusd: u8 x s8 products summed in fours into int32 (AVX512-VNNI or AVX-VNNI)
  Bf16Dot,      // vdpbf16ps: bf16 products summed in pairs into f32 (AVX512-BF16)
  AmxInt8,      // tdpbssd: a 16 x 64 by 64 x 16 tile product of s8, into int32 (AMX-INT8)
  AmxBf16,      // tdpbf16ps: a 16 x 32 by 32 x 16 tile product of bf16, into f32 (AMX-BF16)
  Count,
};

// "fma_f32", "int16_madd", "int8_maddubs", "vnni_dot", "bf16_dot", "amx_int8", "amx_bf16".
const char* peak_instruction_name(PeakInstruction instruction);

// Operations per second (a multiply-add counts 2: the convention of a matmul's 2 * M * N * K) that
// the pool's threads reach together issuing only `instruction`, at the vector width `simd_level`
// uses (avx2: 256-bit; avx512, avx512vnni, avx512bf16, amx: 512-bit), on independent
// accumulators; the best of a few passes of about `seconds_per_pass` each. 0 when this CPU cannot
// run the instruction at that width, and at "scalar". Error(Usage) for an unknown level or a
// `seconds_per_pass` that is not positive.
double measure_peak_ops(PeakInstruction instruction, std::string_view simd_level, ThreadPool& pool,
                        double seconds_per_pass = 0.02);

// The instruction the CPU matmul's prefill inner loop is built on for weights of `w_type` at
// `simd_level`: f32 and f16 FmaF32; bf16 AmxBf16 at amx, Bf16Dot at avx512bf16, FmaF32 below;
// q8_0 and q4_0 AmxInt8 at amx, Vnni at the VNNI levels (avx512vnni, avx512bf16), Int16Madd at
// avx2, avxvnni and avx512; every other block type AmxInt8 at amx, at the VNNI levels Vnni for
// q4_1, q5_0, q5_1, iq4_nl and iq4_xs and Int8Maddubs for the k-quants, Int8Maddubs below them. A
// weight repacked at load (`packed`): every block type Vnni at the VNNI levels; q8_0, q4_0, q4_k, q5_k
// and q6_k Int8Maddubs at avx2 and Vnni at avxvnni. std::nullopt at "scalar", for an unknown level and for
// a type that is not a weight type.
std::optional<PeakInstruction> prefill_instruction(DType w_type, std::string_view simd_level, bool packed = false);

}  // namespace ferry::kernels
