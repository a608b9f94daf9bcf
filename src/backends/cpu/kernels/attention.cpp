// Causal attention over a KV cache: append this step's k/v (rounded to the cache's dtype), then each
// (query, head) runs an online softmax over its cache rows tile by tile (cpu/*.cpp), never
// materialising a T x S score matrix, and reading a cache of a narrower dtype one tile at a time.
#include <algorithm>
#include <atomic>
#include <cstring>
#include <vector>

#include "backends/cpu/kernels/check.h"
#include "backends/cpu/kernels/cpu/isa.h"
#include "backends/cpu/kernels/cpu/quant.h"
#include "backends/cpu/kernels/kernels.h"
#include "core/error.h"
#include "graph/op.h"

namespace ferry::kernels {
namespace {

// From this many new tokens on, attention runs as small matrix products over blocks of tokens
// (Isa::prompt_attention); decode and short chunks stay token by token.
constexpr int64_t kMinPromptTokens = 4;

// A narrow (f16, bf16, q8_0) cache widens to f32 in the kernel a tile at a time, each block of
// tokens again for every key it sees (10-15% of the kernel's time). Here a thread widens each kv
// head's rows once into a buffer of its own, grown to what the head's blocks need, and hands the
// kernel that as an f32 cache: the same values (the same conversion), so the same bits. Up to
// this many bytes a thread (K and V, set_prompt_widening_limit); a longer context widens as before.
std::atomic<size_t> widening_limit{size_t{16} << 20};

// A thread's widened rows [0, rows) of kv head `kv_head` (-1: none yet in this call), K then V.
struct WidenedHead {
  int kv_head = -1;
  int64_t rows = 0;
};

// Rows [r0, r1) of kv head `first_col` / head_dim in `cache` to f32 rows of head_dim at out.
void widen_rows(const cpu::Isa& isa, const uint8_t* cache, size_t row_bytes, DType type, int64_t first_col,
                int64_t head_dim, int64_t r0, int64_t r1, float* out) {
  const bool whole_blocks = first_col % kQK8_0 == 0 && head_dim % kQK8_0 == 0;
  const int64_t offset = type == DType::Q8_0 ? first_col / kQK8_0 * static_cast<int64_t>(sizeof(BlockQ8_0))
                                             : first_col * static_cast<int64_t>(dtype_traits(type).block_bytes);
  for (int64_t r = r0; r < r1; ++r) {
    const uint8_t* row = cache + static_cast<size_t>(r) * row_bytes;
    if (type == DType::Q8_0 && !whole_blocks) {
      cpu::cache_row_to_f32_scalar(type, row, first_col, head_dim, out + r * head_dim);
    } else {
      isa.row_to_f32(type, row + offset, out + r * head_dim, head_dim);
    }
  }
}

// Tasks: (kv head, a block of tokens), each block's tokens x the group's query heads about
// kPromptRows rows. A head's blocks go together (so a thread's widened rows serve its next blocks
// of the head), later blocks first: they see more keys, so the dynamic hand-out ends on short tasks.
void prompt_attention(const Tensor& q, const uint8_t* kc, const uint8_t* vc, size_t row_bytes, DType cache_type,
                      const AttentionParams& p, Tensor& out, ThreadPool& pool) {
  const cpu::Isa& isa = cpu::active_isa();
  const int64_t T = q.dim(0);
  const int group = p.n_head / p.n_kv_head;
  const int64_t block = std::max<int64_t>(1, cpu::AttentionHeads::kPromptRows / group);
  const int64_t n_blocks = (T + block - 1) / block;
  const int64_t width = static_cast<int64_t>(p.n_head) * p.head_dim;
  const float* q_data = q.data_as<const float>();
  float* o = out.data_as<float>();
  const int64_t max_rows = p.kv_offset + T;
  const bool widen = cache_type != DType::F32 && isa.row_to_f32 != nullptr &&
                     static_cast<size_t>(2 * max_rows * p.head_dim) * sizeof(float) <= widening_limit.load();
  const DType kernel_cache = widen ? DType::F32 : cache_type;
  const size_t scratch_per_thread = cpu::AttentionHeads::prompt_scratch_floats(kernel_cache, p.head_dim, block * group);
  std::vector<float> scratch(static_cast<size_t>(pool.size()) * scratch_per_thread);
  std::vector<WidenedHead> widened(static_cast<size_t>(pool.size()));
  pool.parallel_for(n_blocks * p.n_kv_head, [&](int64_t task, int thread) {
    const int64_t first = (n_blocks - 1 - task % n_blocks) * block;
    const int kv_head = static_cast<int>(task / n_blocks);
    const int64_t head_offset = static_cast<int64_t>(kv_head) * group * p.head_dim;
    cpu::AttentionHeads heads;
    heads.q = q_data + first * width + head_offset;
    heads.n_heads = group;
    heads.n_tokens = std::min(block, T - first);
    heads.token_stride = width;
    heads.cache_type = cache_type;
    heads.k_cache = kc;
    heads.v_cache = vc;
    heads.cache_row_bytes = row_bytes;
    heads.first_col = static_cast<int64_t>(kv_head) * p.head_dim;
    heads.f16_table = cache_type == DType::F32 ? nullptr : cpu::f16_table();
    heads.n_keys = p.kv_offset + first + 1;
    heads.head_dim = p.head_dim;
    heads.scale = p.scale;
    heads.out = o + first * width + head_offset;
    heads.scratch = scratch.data() + static_cast<size_t>(thread) * scratch_per_thread;
    if (widen) {
      thread_local std::vector<float> rows;  // K's rows, then V's: grown, never shrunk
      WidenedHead& w = widened[static_cast<size_t>(thread)];
      const auto half = static_cast<size_t>(max_rows * p.head_dim);
      if (w.kv_head < 0 && rows.size() < 2 * half) rows.resize(2 * half);
      if (w.kv_head != kv_head) w = WidenedHead{kv_head, 0};
      const int64_t needed = heads.n_keys + heads.n_tokens - 1;  // what the block's last token sees
      if (needed > w.rows) {
        widen_rows(isa, kc, row_bytes, cache_type, heads.first_col, p.head_dim, w.rows, needed, rows.data());
        widen_rows(isa, vc, row_bytes, cache_type, heads.first_col, p.head_dim, w.rows, needed, rows.data() + half);
        w.rows = needed;
      }
      heads.cache_type = DType::F32;
      heads.k_cache = reinterpret_cast<const uint8_t*>(rows.data());
      heads.v_cache = reinterpret_cast<const uint8_t*>(rows.data() + half);
      heads.cache_row_bytes = static_cast<size_t>(p.head_dim) * sizeof(float);
      heads.first_col = 0;
      heads.f16_table = nullptr;
    }
    isa.prompt_attention(heads);
  });
}

}  // namespace

size_t set_prompt_widening_limit(size_t bytes) {
  return widening_limit.exchange(bytes);
}

void attention(const Tensor& q, const Tensor& k, const Tensor& v, Tensor& k_cache, Tensor& v_cache,
               const AttentionParams& p, Tensor& out, ThreadPool& pool) {
  constexpr std::string_view kName = "attention";
  check_f32(kName, q, "query q");
  check_f32(kName, k, "key k");
  check_f32(kName, v, "value v");
  check_defined(kName, k_cache, "key cache");
  const DType cache_type = k_cache.dtype();
  if (!is_kv_cache_dtype(cache_type)) {
    fail(ErrorKind::Unsupported, "attention: key cache '{}' is {}; a KV cache is f32, f16, bf16 or q8_0",
         k_cache.name(), dtype_name(cache_type));
  }
  check_dtype(kName, v_cache, "value cache", cache_type);
  check_f32(kName, out, "output");
  check_same_device(kName, {&q, &k, &v, &k_cache, &v_cache, &out});
  if (p.n_head <= 0 || p.n_kv_head <= 0 || p.head_dim <= 0 || p.n_head % p.n_kv_head != 0) {
    fail(ErrorKind::Usage,
         "attention: {} heads, {} kv heads, head_dim {}: counts must be positive and heads a multiple of kv heads",
         p.n_head, p.n_kv_head, p.head_dim);
  }
  if (q.rank() != 2 || q.dim(1) != static_cast<int64_t>(p.n_head) * p.head_dim) {
    fail(ErrorKind::Shape, "attention: query '{}' {} is not [T, {} heads * {}]", q.name(), q.shape().str(), p.n_head,
         p.head_dim);
  }
  const int64_t T = q.dim(0);
  const int64_t kv_width = static_cast<int64_t>(p.n_kv_head) * p.head_dim;
  check_shape(kName, k, "key k", Shape{T, kv_width});
  check_shape(kName, v, "value v", Shape{T, kv_width});
  if (k_cache.rank() != 2 || k_cache.dim(1) != kv_width) {
    fail(ErrorKind::Shape, "attention: key cache '{}' {} is not [S, {}]", k_cache.name(), k_cache.shape().str(),
         kv_width);
  }
  check_shape(kName, v_cache, "value cache", k_cache.shape());
  check_shape(kName, out, "output", q.shape());
  const int64_t S = k_cache.dim(0);
  if (p.kv_offset < 0 || p.kv_offset > S - T) {
    fail(ErrorKind::Usage,
         "attention: {} new rows at offset {} overflow the cache of {} rows ('{}'); "
         "allocate a longer cache or shorten the context",
         T, p.kv_offset, S, k_cache.name());
  }

  const cpu::Isa& isa = cpu::active_isa();
  const size_t row_bytes = k_cache.row_bytes();
  auto* kc = static_cast<uint8_t*>(k_cache.data());
  auto* vc = static_cast<uint8_t*>(v_cache.data());
  if (cache_type == DType::F32) {
    // memmove: the runtime may hand us k/v that already live in the cache rows.
    const size_t new_bytes = static_cast<size_t>(T * kv_width) * sizeof(float);
    std::memmove(kc + static_cast<size_t>(p.kv_offset) * row_bytes, k.data(), new_bytes);
    std::memmove(vc + static_cast<size_t>(p.kv_offset) * row_bytes, v.data(), new_bytes);
  } else {
    // Each new row rounded to the cache's dtype (f16/bf16 to nearest even, q8_0 as ggml's
    // quantize_row_q8_0_ref, blocks of 32 along the row).
    const float* k_data = k.data_as<const float>();
    const float* v_data = v.data_as<const float>();
    const auto round = [&](const float* src, uint8_t* dst) {
      if (cache_type == DType::F16 && isa.round_row_f16 != nullptr) {
        isa.round_row_f16(src, kv_width, reinterpret_cast<uint16_t*>(dst));
      } else {
        cpu::row_from_f32(cache_type, src, dst, kv_width);
      }
    };
    pool.parallel_for(T, [&](int64_t t, int) {
      const size_t at = static_cast<size_t>(p.kv_offset + t) * row_bytes;
      round(k_data + t * kv_width, kc + at);
      round(v_data + t * kv_width, vc + at);
    });
  }

  if (T >= kMinPromptTokens && isa.prompt_attention != nullptr) {
    prompt_attention(q, kc, vc, row_bytes, cache_type, p, out, pool);
    return;
  }
  // Tasks: (token, kv head, a slice of at most kMaxHeads of the query heads that read that kv head).
  // The heads of a slice share each K/V row they read.
  constexpr int kMaxHeads = cpu::AttentionHeads::kMaxHeads;
  const int group = p.n_head / p.n_kv_head;
  const int slices_per_group = (group + kMaxHeads - 1) / kMaxHeads;
  const int64_t tasks_per_token = static_cast<int64_t>(p.n_kv_head) * slices_per_group;
  const int64_t width = static_cast<int64_t>(p.n_head) * p.head_dim;
  const float* q_data = q.data_as<const float>();
  float* o = out.data_as<float>();
  const float* f16_table = cache_type == DType::F32 ? nullptr : cpu::f16_table();
  // Per thread: the heads' accumulators and scores, and for a narrower cache one tile of K or V
  // rows as f32 (64 rows x head_dim): the cache is widened a tile at a time, never as a whole.
  const size_t scratch_per_thread = cpu::AttentionHeads::scratch_floats(cache_type, p.head_dim);
  std::vector<float> scratch(static_cast<size_t>(pool.size()) * scratch_per_thread);
  pool.parallel_for(T * tasks_per_token, [&](int64_t task, int thread) {
    const int64_t t = task / tasks_per_token;
    const int kv_head = static_cast<int>(task % tasks_per_token) / slices_per_group;
    const int slice = static_cast<int>(task % tasks_per_token) % slices_per_group;
    const int first_head = kv_head * group + slice * kMaxHeads;
    cpu::AttentionHeads heads;
    heads.q = q_data + t * width + static_cast<int64_t>(first_head) * p.head_dim;
    heads.n_heads = std::min(kMaxHeads, group - slice * kMaxHeads);
    heads.cache_type = cache_type;
    heads.k_cache = kc;
    heads.v_cache = vc;
    heads.cache_row_bytes = row_bytes;
    heads.first_col = static_cast<int64_t>(kv_head) * p.head_dim;
    heads.f16_table = f16_table;
    heads.n_keys = p.kv_offset + t + 1;  // causal by cache slot
    heads.head_dim = p.head_dim;
    heads.scale = p.scale;
    heads.out = o + t * width + static_cast<int64_t>(first_head) * p.head_dim;
    heads.scratch = scratch.data() + static_cast<size_t>(thread) * scratch_per_thread;
    isa.attention(heads);
  });
}

}  // namespace ferry::kernels
