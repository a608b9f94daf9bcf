// Decode-shaped matmul work: the weight matrices of a whole decode step of the bench300m model
// (20 Llama layers, hidden 1024, 16/8 heads x 64, ffn 2816, vocab 32000), each multiplied once by
// one token, in the order a decode step runs them. Unlike bench_kernels' gemv on one large matrix,
// this includes what small matrices cost: a thread hand-off per matmul and the ramp-up of the
// memory streams at every matrix start. Reported like bench_kernels: "of_read_bw" is weight bytes
// per second over the machine's read bandwidth measured right before the loop.
//
//   build-speed/bench_decode --benchmark_filter=DecodeMatmuls
#include <benchmark/benchmark.h>

#include <algorithm>
#include <random>
#include <utility>
#include <vector>

#include "backends/cpu/kernels/bandwidth.h"
#include "backends/cpu/kernels/kernels.h"
#include "backends/cpu/kernels/simd.h"
#include "core/tensor.h"
#include "core/thread_pool.h"

using namespace ferry;

namespace {

constexpr int kLayers = 20;
constexpr int64_t kHidden = 1024;
constexpr int64_t kKvWidth = 512;
constexpr int64_t kFfn = 2816;
constexpr int64_t kVocab = 32000;

Tensor random_f32(const Shape& shape, uint32_t seed) {
  Tensor t = Tensor::host(DType::F32, shape);
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  auto* p = t.data_as<float>();
  for (int64_t i = 0; i < t.numel(); ++i) p[i] = dist(rng);
  return t;
}

struct MatmulStep {
  Tensor w;
  const Tensor* x;
  Tensor* y;
};

void BM_DecodeMatmuls(benchmark::State& state) {
  const auto dtype = static_cast<DType>(state.range(0));
  const int threads = static_cast<int>(state.range(1));
  ThreadPool pool(threads);

  Tensor hidden = random_f32(Shape{1, kHidden}, 1);
  Tensor ffn_in = random_f32(Shape{1, kFfn}, 2);
  Tensor out_hidden = Tensor::host(DType::F32, Shape{1, kHidden});
  Tensor out_kv = Tensor::host(DType::F32, Shape{1, kKvWidth});
  Tensor out_ffn = Tensor::host(DType::F32, Shape{1, kFfn});
  Tensor out_vocab = Tensor::host(DType::F32, Shape{1, kVocab});

  std::vector<MatmulStep> steps;
  size_t weight_bytes = 0;
  uint32_t seed = 10;
  const auto add = [&](int64_t n, int64_t k, const Tensor* x, Tensor* y) {
    Tensor w = Tensor::host(dtype, Shape{n, k});
    kernels::from_f32(random_f32(Shape{n, k}, seed++), w, pool);
    // As the CPU backend keeps it once loaded (FERRY_REPACK=off: the file's rows).
    if (kernels::repacks_weight(dtype, w.shape())) w = kernels::repack_weight(w, pool);
    weight_bytes += w.nbytes();
    steps.push_back(MatmulStep{w, x, y});
  };
  for (int layer = 0; layer < kLayers; ++layer) {
    add(kHidden, kHidden, &hidden, &out_hidden);  // q
    add(kKvWidth, kHidden, &hidden, &out_kv);     // k
    add(kKvWidth, kHidden, &hidden, &out_kv);     // v
    add(kHidden, kHidden, &hidden, &out_hidden);  // o
    add(kFfn, kHidden, &hidden, &out_ffn);        // gate
    add(kFfn, kHidden, &hidden, &out_ffn);        // up
    add(kHidden, kFfn, &ffn_in, &out_hidden);     // down
  }
  add(kVocab, kHidden, &hidden, &out_vocab);  // head

  const double bandwidth = kernels::measure_read_bandwidth(pool);
  for (auto _ : state) {
    for (MatmulStep& s : steps) kernels::matmul(*s.x, s.w, nullptr, *s.y, pool);
    benchmark::ClobberMemory();
  }
  const auto bytes = static_cast<double>(weight_bytes) * static_cast<double>(state.iterations());
  state.SetBytesProcessed(static_cast<int64_t>(bytes));
  state.counters["of_read_bw"] = benchmark::Counter(bytes / bandwidth, benchmark::Counter::kIsRate);
  state.counters["read_bw_GBps"] = bandwidth / 1e9;
  state.counters["tok_per_s"] =
      benchmark::Counter(static_cast<double>(state.iterations()), benchmark::Counter::kIsRate);
  state.SetLabel(std::string(dtype_name(dtype)) + " " + kernels::simd_level());
}

// One weight shape of the decode step, cycled through enough copies to stream from memory.
void BM_GemvShape(benchmark::State& state) {
  const auto dtype = static_cast<DType>(state.range(0));
  const int64_t N = state.range(1);
  const int64_t K = state.range(2);
  const int threads = static_cast<int>(state.range(3));
  ThreadPool pool(threads);
  constexpr size_t kStreamBytes = size_t{512} << 20;
  Tensor first = Tensor::host(dtype, Shape{N, K});
  kernels::from_f32(random_f32(Shape{N, K}, 1), first, pool);
  const size_t copies = std::max<size_t>(1, (kStreamBytes + first.nbytes() - 1) / first.nbytes());
  std::vector<Tensor> weights{first};
  for (size_t c = 1; c < copies; ++c) {
    weights.push_back(Tensor::host(dtype, Shape{N, K}));
    kernels::copy(first, weights.back(), pool);
  }
  // As the CPU backend keeps them once loaded (FERRY_REPACK=off: the file's rows).
  for (Tensor& w : weights) {
    if (kernels::repacks_weight(dtype, w.shape())) w = kernels::repack_weight(w, pool);
  }
  Tensor x = random_f32(Shape{1, K}, 2);
  Tensor y = Tensor::host(DType::F32, Shape{1, N});
  const double bandwidth = kernels::measure_read_bandwidth(pool);
  size_t next = 0;
  for (auto _ : state) {
    kernels::matmul(x, weights[next], nullptr, y, pool);
    benchmark::ClobberMemory();
    next = (next + 1) % weights.size();
  }
  const auto bytes = static_cast<double>(first.nbytes()) * static_cast<double>(state.iterations());
  state.SetBytesProcessed(static_cast<int64_t>(bytes));
  state.counters["of_read_bw"] = benchmark::Counter(bytes / bandwidth, benchmark::Counter::kIsRate);
  state.counters["read_bw_GBps"] = bandwidth / 1e9;
  state.SetLabel(std::string(dtype_name(dtype)) + (weights.front().layout() == Layout::Packed ? " packed " : " ") +
                 kernels::simd_level());
}

void ShapeArgs(benchmark::internal::Benchmark* b) {
  for (DType dtype : {DType::BF16, DType::Q8_0, DType::Q4_K, DType::Q6_K}) {
    for (auto [n, k] : {std::pair<int64_t, int64_t>{kHidden, kHidden},
                        {kKvWidth, kHidden},
                        {kFfn, kHidden},
                        {kHidden, kFfn},
                        {kVocab, kHidden}}) {
      for (int threads : {1, 2}) b->Args({static_cast<int64_t>(dtype), n, k, threads});
    }
  }
}

}  // namespace

BENCHMARK(BM_GemvShape)
    ->Apply(ShapeArgs)
    ->ArgNames({"dtype", "N", "K", "threads"})
    ->UseRealTime()
    ->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_DecodeMatmuls)
    ->ArgsProduct({{static_cast<int64_t>(DType::BF16), static_cast<int64_t>(DType::Q8_0),
                    static_cast<int64_t>(DType::Q4_0), static_cast<int64_t>(DType::Q4_K),
                    static_cast<int64_t>(DType::Q6_K)},
                   {1, 2}})
    ->ArgNames({"dtype", "threads"})
    ->UseRealTime()
    ->MinTime(2.0)
    ->Unit(benchmark::kMillisecond);

BENCHMARK_MAIN();
