// The vision tower's speed: MiniCPM-V 2.6's SigLIP-400M tower (27 layers, 1152 wide, 16 heads,
// 0.4 B parameters, random bf16 weights) and its resampler on one 448 x 448 image (32 x 32 = 1024
// patches), on one CPU device; and the tower's attention on its own, the segment-attention kernel
// next to the scalar per-query loop it replaced (kept here as the "before"), on the same shape.
//
//   build/bench_vision --benchmark_min_time=0.1   (the tower takes seconds per image)
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "backends/cpu/cpu_device.h"
#include "backends/cpu/kernels/kernels.h"
#include "core/thread_pool.h"
#include "engine/model_config_reader.h"
#include "engine/session.h"
#include "engine/weight_loader.h"
#include "formats/json_file.h"
#include "models/presets.h"
#include "models/vision.h"

using namespace ferry;

namespace {

constexpr int64_t kSide = 32;  // patches per side: a 448 x 448 image

Tensor random_f32(const Shape& shape, std::mt19937& rng, float scale) {
  Tensor f = Tensor::host(DType::F32, shape);
  std::normal_distribution<float> dist(0.0f, scale);
  for (int64_t i = 0; i < f.numel(); ++i) f.data_as<float>()[i] = dist(rng);
  return f;
}

// MiniCPM-V 2.6's vision side with a one-layer, 128-wide text model (one resampler head): the
// tower is the real one.
ModelSpec tower_spec() {
  nlohmann::json config = parse_json_text(*preset_config("minicpm-v-2_6"), "preset");
  config["hidden_size"] = 128;
  config["intermediate_size"] = 256;
  config["num_attention_heads"] = 2;
  config["num_key_value_heads"] = 1;
  config["num_hidden_layers"] = 1;
  config["vocab_size"] = 256;
  const ModelConfig c = model_config_from_hf(config, nullptr, "bench");
  return make_decoder_spec_from_config(c, DType::BF16, "bench");
}

void BM_SiglipTowerAndResampler(benchmark::State& state) {
  const int threads = static_cast<int>(state.range(0));
  static const ModelSpec spec = tower_spec();
  cpu::CpuDevice device(DeviceId{DeviceType::Cpu, 0}, Allocator::kUnlimited, threads);
  const Placement placement = Placement::single(device);
  WeightStore weights;
  std::mt19937 rng(7);
  uint64_t parameters = 0;
  for (const auto& m : spec.modules) {
    for (const auto& p : m.params) {
      const bool norm_weight = p.shape.rank == 1 && p.name.find("weight") != std::string::npos;
      Tensor host = random_f32(p.shape, rng, 0.02f);
      if (norm_weight) std::fill(host.data_as<float>(), host.data_as<float>() + host.numel(), 1.0f);
      weights.add(p.name, materialize_weight(host, device, p.compute_dtype, p.name));
      if (m.name == vision_module()) parameters += static_cast<uint64_t>(p.shape.numel());
    }
  }
  const VisionConfig& v = spec.config.vision;
  VisionBatch batch;
  batch.grids = {VisionGrid{kSide, kSide}};
  const Tensor pixels = random_f32(Shape{kSide * kSide, 3 * 14 * 14}, rng, 0.5f);
  batch.patches.assign(pixels.data_as<float>(), pixels.data_as<float>() + pixels.numel());
  for (int64_t r = 0; r < kSide; ++r) {
    for (int64_t c = 0; c < kSide; ++c) {
      // A 32 x 32 grid over the 70 x 70 table: bucket k * 70 / 32 (the processor's exact rule
      // differs by float rounding only; any valid rows time the same).
      batch.positions.push_back(
          static_cast<int32_t>(r * v.table_side() / kSide * v.table_side() + c * v.table_side() / kSide));
    }
  }
  Session session(spec, placement, weights, 16);
  for (auto _ : state) {
    const std::vector<float> embeds = session.encode_images(batch);
    benchmark::DoNotOptimize(embeds.data());
  }
  state.counters["tower_params_M"] = static_cast<double>(parameters) / 1e6;
  state.counters["patches"] = static_cast<double>(kSide * kSide);
}
BENCHMARK(BM_SiglipTowerAndResampler)->Arg(1)->Arg(2)->Unit(benchmark::kMillisecond)->UseRealTime();

// The attention the tower replaced: one query at a time, every score, softmax, weighted sum
// (the former block_attention kernel's loop, single-threaded here as the kernel is below).
void scalar_attention(const float* q, const float* k, const float* v, float* o, int64_t T, int heads, int hd,
                      float scale) {
  std::vector<float> scores(static_cast<size_t>(T));
  const int64_t width = int64_t{heads} * hd;
  for (int h = 0; h < heads; ++h) {
    for (int64_t t = 0; t < T; ++t) {
      const float* qrow = q + t * width + h * hd;
      float best = -INFINITY;
      for (int64_t j = 0; j < T; ++j) {
        const float* krow = k + j * width + h * hd;
        float dot = 0.0f;
        for (int i = 0; i < hd; ++i) dot += qrow[i] * krow[i];
        scores[static_cast<size_t>(j)] = dot * scale;
        best = std::max(best, scores[static_cast<size_t>(j)]);
      }
      float sum = 0.0f;
      for (float& s : scores) {
        s = std::exp(s - best);
        sum += s;
      }
      float* orow = o + t * width + h * hd;
      std::fill(orow, orow + hd, 0.0f);
      for (int64_t j = 0; j < T; ++j) {
        const float w = scores[static_cast<size_t>(j)] / sum;
        const float* vrow = v + j * width + h * hd;
        for (int i = 0; i < hd; ++i) orow[i] += w * vrow[i];
      }
    }
  }
}

// One tower layer's attention: 1024 patches, 16 heads of 72; arg 0 = the former scalar loop,
// 1 = segment_attention; one thread.
void BM_TowerLayerAttention(benchmark::State& state) {
  const bool segment = state.range(0) == 1;
  constexpr int kHeads = 16;
  constexpr int kHeadDim = 72;
  const int64_t T = kSide * kSide;
  std::mt19937 rng(3);
  const Tensor q = random_f32(Shape{T, kHeads * kHeadDim}, rng, 1.0f);
  const Tensor k = random_f32(Shape{T, kHeads * kHeadDim}, rng, 1.0f);
  const Tensor v = random_f32(Shape{T, kHeads * kHeadDim}, rng, 1.0f);
  Tensor o = Tensor::host(DType::F32, Shape{T, kHeads * kHeadDim});
  SegmentAttentionParams p;
  p.n_head = kHeads;
  p.n_kv_head = kHeads;
  p.head_dim = kHeadDim;
  p.scale = 1.0f / std::sqrt(static_cast<float>(kHeadDim));
  p.segments = {AttentionSegment{T, T}};
  ThreadPool pool(1);
  for (auto _ : state) {
    if (segment) {
      kernels::segment_attention(q, k, v, p, o, pool);
    } else {
      scalar_attention(q.data_as<float>(), k.data_as<float>(), v.data_as<float>(), o.data_as<float>(), T, kHeads,
                       kHeadDim, p.scale);
    }
    benchmark::DoNotOptimize(o.data());
  }
}
BENCHMARK(BM_TowerLayerAttention)->Arg(0)->Arg(1)->Unit(benchmark::kMillisecond)->UseRealTime();

}  // namespace

BENCHMARK_MAIN();
