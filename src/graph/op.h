// The op vocabulary. Every op a model can use is here; kernels implement them per device.
// Shapes are outermost-first ([tokens, features]); see core/tensor.h for the layout rules.
#pragma once

#include <cstdint>
#include <span>
#include <string_view>
#include <variant>
#include <vector>

#include "core/dtype.h"

namespace ferry {

enum class Op : uint8_t {
  // inputs: table [V, H] (any dtype), ids [T] i32                   -> [T, H] f32
  Embedding,
  // inputs: x [M, K] f32, w [N, K] (any dtype), optional bias [N] f32 -> [M, N] f32 (y = x w^T + b)
  MatMul,
  // inputs: a, b (same shape, f32)                                    -> a + b
  Add,
  // inputs: a, b (same shape, f32)                                    -> a * b
  Mul,
  // inputs: x                                                         -> x * factor
  Scale,
  // inputs: x [.., H], w [H]                                          -> x / sqrt(mean(x^2) + eps) * w
  RmsNorm,
  // inputs: x [.., H], w [H], optional b [H]                          -> (x - mean) / sqrt(var + eps) * w + b
  LayerNorm,
  // inputs: x [T, n*head_dim] f32, positions [T] i32                  -> x with RoPE on each head
  Rope,
  // inputs: q [T, nh*hd], k [T, nkv*hd], v [T, nkv*hd],
  //         k_cache [S, nkv*hd], v_cache [S, nkv*hd] (state, one of kKvCacheDtypes, both the same),
  //         optional kv_position [1] i32                                -> [T, nh*hd]
  // Writes k, v into cache rows [kv_offset, kv_offset + T), rounded to the cache's dtype (q8_0:
  // blocks of 32 along each row, so nkv*hd % 32 == 0); query i attends to cache rows
  // [0, kv_offset + i] (causal by cache slot). GQA: query head h reads kv head h / (nh / nkv).
  // kv_offset is kv_position's value when the input is given (a per-step value, so one prepared
  // graph serves every step), else AttentionParams::kv_offset.
  Attention,
  // inputs: x                                                         -> silu(x) = x * sigmoid(x)
  Silu,
  // inputs: x                                                         -> 0.5 x (1 + erf(x / sqrt 2))
  Gelu,
  // inputs: x                                                         -> tanh approximation of gelu
  GeluTanh,
  // inputs: x [T, 2F] (gate rows first, then up)                      -> [T, F] silu(gate) * up
  //     or: gate [T, F], up [T, F]                                     -> [T, F] silu(gate) * up
  SwiGlu,
  // inputs: x [.., N]                                                 -> softmax over the last dim
  Softmax,
  // inputs: a, b, ... (same shape except along axis)                  -> concatenation along axis
  Concat,
  // inputs: x                                                         -> x[start : start + length] along axis
  Slice,
  // inputs: x                                                         -> x (a copy; the scheduler inserts
  //         these on edges that cross devices)
  Copy,
  // inputs: x (any dtype)                                             -> the same elements in the
  //         output value's shape (equal element count; quantized rows keep whole blocks)
  Reshape,
  // inputs: x [B, C, H, W] f32 (or [B, H, W, C] with channels_last)    -> [B * H/p * W/p, C*p*p]
  //         one row per p x p patch (images in order, patches row-major), columns ordered
  //         (c, ky, kx) like a conv weight [out, C, p, p]: a stride-p conv is Patchify then MatMul.
  Patchify,
  // inputs: q [Tq, nh*hd], k [Tk, nkv*hd], v [Tk, nkv*hd] f32           -> [Tq, nh*hd]
  //         non-causal attention without a cache over segments: the rows of q and of k/v come in
  //         SegmentAttentionParams::segments, in order (segment s: q_rows queries, k_rows keys),
  //         and every query of a segment attends to every key of the same segment. Query and key
  //         lengths may differ (a resampler's queries against an image's patches). GQA as Attention.
  SegmentAttention,
  Count,
};

std::string_view op_name(Op op);

// Whether `input_dtypes` meet the op's contract above (the optional inputs included), given the
// weight dtypes the backend's matmul and embedding read: what every backend's supports() starts
// from before adding limits of its own.
bool op_accepts(Op op, std::span<const DType> input_dtypes, bool (*reads_weight_type)(DType));

// The element types an Attention op's KV cache may have (RunLimits::kv_dtype, --kv-dtype): f32,
// and the narrower f16, bf16 and q8_0 that the op rounds new rows to. A backend's supports() may
// accept fewer.
inline constexpr DType kKvCacheDtypes[] = {DType::F32, DType::F16, DType::BF16, DType::Q8_0};
bool is_kv_cache_dtype(DType t);

enum class RopeStyle : uint8_t {
  Adjacent,   // pairs (2i, 2i+1): GGUF llama (permuted rows), ChatGLM, GLM-4
  HalfSplit,  // pairs (i, i + n_rot/2): HF Llama/Qwen2 rotate_half (NEOX)
};

struct NormParams {
  float eps = 1e-5f;
};
struct ScaleParams {
  float factor = 1.0f;
};
struct RopeParams {
  int head_dim = 0;
  int n_rot = 0;  // rotated dims at the start of each head (<= head_dim, even)
  RopeStyle style = RopeStyle::HalfSplit;
  float theta = 10000.0f;
  float freq_scale = 1.0f;  // linear rope scaling: position * freq_scale
  // Per-pair divisors of the frequencies, n_rot / 2 of them (empty: none): Llama 3's scaling,
  // llama.cpp's rope_freqs tensor, YaRN's blend of interpolated and original frequencies.
  std::vector<double> freq_divisors = {};
  float attn_factor = 1.0f;  // multiplies cos and sin (YaRN's attention factor)
};
// The angle per position of each of the n_rot / 2 pairs, in double: freq_scale * theta^(-2i / n_rot)
// / freq_divisors[i]. Every backend's RoPE takes its frequencies from here.
std::vector<double> rope_frequencies(const RopeParams& p);
struct AttentionParams {
  int n_head = 0;
  int n_kv_head = 0;
  int head_dim = 0;
  float scale = 1.0f;
  int64_t kv_offset = 0;  // cache rows already filled before this step
};
struct AxisParams {
  int axis = 0;
  int64_t start = 0;   // Slice only
  int64_t length = 0;  // Slice only
};

struct PatchParams {
  int patch = 0;               // patch side (= the conv's kernel and stride)
  bool channels_last = false;  // input [B, H, W, C] instead of [B, C, H, W]
};
struct AttentionSegment {
  int64_t q_rows = 0;
  int64_t k_rows = 0;
  bool operator==(const AttentionSegment&) const = default;
};
struct SegmentAttentionParams {
  int n_head = 0;
  int n_kv_head = 0;
  int head_dim = 0;
  float scale = 1.0f;
  std::vector<AttentionSegment> segments;  // q rows sum to Tq, k rows to Tk; none empty
};

using OpParams = std::variant<std::monostate, NormParams, ScaleParams, RopeParams, AttentionParams, AxisParams,
                              PatchParams, SegmentAttentionParams>;

}  // namespace ferry
