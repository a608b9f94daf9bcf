// The CPU backend's per-instruction-set inner loops, as a table of function pointers. Each level
// (scalar, avx2, avxvnni, avx512, avx512vnni, avx512bf16, amx) fills one table; simd.cpp picks one at run time. The
// callers in kernels/*.cpp check arguments and split work over threads; these loops trust them.
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/dtype.h"

namespace ferry::kernels::cpu {

// How far ahead of its reads decode prefetches each weight stream when MatmulArgs::prefetch is set,
// in every kernel that does: a few hundred nanoseconds of streaming at ~12 GB/s per core (the
// hardware prefetcher stops at page ends). More in flight overflows L1: two rows ahead in 8 streams,
// 128 KiB for bf16 at K = 4096, read 0.75-0.82 of the bandwidth on an Intel Xeon where 2 KiB read
// 0.88-1.02 (2026-11-28); 1-8 KiB measured alike for the packed loops on AMD Zen 5.
inline constexpr int64_t kDecodePrefetchBytes = 2048;

// y[m, n] = dot(x[m, :], w[n, :]) (+ bias[n]) for m in [0, M), n in [n_begin, n_end).
// Every output is accumulated in f32 in one fixed order that depends only on K and the ISA (not
// on M, the n range or the thread count), so results are reproducible for any split of the work.
// One exception, for speed: the amx level runs up to 4 rows of x (decode) through other loops than
// a batch of more (amx.cpp), the same products summed in another order.
struct MatmulArgs {
  DType w_type = DType::F32;  // f32, f16, bf16, q8_0, q4_0, or a block type of quant_blocks.h
  const float* x = nullptr;   // [M, K], rows x_stride floats apart
  int64_t M = 0;
  // The rows of the whole matmul call, of which these M are a slab (matmul.cpp rounds x a slab at
  // a time): what decides a level's small-batch loops (Isa::small_batch_rows), so a row takes
  // the same loops whichever slab it falls in.
  int64_t call_rows = 0;
  int64_t K = 0;
  int64_t x_stride = 0;
  const uint8_t* w = nullptr;  // [N, K] in w_type, rows w_row_bytes apart
  size_t w_row_bytes = 0;
  const float* bias = nullptr;  // [N] or nullptr
  float* y = nullptr;           // [M, N], rows y_stride floats apart
  int64_t y_stride = 0;
  const float* f16_table = nullptr;  // f16 bits -> f32 (quant.h), for the block scales
  // Quantized weights: x rounded as llama.cpp rounds it for w_type (quant_blocks.h activation_quant:
  // q8_0 by quantize_row_q8_0_split, q8_1, q8_K), or nullptr for the f32 activations themselves. The
  // quants ([M, K], rows K apart) with each block's scale as f32 ([M, K / 32], or [M, K / 256] for
  // q8_K). The weights then meet x in exact integer dot products, a block at a time.
  const int8_t* xq = nullptr;
  const float* xq_scale = nullptr;
  const float* xq_sum = nullptr;     // q8_1: [M, K / 32], each block's s (quant_blocks.h q8_1_sums)
  const int16_t* xq_bsum = nullptr;  // q8_K: [M, K / 16], the sum of each 16 quants
  // bf16 weights on a level with BF16 dot products (Isa::round_row_bf16): x rounded to bf16 as
  // llama.cpp rounds it (core/half.h f32_to_bf16), [M, K] with rows K apart; else nullptr.
  const uint16_t* xb = nullptr;
  // On a level with its own layout of the rounded x for this call (Isa::pack_x): xq or xb in that
  // layout, and x's factors in the level's own (amx: scales, then sums); else nullptr.
  const uint8_t* x_packed = nullptr;
  const float* x_packed_scale = nullptr;
  // w in cpu/packed_weights.h's layout (Layout::Packed: q8_0, q4_0, q4_1, q5_0, q5_1, iq4_nl, q2_k, q3_k, q4_k, q5_k,
  // q6_k, iq4_xs, bf16, f16 or f32); then also, where the level's vector loops read x in rows (the level keeps no copy
  // of x for the call: one row), for q4_0, q5_0 and iq4_nl the sum of each block of 32 quants of x, [M, K / 32], and
  // for q8_0 the quants + 128 as unsigned bytes (x ^ 0x80), [M, K]; else nullptr.
  bool w_packed = false;
  const int32_t* xq_block_sum = nullptr;
  const uint8_t* xq_unsigned = nullptr;
  bool prefetch = true;  // decode (M = 1): prefetch each weight stream ahead (kernels.h gemv_prefetch)
};

// Query heads that share one kv head (GQA/MQA), one query token (Isa::attention: up to kMaxHeads
// heads) or several (Isa::prompt_attention), against cache rows [0, n_keys + token): online softmax
// over tiles of kKeyTile keys, each K/V row read once per call.
// A cache of another dtype than f32 (f16, bf16, q8_0) is read a tile at a time: the tile's K rows,
// then its V rows, widened into the thread's scratch (exactly: every cache dtype is a subset of
// f32), then the f32 loops run on them. The cache itself is never converted as a whole.
struct AttentionHeads {
  static constexpr int64_t kKeyTile = 64;
  static constexpr int kMaxHeads = 4;
  // Isa::prompt_attention takes about this many (token, head) rows at once: four AVX-512 vectors
  // (measured: 64 ran 1.2x faster than 32 at 2048 tokens, 128 no faster).
  static constexpr int kPromptRows = 64;
  const float* q = nullptr;          // [n_tokens, n_heads, head_dim], heads head_dim apart
  int n_heads = 1;                   // attention: in [1, kMaxHeads]; prompt_attention: any
  int64_t n_tokens = 1;              // attention: 1; prompt_attention: any
  int64_t token_stride = 0;          // floats from one token's q (and out) to the next's
  DType cache_type = DType::F32;     // f32, f16, bf16 or q8_0 (graph/op.h kKvCacheDtypes)
  const uint8_t* k_cache = nullptr;  // row 0 of the whole cache (every kv head); rows cache_row_bytes apart
  const uint8_t* v_cache = nullptr;
  size_t cache_row_bytes = 0;
  int64_t first_col = 0;  // this kv head's first element in a row (q8_0: any, blocks are read whole)
  int64_t n_keys = 0;     // of the first token; token i reads cache rows [0, n_keys + i) (causal)
  bool causal = true;     // prompt_attention: false, every token reads rows [0, n_keys) (a vision tower)
  int head_dim = 0;
  float scale = 1.0f;
  float* out = nullptr;              // [n_tokens, n_heads, head_dim], as q
  float* scratch = nullptr;          // (prompt_)scratch_floats(...), this thread's own
  const float* f16_table = nullptr;  // f16 bits -> f32 (quant.h f16_table()), for f16 and q8_0 caches

  // Scratch per thread: the heads' accumulators and a tile's scores, and for a cache that is not
  // f32 one tile of K or V rows as f32.
  static constexpr size_t scratch_floats(DType cache_type, int head_dim) {
    const auto hd = static_cast<size_t>(head_dim);
    const auto tile = static_cast<size_t>(kKeyTile);
    return static_cast<size_t>(kMaxHeads) * (hd + tile) + (cache_type == DType::F32 ? 0 : tile * hd);
  }
  // prompt_attention's, for `rows` (token, head) rows: q transposed, the tile's scores, the
  // outputs transposed and per row the running maximum, sum and rescale factor, all for the rows
  // rounded up to whole vectors of 16; a tile of K or V rows for a narrow cache.
  static constexpr size_t prompt_scratch_floats(DType cache_type, int head_dim, int64_t rows) {
    const auto hd = static_cast<size_t>(head_dim);
    const auto tile = static_cast<size_t>(kKeyTile);
    const auto padded = static_cast<size_t>((rows + 15) / 16 * 16);
    return padded * (2 * hd + tile + 3) + (cache_type == DType::F32 ? 0 : tile * hd);
  }
};

// Elements [first, first + n) of one KV-cache row in `type` (f32, f16, bf16 or q8_0) to f32, one
// element at a time: the reference the ISA files' tile conversion matches exactly, and what they
// use for a head that does not start on a q8_0 block boundary.
void cache_row_to_f32_scalar(DType type, const uint8_t* row, int64_t first, int64_t n, float* dst);

struct Isa {
  const char* name;
  void (*matmul)(const MatmulArgs& args, int64_t n_begin, int64_t n_end);
  // n elements (a multiple of the block size for quantized types) of `type` to f32.
  void (*row_to_f32)(DType type, const void* src, float* dst, int64_t n);
  void (*attention)(const AttentionHeads& heads);
  // Several query tokens at once (a prompt): heads.n_tokens tokens x heads.n_heads heads form the
  // rows of small matrix products against each tile of keys (scores = Q K^T, then P V), so a K or V
  // row read from the cache serves every row. Same results as `attention` up to rounding (another
  // summation order). nullptr: attention() runs token by token.
  void (*prompt_attention)(const AttentionHeads& heads) = nullptr;
  // Sum of the n floats at p (the bandwidth probe's streaming read).
  float (*sum_f32)(const float* p, int64_t n);
  // quantize_row_q8_0_split (quant.h), bit for bit: n floats (a multiple of 32) rounded to q8_0.
  void (*quantize_row_q8_0)(const float* x, int64_t n, int8_t* q, float* scale);
  // quantize_row_q8_K_split (quant_blocks.h), bit for bit: n floats (a multiple of 256) rounded to
  // q8_K, with the sums of each 16 quants.
  void (*quantize_row_q8_K)(const float* x, int64_t n, int8_t* q, float* scale, int16_t* bsum);
  // Levels whose bf16 matmul multiplies bf16 pairs (vdpbf16ps): n floats rounded to bf16 as
  // core/half.h f32_to_bf16 rounds them, bit for bit. nullptr elsewhere: x stays f32.
  void (*round_row_bf16)(const float* x, int64_t n, uint16_t* out) = nullptr;
  // out = silu(gate) * up over n floats. nullptr: one element at a time (std::exp).
  void (*swiglu)(const float* gate, const float* up, float* out, int64_t n) = nullptr;
  // n floats to f16 bit for bit as core/half.h f32_to_f16 (an f16 KV cache's new rows). nullptr:
  // f32_to_f16 one at a time.
  void (*round_row_f16)(const float* x, int64_t n, uint16_t* out) = nullptr;
  // Levels whose matmul reads the rounded x (a.xq and a.xq_scale, or a.xb) in a layout of their
  // own for some weight types and calls (amx: tiles of 16 rows; avx512vnni and avx512bf16: panels
  // of 16 rows for batches against the packed blocks of 32): the bytes and floats that layout
  // takes for a's type and size (both 0: a call it does not pack x for), and the packing into it.
  // nullptr elsewhere.
  void (*packed_x_size)(const MatmulArgs& a, size_t* bytes, size_t* scales) = nullptr;
  // pack_x packs x's rows [16 tile_begin, 16 tile_end) (16-row tiles, so threads can share the work).
  void (*pack_x)(const MatmulArgs& a, int64_t tile_begin, int64_t tile_end, uint8_t* packed,
                 float* packed_scale) = nullptr;
  // Where not 0, batches of up to this many rows of x take other loops than larger ones, so a row
  // can differ in its last bits between the two (amx: 4). 0: one order for every M.
  int64_t small_batch_rows = 0;
  // Levels with kernels for packed weights (a.w_packed): their matmul for them, n_begin and n_end
  // multiples of 16. nullptr elsewhere: matmul.cpp unpacks the rows for `matmul`. Every level that
  // has it computes each output with the same operations in the same order (per block, the exact
  // integer dot product, then acc = fma(f32(dot), weight scale * x scale, acc) in increasing k (q4_1 /
  // q5_1: then acc = fma(m, x's block sum s, acc); iq4_xs the same per chunk of 32, its scale d * (ls - 32)),
  // the k-quants' sub-blocks summed exactly and one step per super-block (q4_k / q5_k: two, the sums
  // and then the mins, packed_q4_k.h add_super_block), packed_weights.h; then acc + bias), so they agree
  // bit for bit, for every M (small_batch_rows does not apply). bf16 reaches it only with x rounded
  // to bf16 (a.xb on the levels with BF16 dot products, else a.x widened back to f32), one
  // vdpbf16ps lane per output or its two FMAs, and f16 and f32 on x as it is, two FMAs a unit
  // (simd_float_packed.h); elsewhere matmul.cpp unpacks their rows.
  void (*matmul_packed)(const MatmulArgs& args, int64_t n_begin, int64_t n_end) = nullptr;
  // Which packable types (packed_weights.h) this level repacks at load: those its matmul_packed
  // runs faster than the rows as stored. matmul_packed takes every type of packed_types all the
  // same: one packed elsewhere (another level's, as the tests do) takes its vector loops at every
  // batch.
  bool (*repacks)(DType type) = nullptr;
  // The packable types matmul_packed takes (nullptr: every one); matmul.cpp unpacks the others'
  // rows for `matmul` (avx2, avxvnni: the float types, q8_0, q4_0, q4_k, q5_k and q6_k; avx512: the float
  // types). Levels made from a copy of another's table set it too.
  bool (*packed_types)(DType type) = nullptr;
};

const Isa& scalar_isa();
// nullptr when this build has no such path. Whether the CPU can run it is simd.cpp's question.
const Isa* avx2_isa();
// avx2 plus AVX-VNNI: packed q8_0, q4_0, q4_k, q5_k and q6_k by the 256-bit vpdpbusd (avx_vnni.cpp).
const Isa* avx_vnni_isa();
const Isa* avx512_isa();
// AVX-512 with VNNI (the blocks of 32 and iq4_xs's chunks by vpdpbusd, the k-quants' scale
// products by vpdpwssd), and that plus BF16 (bf16 weights by vdpbf16ps): avx512_dot.cpp.
const Isa* avx512_vnni_isa();
const Isa* avx512_bf16_isa();
// avx512vnni plus AMX tiles: every block type against x rounded for it (q8_0, q8_1 or q8_K) by
// tdpbssd, bf16 against x rounded to bf16 by tdpbf16ps (amx.cpp).
const Isa* amx_isa();

// The level chosen at run time (see kernels/simd.h).
const Isa& active_isa();

}  // namespace ferry::kernels::cpu
