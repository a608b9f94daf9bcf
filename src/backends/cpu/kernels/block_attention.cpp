// Non-causal attention inside blocks of rows (one image each), no cache: what a vision tower's
// layers need. Each (query, head) scores every key of its block, softmaxes and sums the values.
#include <algorithm>
#include <cmath>
#include <vector>

#include "backends/cpu/kernels/check.h"
#include "backends/cpu/kernels/kernels.h"
#include "core/error.h"

namespace ferry::kernels {

void block_attention(const Tensor& q, const Tensor& k, const Tensor& v, const BlockAttentionParams& p, Tensor& out,
                     ThreadPool& pool) {
  constexpr std::string_view kName = "block_attention";
  check_f32(kName, q, "query q");
  check_f32(kName, k, "key k");
  check_f32(kName, v, "value v");
  check_f32(kName, out, "output");
  check_same_device(kName, {&q, &k, &v, &out});
  if (p.n_head <= 0 || p.n_kv_head <= 0 || p.head_dim <= 0 || p.n_head % p.n_kv_head != 0 || p.block <= 0) {
    fail(ErrorKind::Usage,
         "block_attention: {} heads, {} kv heads, head_dim {}, blocks of {}: all must be positive and heads a multiple "
         "of kv heads",
         p.n_head, p.n_kv_head, p.head_dim, p.block);
  }
  const int64_t hd = p.head_dim;
  if (q.rank() != 2 || q.dim(1) != p.n_head * hd || q.dim(0) % p.block != 0) {
    fail(ErrorKind::Shape, "block_attention: query '{}' {} is not [blocks * {}, {} heads * {}]", q.name(),
         q.shape().str(), p.block, p.n_head, hd);
  }
  const int64_t T = q.dim(0);
  const int64_t kv_width = p.n_kv_head * hd;
  check_shape(kName, k, "key k", Shape{T, kv_width});
  check_shape(kName, v, "value v", Shape{T, kv_width});
  check_shape(kName, out, "output", q.shape());

  const int64_t L = p.block;
  const int group = p.n_head / p.n_kv_head;
  const float* qd = q.data_as<float>();
  const float* kd = k.data_as<float>();
  const float* vd = v.data_as<float>();
  float* od = out.data_as<float>();
  // Task r = (head, query row): consecutive tasks share a head, so they read the same keys.
  const int64_t tasks = p.n_head * T;
  pool.parallel_range(tasks, min_chunk_for(L * hd * 2), [&](int64_t begin, int64_t end, int) {
    std::vector<float> scores(static_cast<size_t>(L));
    for (int64_t r = begin; r < end; ++r) {
      const int64_t h = r / T;
      const int64_t t = r % T;
      const int64_t first = t / L * L;  // the block's first row
      const int64_t kv_col = h / group * hd;
      const float* qrow = qd + t * p.n_head * hd + h * hd;
      float best = -INFINITY;
      for (int64_t j = 0; j < L; ++j) {
        const float* krow = kd + (first + j) * kv_width + kv_col;
        float dot = 0.0f;
        for (int64_t i = 0; i < hd; ++i) dot += qrow[i] * krow[i];
        scores[static_cast<size_t>(j)] = dot * p.scale;
        best = std::max(best, scores[static_cast<size_t>(j)]);
      }
      float sum = 0.0f;
      for (float& s : scores) {
        s = std::exp(s - best);
        sum += s;
      }
      float* orow = od + t * p.n_head * hd + h * hd;
      std::fill(orow, orow + hd, 0.0f);
      for (int64_t j = 0; j < L; ++j) {
        const float w = scores[static_cast<size_t>(j)] / sum;
        const float* vrow = vd + (first + j) * kv_width + kv_col;
        for (int64_t i = 0; i < hd; ++i) orow[i] += w * vrow[i];
      }
    }
  });
}

}  // namespace ferry::kernels
