// Attention for many query tokens at once (a prompt), written once over the vector traits S of
// simd_kernels.h (include it first, from inside an ISA file's target region).
//
// The rows are (token, head) pairs of the query heads that share one kv head, a few dozen of
// them. Per tile of kKeyTile keys, two small matrix products whose vectors run along the rows:
//   scores^T [key][row] = sum_d K[key][d] * Q^T[d][row]   (a K element broadcast, a Q^T vector)
//   O^T [d][row]       += sum_key V[key][d] * P^T[key][row]
// so every FMA does W rows' work, nothing needs a horizontal sum, and the online softmax (running
// maximum and sum per row) is elementwise on vectors. Each K and V row is widened once per tile
// (cache_tile) and then serves every row; the per-token loop (attention()) reads it once per token.
// Rows past the last (token, head) pair are padding: q is 0 there, they see the keys the last
// token sees, and their outputs are dropped.
#pragma once

#include <cstdint>

#include "backends/cpu/kernels/cpu/isa.h"
#include "backends/cpu/kernels/cpu/simd_kernels.h"

namespace ferry::kernels::cpu::simd {

// Keys per register tile of the scores, and head_dim elements per register tile of P V: with two
// vectors of rows, 2 x kKeys accumulators (16 of AVX-512's 32 registers, 8 of AVX2's 16).
template <class S>
constexpr int kPromptKeys = S::W >= 16 ? 8 : 4;

// scores^T[j][row vectors v0, v0 + NV) for keys j in [j0, j0 + NK): Q^T is [hd][rows_p], K rows
// k_stride apart.
template <class S, int NK, int NV>
void prompt_scores(const float* qt, int64_t rows_p, const float* k, int64_t k_stride, int64_t hd, int64_t j0,
                   int64_t v0, float* st) {
  using V = typename S::V;
  V acc[NK][NV];
  for (int j = 0; j < NK; ++j) {
    for (int v = 0; v < NV; ++v) acc[j][v] = S::zero();
  }
  const float* kj = k + j0 * k_stride;
  for (int64_t d = 0; d < hd; ++d) {
    V q[NV];
    for (int v = 0; v < NV; ++v) q[v] = S::load_x(qt + d * rows_p + (v0 + v) * S::W);
    for (int j = 0; j < NK; ++j) {
      const V kv = S::set1(kj[j * k_stride + d]);
      for (int v = 0; v < NV; ++v) acc[j][v] = S::fma(kv, q[v], acc[j][v]);
    }
  }
  for (int j = 0; j < NK; ++j) {
    for (int v = 0; v < NV; ++v) S::store(st + (j0 + j) * rows_p + (v0 + v) * S::W, acc[j][v]);
  }
}

// Lane indices 0, 1, 2, ...: with a vector's first row, the rows of its lanes.
alignas(64) inline constexpr float kLaneIndex[16] = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15};

// O^T[d][row vectors v0, v0 + NV) for d in [d0, d0 + ND): O^T = O^T * keep + sum_j V[j][d] P^T[j].
// Keys [0, shared) of the tile are seen by every row; key j >= shared only by rows from (j - shared
// + 1) * heads on (the causal triangle). The rows that do not see a key skip it rather than add 0 *
// V: an infinite or NaN value of a later token must not reach an earlier one.
template <class S, int ND, int NV>
void prompt_values(float* ot, int64_t rows_p, const float* pt, const float* keep, const float* v, int64_t v_stride,
                   int64_t count, int64_t shared, int64_t heads, int64_t d0, int64_t v0) {
  using V = typename S::V;
  V acc[ND][NV];
  for (int vi = 0; vi < NV; ++vi) {
    const V factor = S::load_x(keep + (v0 + vi) * S::W);
    for (int d = 0; d < ND; ++d) acc[d][vi] = S::mul(S::load_x(ot + (d0 + d) * rows_p + (v0 + vi) * S::W), factor);
  }
  for (int64_t j = 0; j < count; ++j) {
    V p[NV];
    for (int vi = 0; vi < NV; ++vi) p[vi] = S::load_x(pt + j * rows_p + (v0 + vi) * S::W);
    const float* vj = v + j * v_stride + d0;
    if (j < shared) {
      for (int d = 0; d < ND; ++d) {
        const V vv = S::set1(vj[d]);
        for (int vi = 0; vi < NV; ++vi) acc[d][vi] = S::fma(vv, p[vi], acc[d][vi]);
      }
    } else {
      // Negative in the lanes of rows before the first that sees key j.
      V before[NV];
      const auto first = static_cast<float>((j - shared + 1) * heads);
      for (int vi = 0; vi < NV; ++vi) {
        before[vi] =
            S::sub(S::add(S::load_x(kLaneIndex), S::set1(static_cast<float>((v0 + vi) * S::W))), S::set1(first));
      }
      for (int d = 0; d < ND; ++d) {
        const V vv = S::set1(vj[d]);
        for (int vi = 0; vi < NV; ++vi) {
          acc[d][vi] = S::select_negative(before[vi], S::fma(vv, p[vi], acc[d][vi]), acc[d][vi]);
        }
      }
    }
  }
  for (int d = 0; d < ND; ++d) {
    for (int vi = 0; vi < NV; ++vi) S::store(ot + (d0 + d) * rows_p + (v0 + vi) * S::W, acc[d][vi]);
  }
}

// The row vectors two at a time, then a last single one.
template <class S, int NK>
void prompt_scores_rows(const float* qt, int64_t rows_p, const float* k, int64_t k_stride, int64_t hd, int64_t j0,
                        float* st) {
  const int64_t vectors = rows_p / S::W;
  int64_t v0 = 0;
  for (; v0 + 2 <= vectors; v0 += 2) prompt_scores<S, NK, 2>(qt, rows_p, k, k_stride, hd, j0, v0, st);
  if (v0 < vectors) prompt_scores<S, NK, 1>(qt, rows_p, k, k_stride, hd, j0, v0, st);
}

template <class S, int ND>
void prompt_values_rows(float* ot, int64_t rows_p, const float* pt, const float* keep, const float* v, int64_t v_stride,
                        int64_t count, int64_t shared, int64_t heads, int64_t d0) {
  const int64_t vectors = rows_p / S::W;
  int64_t v0 = 0;
  for (; v0 + 2 <= vectors; v0 += 2) {
    prompt_values<S, ND, 2>(ot, rows_p, pt, keep, v, v_stride, count, shared, heads, d0, v0);
  }
  if (v0 < vectors) prompt_values<S, ND, 1>(ot, rows_p, pt, keep, v, v_stride, count, shared, heads, d0, v0);
}

template <class S>
void prompt_attention(const AttentionHeads& r) {
  using V = typename S::V;
  constexpr int64_t kTile = AttentionHeads::kKeyTile;
  constexpr int kKeys = kPromptKeys<S>;
  const int64_t hd = r.head_dim;
  const int64_t heads = r.n_heads;
  const int64_t rows = r.n_tokens * heads;  // row = token * heads + head
  const int64_t rows_p = (rows + 15) / 16 * 16;
  float* qt = r.scratch;         // [hd][rows_p]
  float* ot = qt + hd * rows_p;  // [hd][rows_p]
  float* st = ot + hd * rows_p;  // [kTile][rows_p]: scores, then probabilities
  float* run_max = st + kTile * rows_p;
  float* run_sum = run_max + rows_p;
  float* keep = run_sum + rows_p;
  float* tile = keep + rows_p;  // [kTile][hd]: K or V rows widened (not f32 caches)

  // A row at a time, its q read along (a division per element made this loop a third of the
  // kernel's own time).
  const float scale = r.scale;
  constexpr int64_t kAhead = 4;  // rows: a token's q is a page or more from the next one's
  for (int64_t m = 0; m < rows_p; ++m) {
    const float* qm = m < rows ? r.q + (m / heads) * r.token_stride + (m % heads) * hd : nullptr;
    if (m + kAhead < rows) {
      const float* next = r.q + ((m + kAhead) / heads) * r.token_stride + ((m + kAhead) % heads) * hd;
      prefetch_row<S>(next, hd, 3);
    }
    for (int64_t d = 0; d < hd; ++d) {
      // q scaled here, so the masked scores stay -inf whatever the scale.
      qt[d * rows_p + m] = qm != nullptr ? qm[d] * scale : 0.0f;
    }
  }
  for (int64_t i = 0; i < hd * rows_p; i += S::W) S::store(ot + i, S::zero());
  for (int64_t m = 0; m < rows_p; ++m) {
    run_max[m] = -INFINITY;
    run_sum[m] = 0.0f;
  }
  const int64_t n_keys = r.causal ? r.n_keys + r.n_tokens - 1 : r.n_keys;  // what the last token sees
  for (int64_t start = 0; start < n_keys; start += kTile) {
    const int64_t count = n_keys - start < kTile ? n_keys - start : kTile;
    int64_t k_stride = 0;
    const float* k_rows = cache_tile<S>(r, r.k_cache, start, count, tile, &k_stride);
    int64_t j = 0;
    for (; j + kKeys <= count; j += kKeys) prompt_scores_rows<S, kKeys>(qt, rows_p, k_rows, k_stride, hd, j, st);
    for (; j < count; ++j) prompt_scores_rows<S, 1>(qt, rows_p, k_rows, k_stride, hd, j, st);
    // Causal mask: token t sees keys [0, n_keys_0 + t); only tiles past the first token's keys
    // hold keys some rows must not see.
    if (r.causal && start + count > r.n_keys) {
      for (int64_t m = 0; m < rows; ++m) {
        const int64_t visible = r.n_keys + m / heads - start;  // keys of this tile the row sees
        for (int64_t jj = visible < 0 ? 0 : visible; jj < count; ++jj) st[jj * rows_p + m] = -INFINITY;
      }
    }
    // Online softmax, a vector of rows at a time: new maximum, the factor that rescales what came
    // before (0 on the first tile), this tile's weights.
    for (int64_t m = 0; m < rows_p; m += S::W) {
      V tile_max = S::set1(-INFINITY);
      for (int64_t jj = 0; jj < count; ++jj) {
        tile_max = S::max(tile_max, S::load_x(st + jj * rows_p + m));
      }
      const V old_max = S::load_x(run_max + m);
      const V new_max = S::max(old_max, tile_max);
      const V factor = exp<S>(S::sub(old_max, new_max));
      V sum = S::zero();
      for (int64_t jj = 0; jj < count; ++jj) {
        const V p = exp<S>(S::sub(S::load_x(st + jj * rows_p + m), new_max));
        S::store(st + jj * rows_p + m, p);
        sum = S::add(sum, p);
      }
      S::store(run_sum + m, S::fma(S::load_x(run_sum + m), factor, sum));
      S::store(run_max + m, new_max);
      S::store(keep + m, factor);
    }
    int64_t v_stride = 0;
    const float* v_rows = cache_tile<S>(r, r.v_cache, start, count, tile, &v_stride);
    // Keys every row sees: all of them without the causal mask.
    const int64_t shared = r.causal ? r.n_keys - start : count;
    int64_t d = 0;
    for (; d + kKeys <= hd; d += kKeys) {
      prompt_values_rows<S, kKeys>(ot, rows_p, st, keep, v_rows, v_stride, count, shared, heads, d);
    }
    for (; d < hd; ++d) prompt_values_rows<S, 1>(ot, rows_p, st, keep, v_rows, v_stride, count, shared, heads, d);
  }
  for (int64_t m = 0; m < rows; ++m) {
    const float inv = 1.0f / run_sum[m];
    float* out = r.out + (m / heads) * r.token_stride + (m % heads) * hd;
    for (int64_t dd = 0; dd < hd; ++dd) out[dd] = ot[dd * rows_p + m] * inv;
  }
}

}  // namespace ferry::kernels::cpu::simd
