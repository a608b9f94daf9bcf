// Non-causal attention inside segments, no cache: what a vision tower (one segment per image, as
// many queries as keys) and a resampler (a few learned queries against each image's patches) need.
//
// Levels with a prompt attention (Isa::prompt_attention: blocks of query rows against tiles of keys,
// cpu/simd_prompt_attention.h) run it without the causal mask. Elsewhere (scalar):
// flash-attention style, through the active ISA's matmul (cpu/simd_kernels.h), so every inner loop
// is the backend's tested SIMD code at the level chosen at run time. A task is a tile of up to
// kQueryTile (query row, query head) pairs that read the same kv head of one segment: query rows
// of one head, or under GQA the heads of a few rows. It walks its segment's keys kKeyTile at a
// time: scores S = (scale * Q) K^T (one matmul), an online softmax over each row of S (running
// maximum and sum, the accumulator rescaled when the maximum grows), then the accumulator gains
// P V (one matmul against V transposed, made once per segment). No score matrix wider than a key tile.
//
// Every pair is computed on its own (the matmul's sums do not depend on the rows beside them), so
// a result does not depend on the tile it shares or on the thread count.
#include <algorithm>
#include <bit>
#include <climits>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "backends/cpu/kernels/check.h"
#include "backends/cpu/kernels/cpu/isa.h"
#include "backends/cpu/kernels/kernels.h"
#include "core/error.h"

namespace ferry::kernels {

namespace {

constexpr std::string_view kName = "segment_attention";
constexpr int64_t kQueryTile = 32;  // (query row, head) pairs per task
constexpr int64_t kKeyTile = 256;   // keys per step of the online softmax

// The softmax's inner loops, in plain C++ the compiler vectorises (at the baseline ISA: no
// branches and no float comparisons, which it will not if-convert). Per key tile and query they
// cost about a tenth of the two matmuls.

// e^x for x <= 0 (the softmax's x - max), to a few ulp; x below -87.3 gives e^-87.3 (1.2e-38, as
// good as 0 next to the maximum's 1), NaN gives NaN. x = n ln2 + r with |r| <= ln2 / 2, e^r by its
// Taylor series to degree 7 (as simd::exp), times 2^n through the exponent bits.
inline float exp_nonpositive(float x) {
  constexpr uint32_t kLimit = std::bit_cast<uint32_t>(87.3365447f);
  const uint32_t bits = std::bit_cast<uint32_t>(x);
  const uint32_t magnitude = bits & 0x7fffffffu;
  const float xc = std::bit_cast<float>((bits & 0x80000000u) | (magnitude < kLimit ? magnitude : kLimit));
  constexpr float kRound = 12582912.0f;  // 1.5 * 2^23: adding it rounds to an integer
  const float n = (xc * 1.44269504088896341f + kRound) - kRound;
  float r = xc - n * 0.693359375f;  // ln 2 in two parts (Cody-Waite); n times the first is exact
  r = r + n * 2.12194440e-4f;
  float p = 1.0f / 5040.0f;
  p = p * r + 1.0f / 720.0f;
  p = p * r + 1.0f / 120.0f;
  p = p * r + 1.0f / 24.0f;
  p = p * r + 1.0f / 6.0f;
  p = p * r + 0.5f;
  p = p * r + 1.0f;
  p = p * r + 1.0f;
  const float two_n = std::bit_cast<float>((static_cast<int32_t>(n) + 127) << 23);
  const uint32_t keep_x = 0u - static_cast<uint32_t>(magnitude > 0x7f800000u);  // NaN
  return std::bit_cast<float>((std::bit_cast<uint32_t>(p * two_n) & ~keep_x) | (bits & keep_x));
}

// Floats as integers in the same order (NaN above +inf), and back.
inline int32_t order_key(float f) {
  const int32_t b = std::bit_cast<int32_t>(f);
  return b ^ ((b >> 31) & 0x7fffffff);
}
inline float from_order_key(int32_t k) {
  return std::bit_cast<float>(k ^ ((k >> 31) & 0x7fffffff));
}

constexpr int kLanes = 8;  // partial maxima and sums, so that the compiler vectorises them

// The largest of p[0, n), n > 0 (NaN if there is one).
float max_of(const float* p, int64_t n) {
  int32_t lane[kLanes];
  for (int32_t& l : lane) l = INT32_MIN;
  int64_t j = 0;
  for (; j + kLanes <= n; j += kLanes) {
    for (int l = 0; l < kLanes; ++l) {
      const int32_t key = order_key(p[j + l]);
      lane[l] = key > lane[l] ? key : lane[l];
    }
  }
  for (int l = 0; j < n; ++j, ++l) {
    const int32_t key = order_key(p[j]);
    lane[l] = key > lane[l] ? key : lane[l];
  }
  int32_t m = lane[0];
  for (int l = 1; l < kLanes; ++l) m = lane[l] > m ? lane[l] : m;
  return from_order_key(m);
}

// p[j] = e^(p[j] - max) for j < n; returns their sum.
float exp_shifted(float* p, int64_t n, float max) {
  for (int64_t j = 0; j < n; ++j) p[j] = exp_nonpositive(p[j] - max);
  float lane[kLanes] = {};
  int64_t j = 0;
  for (; j + kLanes <= n; j += kLanes) {
    for (int l = 0; l < kLanes; ++l) lane[l] += p[j + l];
  }
  for (int l = 0; j < n; ++j, ++l) lane[l] += p[j];
  return ((lane[0] + lane[4]) + (lane[2] + lane[6])) + ((lane[1] + lane[5]) + (lane[3] + lane[7]));
}

// The segments as row ranges, checked against q and k.
struct Segment {
  int64_t q_first = 0, q_rows = 0;
  int64_t k_first = 0, k_rows = 0;
};

std::vector<Segment> segments_of(const SegmentAttentionParams& p, int64_t Tq, int64_t Tk) {
  if (p.segments.empty()) {
    fail(ErrorKind::Usage, "segment_attention: no segments for {} query and {} key rows; give at least one", Tq, Tk);
  }
  std::vector<Segment> out;
  out.reserve(p.segments.size());
  int64_t q_first = 0;
  int64_t k_first = 0;
  for (size_t i = 0; i < p.segments.size(); ++i) {
    const AttentionSegment& s = p.segments[i];
    if (s.q_rows <= 0 || s.k_rows <= 0) {
      fail(ErrorKind::Usage, "segment_attention: segment {} of {} has {} query and {} key rows; none may be empty", i,
           p.segments.size(), s.q_rows, s.k_rows);
    }
    if (s.q_rows > Tq - q_first || s.k_rows > Tk - k_first) {
      fail(ErrorKind::Shape,
           "segment_attention: segment {} of {} ({} query, {} key rows) ends past q's {} or k's {} rows; the segments "
           "must cover them exactly",
           i, p.segments.size(), s.q_rows, s.k_rows, Tq, Tk);
    }
    out.push_back({q_first, s.q_rows, k_first, s.k_rows});
    q_first += s.q_rows;
    k_first += s.k_rows;
  }
  if (q_first != Tq || k_first != Tk) {
    fail(ErrorKind::Shape,
         "segment_attention: the {} segments cover {} query and {} key rows, but q has {} and k {}; they must cover "
         "them exactly",
         p.segments.size(), q_first, k_first, Tq, Tk);
  }
  return out;
}

// dst[d * dst_stride + r] = src[r * src_stride + d] for r < R, d < D, in tiles of 16 x 16, a band of
// 16 source rows at a time read start to end (16 streams the hardware prefetcher follows).
void transpose(const float* src, int64_t src_stride, float* dst, int64_t dst_stride, int64_t R, int64_t D) {
  constexpr int64_t B = 16;
  for (int64_t r0 = 0; r0 < R; r0 += B) {
    for (int64_t d0 = 0; d0 < D; d0 += B) {
      if (d0 + B <= D && r0 + B <= R) {
        float tile[B][B];
        for (int64_t i = 0; i < B; ++i) std::memcpy(tile[i], src + (r0 + i) * src_stride + d0, sizeof(tile[i]));
        for (int64_t j = 0; j < B; ++j) {
          float row[B];
          for (int64_t i = 0; i < B; ++i) row[i] = tile[i][j];
          std::memcpy(dst + (d0 + j) * dst_stride + r0, row, sizeof(row));
        }
      } else {
        for (int64_t d = d0; d < std::min(D, d0 + B); ++d) {
          for (int64_t r = r0; r < std::min(R, r0 + B); ++r) dst[d * dst_stride + r] = src[r * src_stride + d];
        }
      }
    }
  }
}

// What a task reads and writes: q, k and out as given, V of the current segment transposed.
struct Problem {
  const float* q = nullptr;
  const float* k = nullptr;
  float* out = nullptr;
  const float* vt = nullptr;  // V^T: [kv head * dim, key] of the segment's keys, rows vt_stride apart
  int64_t vt_stride = 0;
  int64_t hd = 0, width = 0, kv_width = 0;
  int group = 1;
  float scale = 1.0f;
};

// A task's buffers: the tile's queries [kQueryTile, hd] (scaled), its scores, then weights
// [kQueryTile, kKeyTile], a key tile's P V and the accumulator [kQueryTile, hd] each, and the rows'
// running maxima and sums.
size_t scratch_floats(int64_t hd) {
  return static_cast<size_t>(3 * kQueryTile * hd + kQueryTile * kKeyTile + 2 * kQueryTile);
}

// Pairs [first_pair, first_pair + n) of segment s's kv head `kv_head`: pair i is query row
// s.q_first + i / group with head kv_head * group + i % group.
void attend_tile(const cpu::Isa& isa, const Problem& pr, const Segment& s, int64_t kv_head, int64_t first_pair,
                 int64_t n, float* scratch) {
  const int64_t hd = pr.hd;
  float* q_tile = scratch;
  float* s_tile = q_tile + kQueryTile * hd;
  float* pv = s_tile + kQueryTile * kKeyTile;
  float* acc = pv + kQueryTile * hd;
  float* row_max = acc + kQueryTile * hd;
  float* row_sum = row_max + kQueryTile;
  const auto offset_of = [&](int64_t i) {
    const int64_t pair = first_pair + i;
    return (s.q_first + pair / pr.group) * pr.width + (kv_head * pr.group + pair % pr.group) * hd;
  };
  for (int64_t i = 0; i < n; ++i) {
    const float* src = pr.q + offset_of(i);
    for (int64_t d = 0; d < hd; ++d) q_tile[i * hd + d] = src[d] * pr.scale;
  }
  std::fill(acc, acc + n * hd, 0.0f);
  std::fill(row_max, row_max + n, -INFINITY);
  std::fill(row_sum, row_sum + n, 0.0f);
  for (int64_t k0 = 0; k0 < s.k_rows; k0 += kKeyTile) {
    const int64_t keys = std::min(kKeyTile, s.k_rows - k0);
    cpu::MatmulArgs scores;  // s_tile[i, j] = q_tile[i] . key k0 + j
    scores.x = q_tile;
    scores.M = n;
    scores.K = hd;
    scores.x_stride = hd;
    scores.w = reinterpret_cast<const uint8_t*>(pr.k + (s.k_first + k0) * pr.kv_width + kv_head * hd);
    scores.w_row_bytes = static_cast<size_t>(pr.kv_width) * sizeof(float);
    scores.y = s_tile;
    scores.y_stride = kKeyTile;
    scores.prefetch = false;
    isa.matmul(scores, 0, keys);
    for (int64_t i = 0; i < n; ++i) {
      float* row = s_tile + i * kKeyTile;
      const float new_max = std::max(row_max[i], max_of(row, keys));
      const float keep = std::exp(row_max[i] - new_max);  // 0 on the first tile
      row_sum[i] = row_sum[i] * keep + exp_shifted(row, keys, new_max);
      row_max[i] = new_max;
      if (keep != 1.0f) {
        for (int64_t d = 0; d < hd; ++d) acc[i * hd + d] *= keep;
      }
    }
    cpu::MatmulArgs values;  // pv[i, d] = sum over j of s_tile[i, j] * value k0 + j's dim d
    values.x = s_tile;
    values.M = n;
    values.K = keys;
    values.x_stride = kKeyTile;
    values.w = reinterpret_cast<const uint8_t*>(pr.vt + kv_head * hd * pr.vt_stride + k0);
    values.w_row_bytes = static_cast<size_t>(pr.vt_stride) * sizeof(float);
    values.y = pv;
    values.y_stride = hd;
    values.prefetch = false;
    isa.matmul(values, 0, hd);
    for (int64_t e = 0; e < n * hd; ++e) acc[e] += pv[e];
  }
  for (int64_t i = 0; i < n; ++i) {
    float* dst = pr.out + offset_of(i);
    const float inv = 1.0f / row_sum[i];
    for (int64_t d = 0; d < hd; ++d) dst[d] = acc[i * hd + d] * inv;
  }
}

// The level's prompt attention (Isa::prompt_attention) run non-causally over one segment: tasks of
// (kv head, a block of query rows), the block's rows x the group's heads about kPromptRows rows,
// K and V read in place.
void attend_segment_in_blocks(const cpu::Isa& isa, const Problem& pr, const float* v, const Segment& s,
                              ThreadPool& pool) {
  const int64_t block = std::max<int64_t>(1, cpu::AttentionHeads::kPromptRows / pr.group);
  const int64_t n_blocks = (s.q_rows + block - 1) / block;
  const int64_t n_kv_head = pr.kv_width / pr.hd;
  const size_t scratch_per_thread =
      cpu::AttentionHeads::prompt_scratch_floats(DType::F32, static_cast<int>(pr.hd), block * pr.group);
  std::vector<float> scratch(static_cast<size_t>(pool.size()) * scratch_per_thread);
  pool.parallel_for(n_blocks * n_kv_head, [&](int64_t task, int thread) {
    const int64_t first = task / n_kv_head * block;
    const int64_t kv_head = task % n_kv_head;
    const int64_t head_offset = kv_head * pr.group * pr.hd;
    cpu::AttentionHeads heads;
    heads.q = pr.q + (s.q_first + first) * pr.width + head_offset;
    heads.n_heads = pr.group;
    heads.n_tokens = std::min(block, s.q_rows - first);
    heads.token_stride = pr.width;
    heads.cache_type = DType::F32;
    heads.k_cache = reinterpret_cast<const uint8_t*>(pr.k + s.k_first * pr.kv_width);
    heads.v_cache = reinterpret_cast<const uint8_t*>(v + s.k_first * pr.kv_width);
    heads.cache_row_bytes = static_cast<size_t>(pr.kv_width) * sizeof(float);
    heads.first_col = kv_head * pr.hd;
    heads.n_keys = s.k_rows;
    heads.causal = false;
    heads.head_dim = static_cast<int>(pr.hd);
    heads.scale = pr.scale;
    heads.out = pr.out + (s.q_first + first) * pr.width + head_offset;
    heads.scratch = scratch.data() + static_cast<size_t>(thread) * scratch_per_thread;
    isa.prompt_attention(heads);
  });
}

}  // namespace

void segment_attention(const Tensor& q, const Tensor& k, const Tensor& v, const SegmentAttentionParams& p, Tensor& out,
                       ThreadPool& pool) {
  check_f32(kName, q, "query q");
  check_f32(kName, k, "key k");
  check_f32(kName, v, "value v");
  check_f32(kName, out, "output");
  check_same_device(kName, {&q, &k, &v, &out});
  if (p.n_head <= 0 || p.n_kv_head <= 0 || p.head_dim <= 0 || p.n_head % p.n_kv_head != 0) {
    fail(ErrorKind::Usage,
         "segment_attention: {} heads, {} kv heads, head_dim {}: counts must be positive and heads a multiple of kv "
         "heads",
         p.n_head, p.n_kv_head, p.head_dim);
  }
  const int64_t hd = p.head_dim;
  const int64_t width = static_cast<int64_t>(p.n_head) * hd;
  const int64_t kv_width = static_cast<int64_t>(p.n_kv_head) * hd;
  if (q.rank() != 2 || q.dim(1) != width) {
    fail(ErrorKind::Shape, "segment_attention: query '{}' {} is not [Tq, {} heads * {}]", q.name(), q.shape().str(),
         p.n_head, hd);
  }
  if (k.rank() != 2 || k.dim(1) != kv_width) {
    fail(ErrorKind::Shape, "segment_attention: key '{}' {} is not [Tk, {} kv heads * {}]", k.name(), k.shape().str(),
         p.n_kv_head, hd);
  }
  check_shape(kName, v, "value v", k.shape());
  check_shape(kName, out, "output", q.shape());
  std::vector<Segment> segments = segments_of(p, q.dim(0), k.dim(0));

  Problem pr;
  pr.q = q.data_as<const float>();
  pr.k = k.data_as<const float>();
  pr.out = out.data_as<float>();
  pr.hd = hd;
  pr.width = width;
  pr.kv_width = kv_width;
  pr.group = p.n_head / p.n_kv_head;
  pr.scale = p.scale;
  const float* vd = v.data_as<const float>();
  const cpu::Isa& isa = cpu::active_isa();
  if (isa.prompt_attention != nullptr) {
    for (const Segment& s : segments) attend_segment_in_blocks(isa, pr, vd, s, pool);
    return;
  }
  std::vector<float> scratch(static_cast<size_t>(pool.size()) * scratch_floats(hd));
  // The segment's V transposed (see Problem::vt), kept per calling thread between calls (a tower
  // runs this with the same shapes layer after layer): the largest segment's keys times kv_width.
  // Its stride is kept off multiples of 1 KiB, whose rows would share a few cache sets.
  thread_local std::vector<float> vt;
  for (const Segment& s : segments) {
    pr.vt_stride = (s.k_rows + 15) / 16 * 16;
    if (pr.vt_stride % 256 == 0) pr.vt_stride += 16;
    vt.resize(std::max(vt.size(), static_cast<size_t>(pr.vt_stride * kv_width)));
    pr.vt = vt.data();
    float* const vt_data = vt.data();
    // All kv heads at once, a block of whole rows per task: each source row is read start to end.
    constexpr int64_t kTransposeRows = 16;
    pool.parallel_range((s.k_rows + kTransposeRows - 1) / kTransposeRows, min_chunk_for(kTransposeRows * kv_width),
                        [&](int64_t begin, int64_t end, int) {
                          const int64_t r0 = begin * kTransposeRows;
                          const int64_t r1 = std::min(s.k_rows, end * kTransposeRows);
                          transpose(vd + (s.k_first + r0) * kv_width, kv_width, vt_data + r0, pr.vt_stride, r1 - r0,
                                    kv_width);
                        });
    // Tasks: (kv head, tile of its pairs). A kv head's pairs are the segment's (query row, head of
    // the group) in row-major order, cut into tiles of kQueryTile; consecutive tasks share the kv
    // head, so they read the same K/V rows while those are still in cache.
    const int64_t pairs = s.q_rows * pr.group;
    const int64_t tiles = (pairs + kQueryTile - 1) / kQueryTile;
    const int64_t work_per_tile = 2 * std::min(pairs, kQueryTile) * s.k_rows * hd;  // multiply-adds
    pool.parallel_range(p.n_kv_head * tiles, min_chunk_for(work_per_tile, int64_t{1} << 16),
                        [&](int64_t begin, int64_t end, int thread) {
                          float* mine = scratch.data() + static_cast<size_t>(thread) * scratch_floats(hd);
                          for (int64_t task = begin; task < end; ++task) {
                            const int64_t first_pair = task % tiles * kQueryTile;
                            attend_tile(isa, pr, s, task / tiles, first_pair, std::min(kQueryTile, pairs - first_pair),
                                        mine);
                          }
                        });
  }
}

}  // namespace ferry::kernels
