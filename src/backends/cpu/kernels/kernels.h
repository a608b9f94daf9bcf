// Math on tensors of one device. Kernels never see a plan, a model or a second device.
// All tensors are contiguous; activations are f32; see core/tensor.h for layout rules.
// Every function checks shapes/dtypes of its arguments and throws Error(Shape/Unsupported) naming
// the kernel and the tensors; the work is split over the given pool.
#pragma once

#include <vector>

#include "core/tensor.h"
#include "core/thread_pool.h"
#include "graph/op.h"

namespace ferry::kernels {

// y[M, N] = x[M, K] * w[N, K]^T (+ bias[N]). w in f32, f16, bf16, q8_0, q4_0, or one of the other
// GGUF block types (q4_1, q5_0, q5_1, iq4_nl, q2_k, q3_k, q4_k, q5_k, q6_k, iq4_xs; cpu/quant_blocks.h).
void matmul(const Tensor& x, const Tensor& w, const Tensor* bias, Tensor& y, ThreadPool& pool);

// Weights repacked for the CPU's dot products (cpu/packed_weights.h): whether this backend keeps a
// weight of this dtype and shape packed (q8_0, q4_0, q4_1, q5_0, q5_1, iq4_nl, q2_k..q6_k and
// iq4_xs [N, K] with N a multiple of 16 on a level with kernels for them: avx512vnni and above, amx
// keeping the rows of all but q8_0, q4_0 and q4_k; avx2 and avxvnni packing q8_0, q4_0, q4_k, q5_k and q6_k; bf16, f16
// and f32 with K even on every vector level, amx keeping bf16's rows; all but f16 and f32 with x rounded
// (Q8Activations::Q8_0, which also gives the k-quants their q8_K and bf16 its bf16 x); FERRY_REPACK=off keeps every
// weight as stored), and the repacking itself, in place, returning w marked Layout::Packed. matmul, embedding and
// to_f32 read packed weights on every level; compute() refuses them to every other op, Tensor::reshape refuses them,
// and the other kernels must not be handed one (they would read the bytes as rows).
bool repacks_weight(DType dtype, const Shape& shape);
Tensor repack_weight(const Tensor& w, ThreadPool& pool);

// out[T, H] = table[ids[t], :] converted to f32. table in any float or quantized dtype; ids i32.
// An id outside [0, V) throws Error(Usage) naming the id and the vocabulary size.
void embedding(const Tensor& table, const Tensor& ids, Tensor& out, ThreadPool& pool);

void rms_norm(const Tensor& x, const Tensor& w, float eps, Tensor& out, ThreadPool& pool);
void layer_norm(const Tensor& x, const Tensor& w, const Tensor* b, float eps, Tensor& out, ThreadPool& pool);

// out = x with RoPE applied to the first n_rot dims of each head of width head_dim;
// angle for pair i at position p: (p * freq_scale) * theta^(-2i / n_rot). out may alias x.
void rope(const Tensor& x, const Tensor& positions, const RopeParams& p, Tensor& out, ThreadPool& pool);

// Writes k/v into the caches at rows [p.kv_offset, p.kv_offset + T), rounded to the caches' dtype,
// then computes causal attention tile by tile with an online softmax (never a full T x S score
// matrix). q [T, nh*hd], k/v [T, nkv*hd] f32, out [T, nh*hd] f32; caches [S, nkv*hd], both f32,
// f16, bf16 or q8_0 (graph/op.h kKvCacheDtypes): f16/bf16 rounded to nearest even, q8_0 in ggml's
// blocks of 32 along each row (nkv*hd % 32 == 0, else Error(Shape)). A narrower cache is widened exactly
// into per-thread f32 scratch for the same SIMD loops: a key tile at a time, or for a prompt a kv
// head's rows at once (set_prompt_widening_limit).
void attention(const Tensor& q, const Tensor& k, const Tensor& v, Tensor& k_cache, Tensor& v_cache,
               const AttentionParams& p, Tensor& out, ThreadPool& pool);

// A prompt's attention against an f16, bf16 or q8_0 cache widens each kv head's rows to f32 once
// per thread (the kernel would widen them again for every block of tokens) while both heads' rows
// take at most this many bytes a thread; past it, and at 0, the kernel widens a tile at a time. The
// same values either way, so the same bits. Default 16 MiB; returns the previous limit. Process-wide,
// not to be changed while kernels run.
size_t set_prompt_widening_limit(size_t bytes);

void add(const Tensor& a, const Tensor& b, Tensor& out, ThreadPool& pool);
void mul(const Tensor& a, const Tensor& b, Tensor& out, ThreadPool& pool);
void scale(const Tensor& x, float factor, Tensor& out, ThreadPool& pool);
void silu(const Tensor& x, Tensor& out, ThreadPool& pool);
void gelu(const Tensor& x, Tensor& out, ThreadPool& pool);                         // erf form
void gelu_tanh(const Tensor& x, Tensor& out, ThreadPool& pool);                    // tanh approximation
void swiglu_fused(const Tensor& x, Tensor& out, ThreadPool& pool);                 // x [T, 2F] -> [T, F]
void swiglu(const Tensor& gate, const Tensor& up, Tensor& out, ThreadPool& pool);  // [T, F] each
void softmax(const Tensor& x, Tensor& out, ThreadPool& pool);                      // over the last dim
void concat(const std::vector<const Tensor*>& parts, int axis, Tensor& out, ThreadPool& pool);
void slice(const Tensor& x, int axis, int64_t start, int64_t length, Tensor& out, ThreadPool& pool);
// Same dtype and shape; src and dst may be on different devices (the runtime calls this for its
// counted cross-device copies).
void copy(const Tensor& src, Tensor& dst, ThreadPool& pool);

// The same bytes in out's shape (equal element count and byte size).
void reshape(const Tensor& x, Tensor& out, ThreadPool& pool);
// x [B, C, H, W] (or [B, H, W, C] with p.channels_last) -> out [B * H/p * W/p, C*p*p]: one row
// per patch, columns (c, ky, kx). See Op::Patchify.
void patchify(const Tensor& x, const PatchParams& p, Tensor& out, ThreadPool& pool);
// Non-causal attention within segments, no cache: q [Tq, nh*hd], k/v [Tk, nkv*hd], out [Tq, nh*hd];
// segment s's q_rows queries attend to its k_rows keys only (see Op::SegmentAttention). Tiles of
// queries against tiles of keys with an online softmax. Error(Usage) for an empty segment or bad
// head counts, Error(Shape) for segments that do not cover q's and k's rows exactly.
void segment_attention(const Tensor& q, const Tensor& k, const Tensor& v, const SegmentAttentionParams& p, Tensor& out,
                       ThreadPool& pool);

// Rows of any dtype to f32 (dequantize / widen, bit for bit as ggml): out[r, :] for r in [0, rows(x)).
void to_f32(const Tensor& x, Tensor& out, ThreadPool& pool);
// f32 rows to dtype: f16/bf16 round to nearest even; every block type is quantized bit for bit as
// llama-quantize does without an importance matrix (cpu/quant.cpp, cpu/quantize_blocks.cpp).
// Error(Shape) for rows that are not whole blocks.
void from_f32(const Tensor& x, Tensor& out, ThreadPool& pool);

// Runs one graph op: the CPU backend's entry point, used by the runtime's executor.
// inputs follow the order documented in graph/op.h. Caches for Attention are inputs 3 and 4 and
// are written in place.
void compute(Op op, const OpParams& params, const std::vector<Tensor*>& inputs, Tensor& out, ThreadPool& pool);

// Whether the CPU backend runs `op` with these input dtypes (the scheduler asks before it commits).
bool supports(Op op, const std::vector<DType>& input_dtypes);

// Which SIMD level the kernels chose at run time: "amx", "avx512bf16", "avx512vnni", "avx512",
// "avxvnni", "avx2" or "scalar" (simd.h).
const char* simd_level();

// What matmul multiplies quantized and bf16 weights with. Q8_0 (the default): each row of
// activations rounded first as llama.cpp rounds it for the weight type (its vec_dot_type: q8_0
// blocks for q8_0, q4_0, q5_0, iq4_nl, with GGUF's reference rounding, half away from zero; q8_1
// for q4_1, q5_1; q8_K for the k-quants and iq4_xs; cpu/quant_blocks.h; bf16 for bf16, round to
// nearest even), then exact products (integer per block for the quantized types). That is llama.cpp's
// arithmetic, so logits match it far more closely than f32 activations would (the golden rows
// within 1e-6; a row can differ where float noise moves a block's scale across an f16 boundary), and it takes far fewer
// instructions per weight byte (decode on quantized weights is bound by them, not only by memory). F32: the activations
// as they are, the weights decoded in registers: the exact product with the dequantized weights, without the rounding
// (up to half a step of 1/127 of each block's largest |x|). Chosen once from the environment variable
// FERRY_Q8_ACTIVATIONS (q8_0 | f32) unless set here; process-wide, not to be changed while kernels run.
enum class Q8Activations { F32, Q8_0 };
// Rows rounded to q8_0 go through matmul this many bytes of quants at a time (at least 4 rows),
// so its per-thread copy of them stays bounded however long the prompt.
constexpr int64_t kRoundedRowsSlabBytes = int64_t{4} << 20;
void set_q8_0_activations(Q8Activations mode);
Q8Activations q8_0_activations();

// Whether decode's gemv (one row of activations) prefetches each weight stream's next rows in
// software. It never changes a result, only speed, and the best choice depends on the CPU's own
// prefetchers: measured 1.45x faster with it on a Sapphire Rapids (Intel), mostly 1.04-1.4x on an
// AMD EPYC Zen 5 (family 0x1A; bf16, q8_0, q4_0 and q4_k; one q4_0 round at 2 threads 0.85), 10-15% slower on the
// earlier AMD EPYCs (Zen 3, and an AVX-512 one) whose stream prefetchers already follow the streams. Default: On for
// Intel and AMD from family 0x1A, Off otherwise; FERRY_GEMV_PREFETCH (on | off) overrides it, as
// does set_gemv_prefetch.
enum class GemvPrefetch { Off, On };
void set_gemv_prefetch(GemvPrefetch mode);
GemvPrefetch gemv_prefetch();

}  // namespace ferry::kernels
