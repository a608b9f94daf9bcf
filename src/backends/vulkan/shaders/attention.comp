#version 450
// Attention of one query row and head per workgroup, over keys taken 64 at a time with an online
// softmax (running maximum and sum, the output rescaled as the maximum grows): no score matrix.
// Causal over the caches: query t sees rows [0, off + t]. p0 T, p1 heads, p2 kv heads, p3 head_dim
// (<= 256), p4 scale bits. p7 has a position buffer (binding 4), else p8 is off. p9 the caches'
// type (kv_cache.glsl: f32, f16, bf16 or q8_0), read element by element as f32, exactly.
// (Non-causal attention inside segments is segment_attention.comp.)
#include "common.glsl"
#include "reduce.glsl"
#include "kv_cache.glsl"

layout(std430, binding = 0) readonly buffer Q { float q[]; };
layout(std430, binding = 1) readonly buffer K { uint kc[]; };
layout(std430, binding = 2) readonly buffer V { uint vc[]; };
layout(std430, binding = 3) writeonly buffer O { float o[]; };
layout(std430, binding = 4) readonly buffer Pos { int pos[]; };

KV_READER(k_at, kc)
KV_READER(v_at, vc)

shared float q_row[256];
shared float probs[64];

void main() {
  if (extra_group()) return;
  const uint T = pc.p[0], heads = pc.p[1], kv_heads = pc.p[2], hd = pc.p[3], type = pc.p[9];
  const float scale = pf(4);
  const uint g = group_index();
  const uint h = g % heads, t = g / heads;
  const uint tid = gl_LocalInvocationID.x;
  const uint kv_width = kv_heads * hd;
  const uint row_bytes = kv_row_bytes(type, kv_width);
  const uint kv_col = (h / (heads / kv_heads)) * hd;
  const uint off = pc.p[7] != 0u ? uint(pos[pc.off[4]]) : pc.p[8];
  const uint first = 0u, last = off + t + 1u;  // keys [first, last)
  for (uint d = tid; d < hd; d += 64u) q_row[d] = q[pc.off[0] + t * heads * hd + h * hd + d];
  barrier();

  float running_max = -1.0 / 0.0;
  float running_sum = 0.0;
  float acc[4] = float[4](0.0, 0.0, 0.0, 0.0);  // dims tid, tid + 64, tid + 128, tid + 192
  for (uint base = first; base < last; base += 64u) {
    const uint key = base + tid;
    float s = -1.0 / 0.0;
    if (key < last) {
      const uint kw = pc.off[1] + key * kv_width;  // the key's row, in words (f32) and bytes
      const uint kb = pc.off[1] * 4u + key * row_bytes;
      float dot = 0.0;
      for (uint d = 0u; d < hd; ++d) dot += q_row[d] * k_at(type, kb, kw, kv_col + d);
      s = dot * scale;
    }
    const float new_max = max(running_max, group_max(s));
    const float p = key < last ? exp(s - new_max) : 0.0;
    const float correction = exp(running_max - new_max);  // 0 on the first tile
    running_sum = running_sum * correction + group_sum(p);
    running_max = new_max;
    barrier();
    probs[tid] = p;
    barrier();
    const uint n = min(64u, last - base);
    for (uint i = 0u; i < 4u; ++i) {
      const uint d = tid + 64u * i;
      if (d >= hd) break;
      float sum = 0.0;
      for (uint j = 0u; j < n; ++j) {
        const uint row = base + j;
        const uint vw = pc.off[2] + row * kv_width;
        const uint vb = pc.off[2] * 4u + row * row_bytes;
        sum += probs[j] * v_at(type, vb, vw, kv_col + d);
      }
      acc[i] = acc[i] * correction + sum;
    }
  }
  for (uint i = 0u; i < 4u; ++i) {
    const uint d = tid + 64u * i;
    if (d < hd) o[pc.off[3] + t * heads * hd + h * hd + d] = acc[i] / running_sum;
  }
}
