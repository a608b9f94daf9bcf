// Decode speed of the CPU kernels: gemv (M = 1) over weights of each dtype (every GGUF type ferry
// reads), reported as weight bytes per second next to the machine's measured read bandwidth:
// counter "read_bw_GBps", and "of_read_bw", the achieved fraction of it (a plain ratio; Benchmark
// prints rate counters with /s).
// Weights are cycled through enough copies to exceed the last-level cache, as in a real decode
// where every layer's weights stream from memory once per token.
// Prefill speed likewise (BM_Prefill, M = 64 and 512 rows of activations): counter "GFLOPs"
// (2 * M * N * K per matmul), next to the measured peak of the instruction the matmul's inner loop
// is built on for that weight type at the active SIMD level (kernels::prefill_instruction, label):
// "peak_Gops", and "of_peak", the achieved fraction of it (a plain ratio, printed with /s as
// above). BM_Peak reports each instruction's probe on its own: "Gops", 10^9 operations per second,
// a multiply-add counting 2.
//
//   build-kernels/bench_kernels --benchmark_filter=Gemv
//   build-kernels/bench_kernels --benchmark_filter='Peak|Prefill'
#include <benchmark/benchmark.h>

#include <cmath>
#include <cstring>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "backends/cpu/kernels/bandwidth.h"
#include "backends/cpu/kernels/kernels.h"
#include "backends/cpu/kernels/peak.h"
#include "backends/cpu/kernels/simd.h"
#include "core/half.h"
#include "core/tensor.h"
#include "core/thread_pool.h"

using namespace ferry;

namespace {

constexpr size_t kStreamBytes = size_t{512} << 20;  // several times any last-level cache

Tensor random_f32(const Shape& shape, uint32_t seed) {
  Tensor t = Tensor::host(DType::F32, shape);
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  auto* p = t.data_as<float>();
  for (int64_t i = 0; i < t.numel(); ++i) p[i] = dist(rng);
  return t;
}

// The fp16 fields (scales, mins) of each GGUF block type ferry reads but does not write, by byte
// offset in the block.
std::vector<size_t> half_fields(DType dtype) {
  switch (dtype) {
    case DType::Q4_1:
    case DType::Q5_1:
    case DType::Q4_K:
    case DType::Q5_K:
      return {0, 2};
    case DType::Q2_K:
      return {80, 82};
    case DType::Q3_K:
      return {108};
    case DType::Q6_K:
      return {208};
    default:  // q5_0, iq4_nl, iq4_xs
      return {0};
  }
}

// A weight matrix of `dtype`: quantized from random floats where ferry has a quantizer, else random
// blocks (random quants and scales, small finite fp16 fields): the speed is the same.
Tensor random_weight(DType dtype, int64_t N, int64_t K, ThreadPool& pool) {
  Tensor w = Tensor::host(dtype, Shape{N, K});
  const DTypeTraits& t = dtype_traits(dtype);
  const bool has_quantizer = !t.is_quantized || dtype == DType::Q8_0 || dtype == DType::Q4_0;
  if (has_quantizer) {
    kernels::from_f32(random_f32(Shape{N, K}, 1), w, pool);
    return w;
  }
  std::mt19937 rng(1);
  auto* p = static_cast<uint8_t*>(w.data());
  for (size_t i = 0; i < w.nbytes(); ++i) p[i] = static_cast<uint8_t>(rng());
  std::uniform_real_distribution<float> dist(-0.01f, 0.01f);
  for (size_t b = 0; b < w.nbytes() / t.block_bytes; ++b) {
    for (size_t at : half_fields(dtype)) {
      const uint16_t h = f32_to_f16(dist(rng));
      std::memcpy(p + b * t.block_bytes + at, &h, 2);
    }
  }
  return w;
}

// The weight as the CPU backend keeps it once loaded: repacked where it repacks that type
// (kernels::repacks_weight; FERRY_REPACK=off measures the rows as stored).
Tensor as_loaded(const Tensor& w, ThreadPool& pool) {
  return kernels::repacks_weight(w.dtype(), w.shape()) ? kernels::repack_weight(w, pool) : w;
}

std::string weight_label(const Tensor& w) {
  return std::string(dtype_name(w.dtype())) + (w.layout() == Layout::Packed ? " packed " : " ") + kernels::simd_level();
}

void BM_Gemv(benchmark::State& state) {
  const auto dtype = static_cast<DType>(state.range(0));
  const int64_t N = state.range(1);
  const int64_t K = state.range(2);
  const int threads = static_cast<int>(state.range(3));
  ThreadPool pool(threads);

  Tensor first = random_weight(dtype, N, K, pool);
  const size_t weight_bytes = first.nbytes();
  const size_t copies = std::max<size_t>(1, (kStreamBytes + weight_bytes - 1) / weight_bytes);
  std::vector<Tensor> weights{first};
  for (size_t c = 1; c < copies; ++c) {
    weights.push_back(Tensor::host(dtype, Shape{N, K}));
    kernels::copy(first, weights.back(), pool);
  }
  for (Tensor& w : weights) w = as_loaded(w, pool);
  Tensor x = random_f32(Shape{1, K}, 2);
  Tensor y = Tensor::host(DType::F32, Shape{1, N});
  // Measured right before the loop: on a shared machine the bandwidth on offer moves with the
  // load, and a ratio only means something between figures taken together.
  const double bandwidth = kernels::measure_read_bandwidth(pool);
  // One untimed pass over every copy: on a VM with shadow page tables the first read of memory
  // after a large free (the f32 source above, the probe's buffer) faults on every 4 KiB page and
  // ran at 1-2 GB/s (benchmarks.md, twenty-seventh session); with few iterations it was the figure.
  for (const Tensor& w : weights) kernels::matmul(x, w, nullptr, y, pool);

  size_t next = 0;
  for (auto _ : state) {
    kernels::matmul(x, weights[next], nullptr, y, pool);
    benchmark::DoNotOptimize(y.data());
    benchmark::ClobberMemory();
    next = (next + 1) % weights.size();
  }
  const auto bytes = static_cast<double>(weight_bytes) * static_cast<double>(state.iterations());
  state.SetBytesProcessed(static_cast<int64_t>(bytes));
  state.counters["of_read_bw"] = benchmark::Counter(bytes / bandwidth, benchmark::Counter::kIsRate);
  state.counters["read_bw_GBps"] = bandwidth / 1e9;
  state.SetLabel(weight_label(weights.front()));
}

void BM_Prefill(benchmark::State& state) {
  // M tokens (64, a short prompt; 512, a long one) against one weight: compute-bound; reports
  // GFLOP/s and the fraction of the inner loop's instruction peak.
  const auto dtype = static_cast<DType>(state.range(0));
  const int64_t M = state.range(1), N = 4096, K = 4096;
  const int threads = static_cast<int>(state.range(2));
  ThreadPool pool(threads);
  Tensor w = as_loaded(random_weight(dtype, N, K, pool), pool);
  Tensor x = random_f32(Shape{M, K}, 2);
  Tensor y = Tensor::host(DType::F32, Shape{M, N});
  // Measured right before the loop with the same threads, as BM_Gemv's bandwidth.
  const std::string level = kernels::simd_level();
  const std::optional<kernels::PeakInstruction> instruction =
      kernels::prefill_instruction(dtype, level, w.layout() == Layout::Packed);
  const double peak = instruction ? kernels::measure_peak_ops(*instruction, level, pool) : 0.0;
  for (auto _ : state) {
    kernels::matmul(x, w, nullptr, y, pool);
    benchmark::DoNotOptimize(y.data());
  }
  const double flops = 2.0 * static_cast<double>(M * N * K) * static_cast<double>(state.iterations());
  state.counters["GFLOPs"] = benchmark::Counter(flops / 1e9, benchmark::Counter::kIsRate);
  std::string label = weight_label(w);
  if (peak > 0.0) {
    state.counters["peak_Gops"] = peak / 1e9;
    state.counters["of_peak"] = benchmark::Counter(flops / peak, benchmark::Counter::kIsRate);
    label += std::string(" ") + kernels::peak_instruction_name(*instruction);
  }
  state.SetLabel(label);
}

// One instruction's compute peak at the active SIMD level (kernels/peak.h): what BM_Prefill's
// "of_peak" divides by.
void BM_Peak(benchmark::State& state) {
  const auto instruction = static_cast<kernels::PeakInstruction>(state.range(0));
  ThreadPool pool(static_cast<int>(state.range(1)));
  const std::string level = kernels::simd_level();
  const std::string name = std::string(kernels::peak_instruction_name(instruction)) + " " + level;
  double sum = 0.0;
  for (auto _ : state) {
    const double ops = kernels::measure_peak_ops(instruction, level, pool);
    if (ops == 0.0) {
      state.SkipWithError((name + ": not on this CPU").c_str());
      break;
    }
    sum += ops;
  }
  state.SetLabel(name);
  if (sum == 0.0) return;
  state.counters["Gops"] = sum / static_cast<double>(state.iterations()) / 1e9;
}

void BM_AttentionDecode(benchmark::State& state) {
  // One new token against a filled cache (GQA 32/8 heads of 128): reports KV-cache bytes read per second.
  const int64_t S = state.range(0);
  const int threads = static_cast<int>(state.range(1));
  ThreadPool pool(threads);
  const AttentionParams p{32, 8, 128, 0.0884f, S - 1};
  const int64_t kv_width = 8 * 128;
  Tensor q = random_f32(Shape{1, 32 * 128}, 3);
  Tensor k = random_f32(Shape{1, kv_width}, 4);
  Tensor v = random_f32(Shape{1, kv_width}, 5);
  Tensor k_cache = random_f32(Shape{S, kv_width}, 6);
  Tensor v_cache = random_f32(Shape{S, kv_width}, 7);
  Tensor out = Tensor::host(DType::F32, Shape{1, 32 * 128});
  for (auto _ : state) {
    kernels::attention(q, k, v, k_cache, v_cache, p, out, pool);
    benchmark::DoNotOptimize(out.data());
  }
  state.SetBytesProcessed(static_cast<int64_t>(2 * k_cache.nbytes()) * state.iterations());
  state.SetLabel(kernels::simd_level());
}

// A prompt's causal attention: T new tokens into an empty f16 cache (the default KV cache), heads
// as bench300m's (16 of 64 over 8 kv heads) or a 7B's (32 of 128 over 8). Reports GFLOP/s, 4 flops
// per (query, visible key, head dim), and the fraction of the f32 FMA peak its loops are built on.
void BM_PromptAttention(benchmark::State& state) {
  const int64_t T = state.range(0);
  const int n_head = static_cast<int>(state.range(1));
  const int head_dim = static_cast<int>(state.range(2));
  ThreadPool pool(static_cast<int>(state.range(3)));
  const AttentionParams p{n_head, 8, head_dim, 1.0f / std::sqrt(static_cast<float>(head_dim)), 0};
  const int64_t width = static_cast<int64_t>(n_head) * head_dim;
  const int64_t kv_width = int64_t{8} * head_dim;
  Tensor q = random_f32(Shape{T, width}, 3);
  Tensor k = random_f32(Shape{T, kv_width}, 4);
  Tensor v = random_f32(Shape{T, kv_width}, 5);
  Tensor k_cache = Tensor::host(DType::F16, Shape{T, kv_width});
  Tensor v_cache = Tensor::host(DType::F16, Shape{T, kv_width});
  Tensor out = Tensor::host(DType::F32, Shape{T, width});
  const std::string level = kernels::simd_level();
  const double peak = kernels::measure_peak_ops(kernels::PeakInstruction::FmaF32, level, pool);
  for (auto _ : state) {
    kernels::attention(q, k, v, k_cache, v_cache, p, out, pool);
    benchmark::DoNotOptimize(out.data());
  }
  const double flops =
      4.0 * static_cast<double>(T * (T + 1) / 2) * static_cast<double>(width) * static_cast<double>(state.iterations());
  state.counters["GFLOPs"] = benchmark::Counter(flops / 1e9, benchmark::Counter::kIsRate);
  if (peak > 0.0) state.counters["of_peak"] = benchmark::Counter(flops / peak, benchmark::Counter::kIsRate);
  state.SetLabel(level);
}

// Non-causal attention inside segments, no cache (Op::SegmentAttention): a vision tower's layer
// on one image (as many queries as patches) or a resampler's learned queries against an image's
// patches. Reports GFLOP/s: 4 flops per (query, key, head dim) (the scores and the value sums).
void BM_SegmentAttention(benchmark::State& state) {
  const int64_t Tq = state.range(0);
  const int64_t Tk = state.range(1);
  SegmentAttentionParams p;
  p.n_head = static_cast<int>(state.range(2));
  p.n_kv_head = p.n_head;
  p.head_dim = static_cast<int>(state.range(3));
  p.scale = 1.0f / std::sqrt(static_cast<float>(p.head_dim));
  p.segments = {{Tq, Tk}};
  ThreadPool pool(static_cast<int>(state.range(4)));
  const int64_t width = static_cast<int64_t>(p.n_head) * p.head_dim;
  Tensor q = random_f32(Shape{Tq, width}, 8);
  Tensor k = random_f32(Shape{Tk, width}, 9);
  Tensor v = random_f32(Shape{Tk, width}, 10);
  Tensor out = Tensor::host(DType::F32, Shape{Tq, width});
  for (auto _ : state) {
    kernels::segment_attention(q, k, v, p, out, pool);
    benchmark::DoNotOptimize(out.data());
  }
  state.counters["GFLOPs"] =
      benchmark::Counter(4.0 * static_cast<double>(Tq * Tk * width) * static_cast<double>(state.iterations()) / 1e9,
                         benchmark::Counter::kIsRate);
  state.SetLabel(kernels::simd_level());
}

// The same gemv with the weights resident in L2 (one small matrix, read again and again): the rate
// the inner loop computes at when memory is not the limit. Decode can only be memory-bound if this
// ceiling is well above the read bandwidth; compare its bytes/s with BM_ReadBandwidth. CPU time,
// so another process on the core does not count.
void BM_GemvInCache(benchmark::State& state) {
  const auto dtype = static_cast<DType>(state.range(0));
  constexpr int64_t N = 256;
  constexpr int64_t K = 1024;
  ThreadPool pool(1);
  Tensor w = as_loaded(random_weight(dtype, N, K, pool), pool);
  Tensor x = random_f32(Shape{1, K}, 2);
  Tensor y = Tensor::host(DType::F32, Shape{1, N});
  for (auto _ : state) {
    kernels::matmul(x, w, nullptr, y, pool);
    benchmark::DoNotOptimize(y.data());
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(static_cast<int64_t>(w.nbytes()) * static_cast<int64_t>(state.iterations()));
  state.SetLabel(weight_label(w));
}

void BM_ReadBandwidth(benchmark::State& state) {
  const int threads = static_cast<int>(state.range(0));
  ThreadPool pool(threads);
  double sum = 0.0;
  for (auto _ : state) sum += kernels::measure_read_bandwidth(pool);
  state.counters["GBps"] = sum / static_cast<double>(state.iterations()) / 1e9;
}

void GemvArgs(benchmark::internal::Benchmark* b) {
  for (DType dtype :
       {DType::F32, DType::BF16, DType::F16, DType::Q8_0, DType::Q4_0, DType::Q4_1, DType::Q5_0, DType::Q5_1,
        DType::IQ4_NL, DType::Q2_K, DType::Q3_K, DType::Q4_K, DType::Q5_K, DType::Q6_K, DType::IQ4_XS}) {
    for (int64_t n : {4096, 11008}) {
      for (int threads : {1, 2}) b->Args({static_cast<int64_t>(dtype), n, 4096, threads});
    }
  }
}

}  // namespace

BENCHMARK(BM_ReadBandwidth)->Arg(1)->Arg(2)->Iterations(3)->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK(BM_Gemv)
    ->Apply(GemvArgs)
    ->ArgNames({"dtype", "N", "K", "threads"})
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);
BENCHMARK(BM_GemvInCache)
    ->DenseRange(static_cast<int64_t>(DType::F32), static_cast<int64_t>(DType::IQ4_XS))
    ->ArgName("dtype")
    ->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_Peak)
    ->ArgsProduct({benchmark::CreateDenseRange(0, static_cast<int64_t>(kernels::PeakInstruction::Count) - 1, 1),
                   {1, 2}})
    ->ArgNames({"instruction", "threads"})
    ->Iterations(3)
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);
BENCHMARK(BM_Prefill)
    ->ArgsProduct({{static_cast<int64_t>(DType::F32), static_cast<int64_t>(DType::F16),
                    static_cast<int64_t>(DType::BF16), static_cast<int64_t>(DType::Q8_0),
                    static_cast<int64_t>(DType::Q4_0), static_cast<int64_t>(DType::Q4_K),
                    static_cast<int64_t>(DType::Q6_K)},
                   {64, 512},
                   {1, 2}})
    ->ArgNames({"dtype", "M", "threads"})
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);
// The other block types at prompt 512, one thread: --benchmark_filter=PrefillBlocks
BENCHMARK(BM_Prefill)
    ->Name("BM_PrefillBlocks")
    ->ArgsProduct({{static_cast<int64_t>(DType::Q4_1), static_cast<int64_t>(DType::Q5_0),
                    static_cast<int64_t>(DType::Q5_1), static_cast<int64_t>(DType::IQ4_NL),
                    static_cast<int64_t>(DType::Q2_K), static_cast<int64_t>(DType::Q3_K),
                    static_cast<int64_t>(DType::Q5_K), static_cast<int64_t>(DType::IQ4_XS)},
                   {512},
                   {1}})
    ->ArgNames({"dtype", "M", "threads"})
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);
// The same from one row to 4096 (the blocking must hold its speed across batch sizes), one thread:
// --benchmark_filter=PrefillRows
BENCHMARK(BM_Prefill)
    ->Name("BM_PrefillRows")
    ->ArgsProduct({{static_cast<int64_t>(DType::BF16), static_cast<int64_t>(DType::Q8_0),
                    static_cast<int64_t>(DType::Q4_0), static_cast<int64_t>(DType::Q4_K)},
                   {1, 4, 16, 64, 256, 1024, 4096},
                   {1}})
    ->ArgNames({"dtype", "M", "threads"})
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);

BENCHMARK(BM_AttentionDecode)
    ->ArgsProduct({{512, 4096}, {1, 2}})
    ->ArgNames({"S", "threads"})
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);

BENCHMARK(BM_PromptAttention)
    ->ArgsProduct({{512, 2048}, {16}, {64}, {1, 2}})
    ->ArgsProduct({{512}, {32}, {128}, {1, 2}})
    ->ArgNames({"T", "heads", "head_dim", "threads"})
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);

// One image of a small vision tower (1024 patches, 16 heads of 72) and a resampler's 64 queries
// against it (28 heads of 128).
BENCHMARK(BM_SegmentAttention)
    ->ArgsProduct({{1024}, {1024}, {16}, {72}, {1, 2}})
    ->ArgsProduct({{64}, {1024}, {28}, {128}, {1, 2}})
    ->ArgNames({"Tq", "Tk", "heads", "head_dim", "threads"})
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);

BENCHMARK_MAIN();
