// Shared pieces of the runtime tests: a hand-made two-module model and a one-layer attention model,
// their weights, and naive reference computations written independently of the kernels.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <random>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/device.h"
#include "core/error.h"
#include "core/half.h"
#include "core/tensor.h"
#include "engine/weight_loader.h"
#include "graph/graph.h"
#include "runtime/executor.h"
#include "runtime/placement.h"
#include "runtime/scheduler.h"
#include "runtime/state_store.h"
#include "runtime/weight_store.h"

namespace ferry::testing {

inline constexpr int64_t kVocab = 16;
inline constexpr int64_t kHidden = 32;
inline constexpr int kHeadDim = 8;
inline constexpr float kEps = 1e-5f;

inline DeviceId cpu_id(int i) {
  return DeviceId{DeviceType::Cpu, i};
}

inline bool contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

// The Error `fn` throws (a test failure if it throws none).
inline Error error_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e;
  }
  ADD_FAILURE() << "expected an Error";
  return Error(ErrorKind::Internal, "none");
}

inline std::vector<float> random_values(size_t n, uint32_t seed, float scale = 1.0f) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(-scale, scale);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

inline Tensor host_f32(const Shape& shape, const std::vector<float>& values, const std::string& name = {}) {
  Tensor t = Tensor::host(DType::F32, shape, name);
  for (size_t i = 0; i < values.size(); ++i) t.data_as<float>()[i] = values[i];
  return t;
}

inline Tensor host_i32(const std::vector<int32_t>& values, const std::string& name = {}) {
  Tensor t = Tensor::host(DType::I32, Shape{static_cast<int64_t>(values.size())}, name);
  for (size_t i = 0; i < values.size(); ++i) t.data_as<int32_t>()[i] = values[i];
  return t;
}

inline std::vector<float> to_vector(const Tensor& t) {
  const float* p = t.data_as<float>();
  return std::vector<float>(p, p + t.numel());
}

// The model's parameters as plain host floats (the reference reads these).
struct TwoModuleWeights {
  std::vector<float> tok_embd = random_values(kVocab * kHidden, 1);
  std::vector<float> proj_a = random_values(kHidden * kHidden, 2, 0.3f);
  std::vector<float> norm_b = random_values(kHidden, 3);
  std::vector<float> proj_b = random_values(kHidden * kHidden, 4, 0.3f);  // stored as f16 on its device
};

// Module "a": embedding + matmul. Module "b": rms_norm + matmul + rope, then two residual adds
// reading both of a's results (the embedding output and the hidden state, the latter read twice).
//
//   ids [T] i32, positions [T] i32 (inputs)
//   a.embed    = embedding(a.tok_embd [V, H] f32, ids)      [T, H]
//   a.hidden   = matmul(a.embed, a.proj [H, H] f32)          [T, H]
//   b.norm_out = rms_norm(a.hidden, b.norm [H] f32)          [T, H]
//   b.proj_out = matmul(b.norm_out, b.proj [H, H] f16)       [T, H]
//   b.rope_out = rope(b.proj_out, positions)                 [T, H]
//   b.residual = add(b.rope_out, a.embed)                    [T, H]
//   b.out      = add(b.residual, a.hidden)                   [T, H]  (the graph output)
inline RopeParams two_module_rope() {
  return RopeParams{kHeadDim, kHeadDim, RopeStyle::HalfSplit, 10000.0f, 1.0f};
}

inline Graph two_module_graph(int64_t tokens) {
  Graph g;
  GraphBuilder b(g);
  const ValueId ids = g.input("ids", DType::I32, Shape{tokens});
  const ValueId positions = g.input("positions", DType::I32, Shape{tokens});
  b.set_module("a");
  const ValueId embed = b.embedding(b.weight("a.tok_embd", DType::F32, Shape{kVocab, kHidden}), ids, "a.embed");
  const ValueId hidden = b.matmul(embed, b.weight("a.proj", DType::F32, Shape{kHidden, kHidden}), kNoValue, "a.hidden");
  b.set_module("b");
  const ValueId norm = b.rms_norm(hidden, b.weight("b.norm", DType::F32, Shape{kHidden}), kEps, "b.norm_out");
  const ValueId proj = b.matmul(norm, b.weight("b.proj", DType::F16, Shape{kHidden, kHidden}), kNoValue, "b.proj_out");
  const ValueId roped = b.rope(proj, positions, two_module_rope(), "b.rope_out");
  const ValueId residual = b.add(roped, embed, "b.residual");
  g.mark_output(b.add(residual, hidden, "b.out"));
  return g;
}

// Loads module a's weights onto `a` and module b's onto `b` through materialize_weight.
inline void load_two_module_weights(WeightStore& store, const TwoModuleWeights& w, Device& a, Device& b) {
  const auto put = [&](const std::string& name, const Shape& shape, const std::vector<float>& v, DType dtype,
                       Device& dev) { store.add(name, materialize_weight(host_f32(shape, v), dev, dtype, name)); };
  put("a.tok_embd", Shape{kVocab, kHidden}, w.tok_embd, DType::F32, a);
  put("a.proj", Shape{kHidden, kHidden}, w.proj_a, DType::F32, a);
  put("b.norm", Shape{kHidden}, w.norm_b, DType::F32, b);
  put("b.proj", Shape{kHidden, kHidden}, w.proj_b, DType::F16, b);
}

// ---- naive reference, in double precision, written from the op definitions in graph/op.h ----

using Rows = std::vector<std::vector<double>>;

inline Rows naive_matmul(const Rows& x, const std::vector<float>& w, int64_t n_out) {
  Rows y(x.size(), std::vector<double>(static_cast<size_t>(n_out)));
  for (size_t t = 0; t < x.size(); ++t) {
    for (int64_t n = 0; n < n_out; ++n) {
      double acc = 0;
      for (size_t k = 0; k < x[t].size(); ++k) acc += x[t][k] * w[static_cast<size_t>(n) * x[t].size() + k];
      y[t][static_cast<size_t>(n)] = acc;
    }
  }
  return y;
}

// HalfSplit rope: pairs (i, i + n_rot/2) of each head rotate by position * theta^(-2i / n_rot).
inline void naive_rope(Rows& x, const std::vector<int32_t>& positions, int head_dim, float theta) {
  const size_t half = static_cast<size_t>(head_dim / 2);
  for (size_t t = 0; t < x.size(); ++t) {
    for (size_t h0 = 0; h0 < x[t].size(); h0 += static_cast<size_t>(head_dim)) {
      for (size_t i = 0; i < half; ++i) {
        const double angle =
            positions[t] * std::pow(static_cast<double>(theta), -2.0 * static_cast<double>(i) / head_dim);
        const double a = x[t][h0 + i], b = x[t][h0 + i + half];
        x[t][h0 + i] = a * std::cos(angle) - b * std::sin(angle);
        x[t][h0 + i + half] = a * std::sin(angle) + b * std::cos(angle);
      }
    }
  }
}

inline Rows naive_two_module(const TwoModuleWeights& w, const std::vector<int32_t>& ids,
                             const std::vector<int32_t>& positions) {
  const auto H = static_cast<size_t>(kHidden);
  Rows embed(ids.size(), std::vector<double>(H));
  for (size_t t = 0; t < ids.size(); ++t) {
    for (size_t j = 0; j < H; ++j) embed[t][j] = w.tok_embd[static_cast<size_t>(ids[t]) * H + j];
  }
  const Rows hidden = naive_matmul(embed, w.proj_a, kHidden);
  Rows norm = hidden;
  for (auto& row : norm) {
    double ss = 0;
    for (double v : row) ss += v * v;
    const double inv = 1.0 / std::sqrt(ss / static_cast<double>(H) + kEps);
    for (size_t j = 0; j < H; ++j) row[j] = row[j] * inv * w.norm_b[j];
  }
  std::vector<float> proj_b_f16(w.proj_b.size());  // the weight as stored: rounded to f16
  for (size_t i = 0; i < w.proj_b.size(); ++i) proj_b_f16[i] = f16_to_f32(f32_to_f16(w.proj_b[i]));
  Rows out = naive_matmul(norm, proj_b_f16, kHidden);
  naive_rope(out, positions, kHeadDim, two_module_rope().theta);
  for (size_t t = 0; t < out.size(); ++t) {
    for (size_t j = 0; j < H; ++j) out[t][j] += embed[t][j] + hidden[t][j];
  }
  return out;
}

inline void expect_close(const Tensor& got, const Rows& want, double tol) {
  ASSERT_EQ(got.dtype(), DType::F32);
  ASSERT_EQ(got.dim(0), static_cast<int64_t>(want.size()));
  const float* p = got.data_as<float>();
  const size_t width = want.empty() ? 0 : want[0].size();
  for (size_t t = 0; t < want.size(); ++t) {
    for (size_t j = 0; j < width; ++j) {
      ASSERT_NEAR(p[t * width + j], want[t][j], tol) << "row " << t << " col " << j;
    }
  }
}

// ---- a one-layer attention model with a KV cache ----

inline constexpr int kHeads = 4, kKvHeads = 2;
inline constexpr int64_t kCacheRows = 16;
inline constexpr int64_t kKvWidth = kKvHeads * kHeadDim;

struct AttnWeights {
  std::vector<float> tok_embd = random_values(kVocab * kHidden, 11);
  std::vector<float> wq = random_values(kHidden * kHidden, 12, 0.3f);
  std::vector<float> wk = random_values(kKvWidth * kHidden, 13, 0.3f);
  std::vector<float> wv = random_values(kKvWidth * kHidden, 14, 0.3f);
};

inline AttentionParams attn_params(int64_t kv_offset) {
  return AttentionParams{kHeads, kKvHeads, kHeadDim, 1.0f / std::sqrt(static_cast<float>(kHeadDim)), kv_offset};
}

// "embed" (embedding) then "layer" (q/k/v projections + attention over its KV cache state).
inline Graph attention_graph(int64_t tokens, int64_t kv_offset) {
  Graph g;
  GraphBuilder b(g);
  const ValueId ids = g.input("ids", DType::I32, Shape{tokens});
  b.set_module("embed");
  const ValueId x = b.embedding(b.weight("embed.tok", DType::F32, Shape{kVocab, kHidden}), ids, "embed.out");
  b.set_module("layer");
  const ValueId q = b.matmul(x, b.weight("layer.wq", DType::F32, Shape{kHidden, kHidden}), kNoValue, "layer.q");
  const ValueId k = b.matmul(x, b.weight("layer.wk", DType::F32, Shape{kKvWidth, kHidden}), kNoValue, "layer.k");
  const ValueId v = b.matmul(x, b.weight("layer.wv", DType::F32, Shape{kKvWidth, kHidden}), kNoValue, "layer.v");
  const ValueId kc = b.state("layer.k_cache", DType::F32, Shape{kCacheRows, kKvWidth});
  const ValueId vc = b.state("layer.v_cache", DType::F32, Shape{kCacheRows, kKvWidth});
  g.mark_output(b.attention(q, k, v, kc, vc, attn_params(kv_offset), "layer.attn"));
  return g;
}

inline void load_attention_weights(WeightStore& store, const AttnWeights& w, Device& embed, Device& layer) {
  store.add("embed.tok",
            materialize_weight(host_f32(Shape{kVocab, kHidden}, w.tok_embd), embed, DType::F32, "embed.tok"));
  store.add("layer.wq", materialize_weight(host_f32(Shape{kHidden, kHidden}, w.wq), layer, DType::F32, "layer.wq"));
  store.add("layer.wk", materialize_weight(host_f32(Shape{kKvWidth, kHidden}, w.wk), layer, DType::F32, "layer.wk"));
  store.add("layer.wv", materialize_weight(host_f32(Shape{kKvWidth, kHidden}, w.wv), layer, DType::F32, "layer.wv"));
}

// Causal GQA attention over all tokens at once (positions 0..T-1), from the definition in op.h.
inline Rows naive_attention(const AttnWeights& w, const std::vector<int32_t>& ids) {
  const auto H = static_cast<size_t>(kHidden);
  Rows x(ids.size(), std::vector<double>(H));
  for (size_t t = 0; t < ids.size(); ++t) {
    for (size_t j = 0; j < H; ++j) x[t][j] = w.tok_embd[static_cast<size_t>(ids[t]) * H + j];
  }
  const Rows q = naive_matmul(x, w.wq, kHidden), k = naive_matmul(x, w.wk, kKvWidth),
             v = naive_matmul(x, w.wv, kKvWidth);
  const double scale = 1.0 / std::sqrt(static_cast<double>(kHeadDim));
  const size_t hd = kHeadDim;
  Rows out(ids.size(), std::vector<double>(H, 0.0));
  for (size_t t = 0; t < ids.size(); ++t) {
    for (size_t h = 0; h < static_cast<size_t>(kHeads); ++h) {
      const size_t kvh = h / (kHeads / kKvHeads);
      std::vector<double> scores(t + 1);
      double mx = -1e300;
      for (size_t s = 0; s <= t; ++s) {
        double dot = 0;
        for (size_t d = 0; d < hd; ++d) dot += q[t][h * hd + d] * k[s][kvh * hd + d];
        scores[s] = dot * scale;
        mx = std::max(mx, scores[s]);
      }
      double sum = 0;
      for (double& sc : scores) sum += (sc = std::exp(sc - mx));
      for (size_t s = 0; s <= t; ++s) {
        for (size_t d = 0; d < hd; ++d) out[t][h * hd + d] += scores[s] / sum * v[s][kvh * hd + d];
      }
    }
  }
  return out;
}

inline std::vector<float> rows_of(const Tensor& t, int64_t first, int64_t count) {
  const auto width = static_cast<size_t>(t.dim(1));
  const float* p = t.data_as<float>() + static_cast<size_t>(first) * width;
  return std::vector<float>(p, p + static_cast<size_t>(count) * width);
}

}  // namespace ferry::testing
