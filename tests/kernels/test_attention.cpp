// attention against a naive double reference: full score rows, exact softmax, causal by slot.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "backends/cpu/kernels/cpu/isa.h"
#include "backends/cpu/kernels/kernels.h"
#include "backends/cpu/kernels/simd.h"
#include "reference.h"

using namespace ferry;
using namespace ferry::test;

namespace {

struct Case {
  int n_head, n_kv_head, head_dim;
  int64_t T, kv_offset, S;
  float scale;
  float amplitude;  // of q and k: larger values make the softmax peaky
};

// A KV-cache row of n floats in `type`, rounded as the reference implementations round (written
// here from ggml's layouts, not with the kernels' converters): f16 and bf16 to nearest even (NaN
// stays NaN), q8_0 as ggml's quantize_row_q8_0_ref: per block of 32, d = amax / 127 stored as f16,
// q = round(x / d) half away from zero.
std::vector<uint8_t> ref_round_row(DType type, const float* x, int64_t n) {
  std::vector<uint8_t> out(*dtype_bytes(type, static_cast<uint64_t>(n)));
  const auto put16 = [&](size_t at, uint16_t h) { std::memcpy(out.data() + at, &h, 2); };
  switch (type) {
    case DType::F32:
      std::memcpy(out.data(), x, out.size());
      break;
    case DType::F16:
      for (int64_t i = 0; i < n; ++i) put16(static_cast<size_t>(2 * i), f32_to_f16(x[i]));
      break;
    case DType::BF16:
      for (int64_t i = 0; i < n; ++i) put16(static_cast<size_t>(2 * i), f32_to_bf16(x[i]));
      break;
    default:  // q8_0
      for (int64_t b = 0; b < n / 32; ++b) {
        float amax = 0.0f;
        for (int j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(x[b * 32 + j]));
        const float d = amax / 127.0f;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        const auto at = static_cast<size_t>(b * 34);
        put16(at, f32_to_f16(d));
        for (int j = 0; j < 32; ++j)
          out[at + 2 + static_cast<size_t>(j)] =
              static_cast<uint8_t>(static_cast<int8_t>(std::round(x[b * 32 + j] * id)));
      }
  }
  return out;
}

// Element i of a cache row in `type`, exactly (double).
double ref_cache_element(DType type, const uint8_t* row, int64_t i) {
  uint16_t h;
  switch (type) {
    case DType::F32: {
      float f;
      std::memcpy(&f, row + 4 * i, 4);
      return f;
    }
    case DType::F16:
      std::memcpy(&h, row + 2 * i, 2);
      return f16_to_f32(h);
    case DType::BF16:
      std::memcpy(&h, row + 2 * i, 2);
      return bf16_to_f32(h);
    default: {  // q8_0
      const uint8_t* block = row + (i / 32) * 34;
      return ref_half(block) * static_cast<int8_t>(block[2 + i % 32]);
    }
  }
}

// The whole cache [S, kvw] in `type` from f32 values; rows in [poison_from, S) and the rows the
// kernel must write, [new_from, new_to), hold NaN (q8_0: every block's scale is an f16 NaN), so a
// read past the causal limit or of a row left unwritten poisons the output.
std::vector<uint8_t> make_cache(DType type, const std::vector<float>& values, int64_t S, int64_t kvw,
                                int64_t poison_from, int64_t new_from, int64_t new_to) {
  const size_t row_bytes = *dtype_bytes(type, static_cast<uint64_t>(kvw));
  std::vector<uint8_t> bytes(row_bytes * static_cast<size_t>(S));
  const std::vector<float> nan_row(static_cast<size_t>(kvw), std::numeric_limits<float>::quiet_NaN());
  for (int64_t r = 0; r < S; ++r) {
    const bool poison = r >= poison_from || (r >= new_from && r < new_to);
    std::vector<uint8_t> row = ref_round_row(type, poison ? nan_row.data() : values.data() + r * kvw, kvw);
    if (poison && type == DType::Q8_0) {
      for (size_t at = 0; at < row.size(); at += 34) {
        row[at] = 0x00;
        row[at + 1] = 0x7e;  // f16 NaN
      }
    }
    std::memcpy(bytes.data() + static_cast<size_t>(r) * row_bytes, row.data(), row_bytes);
  }
  return bytes;
}

Tensor cache_tensor(DType type, int64_t S, int64_t kvw, const std::vector<uint8_t>& bytes, const std::string& name) {
  Tensor t = Tensor::host(type, Shape{S, kvw}, name);
  EXPECT_EQ(t.nbytes(), bytes.size());
  std::memcpy(t.data(), bytes.data(), bytes.size());
  return t;
}

void check_attention(const Case& c, int threads, DType cache_type = DType::F32) {
  SCOPED_TRACE(std::string(dtype_name(cache_type)) + " cache");
  ThreadPool pool(threads);
  const int64_t qw = static_cast<int64_t>(c.n_head) * c.head_dim;
  const int64_t kvw = static_cast<int64_t>(c.n_kv_head) * c.head_dim;
  const auto qv = random_floats(static_cast<size_t>(c.T * qw), 21, -c.amplitude, c.amplitude);
  const auto kv = random_floats(static_cast<size_t>(c.T * kvw), 22, -c.amplitude, c.amplitude);
  const auto vv = random_floats(static_cast<size_t>(c.T * kvw), 23);
  // Rows before kv_offset hold an earlier step's keys; rows after the new ones are NaN, so
  // reading past the causal limit poisons the output; so are the rows the kernel must write.
  const auto kc = make_cache(cache_type, random_floats(static_cast<size_t>(c.S * kvw), 24, -c.amplitude, c.amplitude),
                             c.S, kvw, c.kv_offset + c.T, c.kv_offset, c.kv_offset + c.T);
  const auto vc = make_cache(cache_type, random_floats(static_cast<size_t>(c.S * kvw), 25), c.S, kvw, c.kv_offset + c.T,
                             c.kv_offset, c.kv_offset + c.T);
  Tensor q = f32_tensor(Shape{c.T, qw}, qv, "q");
  Tensor k = f32_tensor(Shape{c.T, kvw}, kv, "k");
  Tensor v = f32_tensor(Shape{c.T, kvw}, vv, "v");
  Tensor k_cache = cache_tensor(cache_type, c.S, kvw, kc, "k_cache");
  Tensor v_cache = cache_tensor(cache_type, c.S, kvw, vc, "v_cache");
  Tensor out = Tensor::host(DType::F32, Shape{c.T, qw}, "out");
  AttentionParams p{c.n_head, c.n_kv_head, c.head_dim, c.scale, c.kv_offset};
  kernels::attention(q, k, v, k_cache, v_cache, p, out, pool);

  // The new rows landed in the caches rounded as the reference rounds them; nothing else changed.
  const size_t row_bytes = kc.size() / static_cast<size_t>(c.S);
  const auto* kc_after = static_cast<const uint8_t*>(k_cache.data());
  const auto* vc_after = static_cast<const uint8_t*>(v_cache.data());
  for (int64_t row = 0; row < c.S; ++row) {
    const bool is_new = row >= c.kv_offset && row < c.kv_offset + c.T;
    const size_t at = static_cast<size_t>(row) * row_bytes;
    const std::vector<uint8_t> want_k =
        is_new ? ref_round_row(cache_type, kv.data() + (row - c.kv_offset) * kvw, kvw)
               : std::vector<uint8_t>(kc.begin() + static_cast<std::ptrdiff_t>(at),
                                      kc.begin() + static_cast<std::ptrdiff_t>(at + row_bytes));
    const std::vector<uint8_t> want_v =
        is_new ? ref_round_row(cache_type, vv.data() + (row - c.kv_offset) * kvw, kvw)
               : std::vector<uint8_t>(vc.begin() + static_cast<std::ptrdiff_t>(at),
                                      vc.begin() + static_cast<std::ptrdiff_t>(at + row_bytes));
    ASSERT_EQ(std::memcmp(kc_after + at, want_k.data(), row_bytes), 0) << "key cache row " << row;
    ASSERT_EQ(std::memcmp(vc_after + at, want_v.data(), row_bytes), 0) << "value cache row " << row;
  }
  // The values the caches hold (new rows rounded), exactly.
  const auto key = [&](int64_t s, int64_t col) { return ref_cache_element(cache_type, kc_after + s * row_bytes, col); };
  const auto value = [&](int64_t s, int64_t col) {
    return ref_cache_element(cache_type, vc_after + s * row_bytes, col);
  };

  const auto ov = values_of(out);
  const int group = c.n_head / c.n_kv_head;
  for (int64_t t = 0; t < c.T; ++t) {
    for (int h = 0; h < c.n_head; ++h) {
      const int64_t kv_col = static_cast<int64_t>(h / group) * c.head_dim;
      const int64_t n_keys = c.kv_offset + t + 1;
      std::vector<double> scores(static_cast<size_t>(n_keys));
      double max_score = -INFINITY;
      double max_abs_score_terms = 0.0;
      for (int64_t s = 0; s < n_keys; ++s) {
        double dot = 0.0;
        double terms = 0.0;
        for (int d = 0; d < c.head_dim; ++d) {
          const double prod =
              static_cast<double>(qv[static_cast<size_t>(t * qw + h * c.head_dim + d)]) * key(s, kv_col + d);
          dot += prod;
          terms += std::fabs(prod);
        }
        scores[static_cast<size_t>(s)] = dot * c.scale;
        max_score = std::max(max_score, scores[static_cast<size_t>(s)]);
        max_abs_score_terms = std::max(max_abs_score_terms, terms * std::fabs(c.scale));
      }
      double denom = 0.0;
      for (double& s : scores) {
        s = std::exp(s - max_score);
        denom += s;
      }
      // f32 rounding perturbs each score by ~eps * sum|q_d k_d| * scale, which changes each
      // softmax weight by that much relative; the output (a convex mix of |v| <= 1) moves by at
      // most a few times that. 2e-6 (~30 eps) per unit of score magnitude, plus eps-level terms.
      // The same for every cache dtype: the kernel widens the cache exactly, and the reference
      // reads the same rounded values.
      const double tol = 2e-6 * (1.0 + max_abs_score_terms);
      for (int d = 0; d < c.head_dim; ++d) {
        double ref = 0.0;
        for (int64_t s = 0; s < n_keys; ++s) ref += scores[static_cast<size_t>(s)] * value(s, kv_col + d);
        ref /= denom;
        ASSERT_NEAR(ov[static_cast<size_t>(t * qw + h * c.head_dim + d)], ref, tol)
            << kernels::simd_level() << " heads " << c.n_head << "/" << c.n_kv_head << " hd " << c.head_dim << " T "
            << c.T << " offset " << c.kv_offset << " at t " << t << " h " << h << " d " << d;
      }
    }
  }
}

}  // namespace

TEST(Attention, MatchesNaiveReferenceAcrossShapesAndLevels) {
  SimdLevelGuard guard;
  const Case cases[] = {
      {4, 4, 16, 1, 0, 1, 0.25f, 1.0f},         // first token of a sequence
      {4, 4, 64, 5, 0, 9, 0.125f, 1.0f},        // prefill, MHA
      {8, 2, 64, 7, 13, 40, 0.125f, 1.0f},      // GQA, cache pre-filled
      {6, 1, 48, 3, 70, 80, 0.144f, 1.0f},      // MQA, odd head_dim, more keys than one tile
      {4, 2, 128, 1, 200, 260, 0.0884f, 1.0f},  // decode over several tiles
      {2, 2, 17, 9, 30, 45, 0.3f, 1.0f},        // head_dim not a multiple of any vector width
      {4, 2, 32, 4, 120, 130, 1.0f, 3.0f},      // peaky softmax: large scores
      {8, 1, 20, 2, 100, 110, 0.2f, 1.0f},      // MQA with 8 heads (two slices of 4), odd head_dim
  };
  for (const std::string& level : kernels::available_simd_levels()) {
    kernels::set_simd_level(level);
    for (const Case& c : cases) check_attention(c, 2);
  }
  check_attention(cases[2], 1);
  check_attention(cases[3], 3);
}

// f16, bf16 and q8_0 caches: new rows rounded as ggml rounds them, the cache read tile by tile
// (several tiles, GQA slices, heads that start inside a q8_0 block) at every SIMD level, against the
// reference over the same rounded values.
TEST(Attention, NarrowCachesMatchTheReferenceOverTheRoundedValues) {
  SimdLevelGuard guard;
  const Case cases[] = {
      {4, 4, 16, 1, 0, 1, 0.25f, 1.0f},         // first token; q8_0: two heads per block
      {4, 4, 64, 5, 0, 9, 0.125f, 1.0f},        // prefill, MHA
      {8, 2, 64, 7, 13, 40, 0.125f, 1.0f},      // GQA, cache pre-filled
      {4, 2, 128, 1, 200, 260, 0.0884f, 1.0f},  // decode over several tiles
      {4, 2, 32, 4, 120, 130, 1.0f, 3.0f},      // peaky softmax: large scores
      {8, 4, 24, 3, 70, 80, 0.2f, 1.0f},        // kv width 96: heads start inside q8_0 blocks
      {8, 1, 32, 2, 100, 110, 0.2f, 1.0f},      // MQA with 8 heads (two slices of 4)
  };
  const Case f16_only[] = {
      {6, 1, 48, 3, 70, 80, 0.144f, 1.0f},  // odd head_dim, more keys than one tile
      {2, 2, 17, 9, 30, 45, 0.3f, 1.0f},    // head_dim not a multiple of any vector width
  };
  for (const std::string& level : kernels::available_simd_levels()) {
    kernels::set_simd_level(level);
    for (DType type : {DType::F16, DType::BF16, DType::Q8_0}) {
      for (const Case& c : cases) check_attention(c, 2, type);
      if (type != DType::Q8_0) {
        for (const Case& c : f16_only) check_attention(c, 2, type);
      }
    }
  }
  check_attention(cases[2], 3, DType::Q8_0);
  check_attention(cases[5], 1, DType::F16);
}

// Prompts of many tokens (Isa::prompt_attention where the level has it): blocks of tokens x heads
// against tiles of keys, the causal limit inside a block and a tile, group sizes that do and do not
// fill whole vectors of rows, head_dims with and without a remainder of the register tile, and
// every cache dtype.
TEST(Attention, PromptsInBlocksMatchTheReference) {
  SimdLevelGuard guard;
  const Case cases[] = {
      {4, 4, 64, 70, 0, 80, 0.125f, 1.0f},     // MHA: 64 tokens a block, past one key tile
      {14, 2, 64, 37, 0, 40, 0.125f, 1.0f},    // 7 heads a kv head (Qwen2-0.5B): 63 rows a block
      {32, 2, 128, 9, 60, 80, 0.0884f, 1.0f},  // 16 heads a kv head (GLM-4): 4 tokens a block
      {6, 2, 20, 129, 3, 140, 0.22f, 1.0f},    // 3 heads a kv head, head_dim 20, three key tiles
      {4, 2, 32, 40, 100, 150, 1.0f, 3.0f},    // peaky softmax, a chunk after cached rows
      {8, 8, 17, 6, 0, 6, 0.3f, 1.0f},         // one block, odd head_dim, the cache full
      {4, 4, 32, 100, 13, 120, 0.17f, 1.0f},   // MHA after 13 cached rows: blocks and key tiles out of step
  };
  for (const std::string& level : kernels::available_simd_levels()) {
    kernels::set_simd_level(level);
    for (const Case& c : cases) check_attention(c, 2);
    for (DType type : {DType::F16, DType::BF16}) check_attention(cases[3], 2, type);
    check_attention(cases[0], 2, DType::Q8_0);
    check_attention(cases[2], 2, DType::Q8_0);
  }
  check_attention(cases[1], 1);
  check_attention(cases[3], 3, DType::F16);
  check_attention({8, 4, 24, 40, 70, 120, 0.2f, 1.0f}, 2, DType::Q8_0);  // q8_0 heads start inside blocks
}

// What a prompt's attention writes to `out` for case c against a cache of `type` (check_attention's
// inputs), on `threads` threads.
std::vector<float> prompt_output(const Case& c, DType type, int threads) {
  ThreadPool pool(threads);
  const int64_t qw = static_cast<int64_t>(c.n_head) * c.head_dim;
  const int64_t kvw = static_cast<int64_t>(c.n_kv_head) * c.head_dim;
  const auto kc = make_cache(type, random_floats(static_cast<size_t>(c.S * kvw), 24, -c.amplitude, c.amplitude), c.S,
                             kvw, c.kv_offset + c.T, c.kv_offset, c.kv_offset + c.T);
  const auto vc = make_cache(type, random_floats(static_cast<size_t>(c.S * kvw), 25), c.S, kvw, c.kv_offset + c.T,
                             c.kv_offset, c.kv_offset + c.T);
  Tensor q =
      f32_tensor(Shape{c.T, qw}, random_floats(static_cast<size_t>(c.T * qw), 21, -c.amplitude, c.amplitude), "q");
  Tensor k =
      f32_tensor(Shape{c.T, kvw}, random_floats(static_cast<size_t>(c.T * kvw), 22, -c.amplitude, c.amplitude), "k");
  Tensor v = f32_tensor(Shape{c.T, kvw}, random_floats(static_cast<size_t>(c.T * kvw), 23), "v");
  Tensor k_cache = cache_tensor(type, c.S, kvw, kc, "k_cache");
  Tensor v_cache = cache_tensor(type, c.S, kvw, vc, "v_cache");
  Tensor out = Tensor::host(DType::F32, Shape{c.T, qw}, "out");
  kernels::attention(q, k, v, k_cache, v_cache,
                     AttentionParams{c.n_head, c.n_kv_head, c.head_dim, c.scale, c.kv_offset}, out, pool);
  return values_of(out);
}

// A prompt against a narrow cache with each kv head's rows widened once per thread gives the bits of
// the kernel widening them a tile at a time (limit 0), whichever thread takes which head's blocks (1
// to 3 threads, so a thread's widened rows serve later blocks, grow, or start over for another
// head), for f16, bf16 and q8_0, q8_0 heads starting inside a block, after cached rows.
TEST(Attention, PromptsWidenEachHeadOnceForTheSameBits) {
  SimdLevelGuard guard;
  struct LimitGuard {
    size_t saved = kernels::set_prompt_widening_limit(0);
    ~LimitGuard() { kernels::set_prompt_widening_limit(saved); }
  } limit_guard;
  const Case cases[] = {
      {4, 4, 64, 150, 0, 160, 0.125f, 1.0f},  // MHA: 3 blocks a head, 3 key tiles
      {14, 2, 64, 37, 20, 60, 0.125f, 1.0f},  // 7 heads a kv head: 9 tokens a block, after cached rows
      {8, 4, 24, 40, 70, 120, 0.2f, 1.0f},    // kv width 96: q8_0 heads start inside blocks
  };
  int narrow_runs = 0;
  for (const std::string& level : kernels::available_simd_levels()) {
    kernels::set_simd_level(level);
    if (kernels::cpu::active_isa().prompt_attention == nullptr) continue;
    for (DType type : {DType::F16, DType::BF16, DType::Q8_0}) {
      for (const Case& c : cases) {
        kernels::set_prompt_widening_limit(0);
        const std::vector<float> per_tile = prompt_output(c, type, 2);
        kernels::set_prompt_widening_limit(limit_guard.saved);
        for (int threads : {1, 2, 3}) {
          EXPECT_EQ(prompt_output(c, type, threads), per_tile)
              << level << " " << dtype_name(type) << " cache, T " << c.T << ", " << threads << " threads";
        }
        ++narrow_runs;
      }
    }
  }
  EXPECT_GT(narrow_runs, 0);
}

// A prompt attended in one call or in two chunks (each long enough for the blocks) gives the same
// bits: a row's keys past its causal limit add exact zeros, and its tiles start at the same keys.
TEST(Attention, PromptInChunksEqualsPromptInOneCall) {
  SimdLevelGuard guard;
  const AttentionParams whole{8, 2, 64, 0.125f, 0};
  const int64_t T = 37, S = 40, qw = 8 * 64, kvw = 2 * 64;
  const auto qv = random_floats(static_cast<size_t>(T * qw), 31);
  const auto kv = random_floats(static_cast<size_t>(T * kvw), 32);
  const auto vv = random_floats(static_cast<size_t>(T * kvw), 33);
  const auto rows = [](const std::vector<float>& all, int64_t width, int64_t first, int64_t count) {
    return std::vector<float>(all.begin() + first * width, all.begin() + (first + count) * width);
  };
  ThreadPool pool(2);
  for (const std::string& level : kernels::available_simd_levels()) {
    kernels::set_simd_level(level);
    std::vector<std::vector<float>> outputs;
    for (const std::vector<int64_t>& chunks : {std::vector<int64_t>{37}, std::vector<int64_t>{20, 17}}) {
      Tensor kc = Tensor::host(DType::F16, Shape{S, kvw}, "kc");
      Tensor vc = Tensor::host(DType::F16, Shape{S, kvw}, "vc");
      std::vector<float> out;
      int64_t first = 0;
      for (int64_t n : chunks) {
        Tensor q = f32_tensor(Shape{n, qw}, rows(qv, qw, first, n), "q");
        Tensor k = f32_tensor(Shape{n, kvw}, rows(kv, kvw, first, n), "k");
        Tensor v = f32_tensor(Shape{n, kvw}, rows(vv, kvw, first, n), "v");
        Tensor o = Tensor::host(DType::F32, Shape{n, qw}, "out");
        AttentionParams p = whole;
        p.kv_offset = first;
        kernels::attention(q, k, v, kc, vc, p, o, pool);
        const auto got = values_of(o);
        out.insert(out.end(), got.begin(), got.end());
        first += n;
      }
      outputs.push_back(out);
    }
    EXPECT_EQ(outputs[0], outputs[1]) << level;
  }
}

// An f16 cache's new rows are rounded by the level's vector loop where it has one: bit for bit as
// f32_to_f16, for halfway cases, subnormals, the overflow edge, infinities and NaNs with payloads
// (which the conversion instruction would keep), in vectors with and without a NaN and in a tail.
// A later token's infinite value and NaN key reach no earlier token: the prompt's first T - 1
// rows are, bit for bit, those of the same prompt without its last token (the blocks skip the keys
// a row does not see, they do not add 0 * inf).
TEST(Attention, LaterTokensNonFiniteValuesDoNotReachEarlierRows) {
  SimdLevelGuard guard;
  const AttentionParams params{8, 2, 64, 0.125f, 0};
  const int64_t T = 37, S = 40, qw = 8 * 64, kvw = 2 * 64;
  const auto qv = random_floats(static_cast<size_t>(T * qw), 41);
  auto kv = random_floats(static_cast<size_t>(T * kvw), 42);
  auto vv = random_floats(static_cast<size_t>(T * kvw), 43);
  kv[static_cast<size_t>((T - 1) * kvw + 3)] = NAN;
  vv[static_cast<size_t>((T - 1) * kvw + 5)] = INFINITY;
  vv[static_cast<size_t>((T - 1) * kvw + 64 + 7)] = -INFINITY;  // the second kv head's
  const auto first_rows = [](const std::vector<float>& all, int64_t width, int64_t count) {
    return std::vector<float>(all.begin(), all.begin() + count * width);
  };
  ThreadPool pool(2);
  for (const std::string& level : kernels::available_simd_levels()) {
    kernels::set_simd_level(level);
    std::vector<std::vector<float>> outputs;
    for (int64_t n : {T, T - 1}) {
      Tensor kc = Tensor::host(DType::F32, Shape{S, kvw}, "kc");
      Tensor vc = Tensor::host(DType::F32, Shape{S, kvw}, "vc");
      Tensor q = f32_tensor(Shape{n, qw}, first_rows(qv, qw, n), "q");
      Tensor k = f32_tensor(Shape{n, kvw}, first_rows(kv, kvw, n), "k");
      Tensor v = f32_tensor(Shape{n, kvw}, first_rows(vv, kvw, n), "v");
      Tensor o = Tensor::host(DType::F32, Shape{n, qw}, "out");
      kernels::attention(q, k, v, kc, vc, params, o, pool);
      outputs.push_back(values_of(o));
    }
    const std::vector<float> earlier(outputs[0].begin(), outputs[0].begin() + (T - 1) * qw);
    EXPECT_EQ(earlier, outputs[1]) << level;
    for (float x : earlier) ASSERT_TRUE(std::isfinite(x)) << level;
  }
}

TEST(Attention, F16CacheRowsRoundBitForBitAtEveryLevel) {
  SimdLevelGuard guard;
  const uint32_t special[] = {0x00000000u, 0x80000000u, 0x3f800000u, 0x477fe000u, 0x477fefffu, 0x477ff000u,
                              0x7f7fffffu, 0x7f800000u, 0xff800000u, 0x7f800001u, 0xffc12345u, 0x7fc00000u,
                              0x33000000u, 0x33000001u, 0x33400000u, 0x387fe000u, 0x387ff000u, 0x38800000u,
                              0x3f801000u, 0x3f803000u, 0xbf801000u, 0x00000001u, 0x807fffffu, 0x3a001000u};
  std::vector<float> values;
  for (int rep = 0; rep < 3; ++rep) {
    for (uint32_t bits : special) {
      float f;
      std::memcpy(&f, &bits, 4);
      values.push_back(f);
    }
  }
  // Then random bit patterns over every exponent, with many exact halfway mantissas; no NaN among
  // the first of them, so whole vectors take the instruction.
  uint32_t state = 12345u;
  for (int i = 0; i < 4000; ++i) {
    state = state * 1664525u + 1013904223u;
    uint32_t bits = state;
    if (i % 3 == 0) bits = (bits & ~0x1fffu) | 0x1000u;
    if (i < 2000 && (bits & 0x7f800000u) == 0x7f800000u) bits &= 0xbfffffffu;
    float f;
    std::memcpy(&f, &bits, 4);
    values.push_back(f);
  }
  values.push_back(1.0f);  // a tail past whole vectors
  int levels_with_loop = 0;
  for (const std::string& level : kernels::available_simd_levels()) {
    kernels::set_simd_level(level);
    const auto round = kernels::cpu::active_isa().round_row_f16;
    if (round == nullptr) continue;
    ++levels_with_loop;
    for (size_t offset : {size_t{0}, size_t{3}, size_t{72}}) {
      const auto n = static_cast<int64_t>(values.size() - offset);
      std::vector<uint16_t> got(static_cast<size_t>(n));
      round(values.data() + offset, n, got.data());
      for (int64_t i = 0; i < n; ++i) {
        const float x = values[offset + static_cast<size_t>(i)];
        uint32_t bits;
        std::memcpy(&bits, &x, 4);
        ASSERT_EQ(got[static_cast<size_t>(i)], f32_to_f16(x)) << level << " input bits " << std::hex << bits;
      }
    }
  }
  // Every level but scalar has the loop; this CPU runs at least one of them unless it is not x86.
  EXPECT_EQ(levels_with_loop, static_cast<int>(kernels::available_simd_levels().size()) - 1);
}

TEST(Attention, RefusesCachesOfTwoDtypesOrANonCacheDtype) {
  ThreadPool pool(1);
  Tensor q = Tensor::host(DType::F32, Shape{1, 128}, "q");
  Tensor k = Tensor::host(DType::F32, Shape{1, 64}, "k");
  Tensor out = Tensor::host(DType::F32, Shape{1, 128}, "out");
  Tensor kc = Tensor::host(DType::F16, Shape{4, 64}, "kc");
  Tensor vc_q8 = Tensor::host(DType::Q8_0, Shape{4, 64}, "vc_q8");
  const AttentionParams p{4, 2, 32, 0.2f, 0};
  expect_error(ErrorKind::Shape, [&] { kernels::attention(q, k, k, kc, vc_q8, p, out, pool); }, {"vc_q8", "f16"});
  Tensor kc_i = Tensor::host(DType::I32, Shape{4, 64}, "kc_i");
  expect_error(ErrorKind::Unsupported, [&] { kernels::attention(q, k, k, kc_i, kc_i, p, out, pool); },
               {"kc_i", "f16", "q8_0"});
  Tensor kc_q8 = Tensor::host(DType::Q8_0, Shape{4, 64}, "kc_q8");
  EXPECT_NO_THROW(kernels::attention(q, k, k, kc_q8, vc_q8, p, out, pool));
}

TEST(Attention, ResultDoesNotDependOnThreads) {
  SimdLevelGuard guard;
  for (const std::string& level : kernels::available_simd_levels()) {
    kernels::set_simd_level(level);
    std::vector<std::vector<float>> outputs;
    for (int threads : {1, 2, 3}) {
      ThreadPool pool(threads);
      const AttentionParams p{8, 2, 40, 0.15f, 70};
      const int64_t T = 5, S = 80;
      Tensor q = f32_tensor(Shape{T, 8 * 40}, random_floats(static_cast<size_t>(T * 8 * 40), 26), "q");
      Tensor k = f32_tensor(Shape{T, 2 * 40}, random_floats(static_cast<size_t>(T * 2 * 40), 27), "k");
      Tensor v = f32_tensor(Shape{T, 2 * 40}, random_floats(static_cast<size_t>(T * 2 * 40), 28), "v");
      Tensor kc = f32_tensor(Shape{S, 2 * 40}, random_floats(static_cast<size_t>(S * 2 * 40), 29), "kc");
      Tensor vc = f32_tensor(Shape{S, 2 * 40}, random_floats(static_cast<size_t>(S * 2 * 40), 30), "vc");
      Tensor out = Tensor::host(DType::F32, Shape{T, 8 * 40}, "out");
      kernels::attention(q, k, v, kc, vc, p, out, pool);
      outputs.push_back(values_of(out));
    }
    EXPECT_EQ(outputs[0], outputs[1]) << level;
    EXPECT_EQ(outputs[0], outputs[2]) << level;
  }
}

TEST(Attention, RejectsBadShapesAndCacheOverflow) {
  ThreadPool pool(1);
  Tensor q = Tensor::host(DType::F32, Shape{2, 64}, "q");
  Tensor k = Tensor::host(DType::F32, Shape{2, 32}, "k");
  Tensor v = Tensor::host(DType::F32, Shape{2, 32}, "v");
  Tensor kc = Tensor::host(DType::F32, Shape{4, 32}, "kc");
  Tensor vc = Tensor::host(DType::F32, Shape{4, 32}, "vc");
  Tensor out = Tensor::host(DType::F32, Shape{2, 64}, "out");
  AttentionParams p{4, 2, 16, 0.25f, 3};
  expect_error(ErrorKind::Usage, [&] { kernels::attention(q, k, v, kc, vc, p, out, pool); }, {"overflow", "kc"});
  p.kv_offset = 0;
  p.n_kv_head = 3;
  expect_error(ErrorKind::Usage, [&] { kernels::attention(q, k, v, kc, vc, p, out, pool); });
  p.n_kv_head = 2;
  Tensor k_bad = Tensor::host(DType::F32, Shape{2, 48}, "k_bad");
  expect_error(ErrorKind::Shape, [&] { kernels::attention(q, k_bad, v, kc, vc, p, out, pool); }, {"k_bad"});
  Tensor vc_bad = Tensor::host(DType::F32, Shape{5, 32}, "vc_bad");
  expect_error(ErrorKind::Shape, [&] { kernels::attention(q, k, v, kc, vc_bad, p, out, pool); }, {"vc_bad"});
}
