#version 450
// Writes the step's k and v rows into the caches at rows [off, off + T), rounded to the caches'
// type: p0 T, p1 kv width W, p2 has a position buffer (binding 4: off = its first value), else p3
// is off; p4 the type (kv_cache.glsl: 0 f32, 1 f16, 2 bf16, 3 q8_0). One invocation per element
// (f32); per cache word (f16, bf16: the two halves of a word, the one outside the new rows kept, so
// no two invocations write one word); per q8_0 block of 32 (34 bytes, rounded as ggml's
// quantize_row_q8_0_ref: a word shared with a neighbouring block is updated with atomics on its own
// bytes). The host launches enough invocations for the most words the rows can touch.
#include "common.glsl"
#include "kv_cache.glsl"

layout(std430, binding = 0) readonly buffer K { float k[]; };
layout(std430, binding = 1) readonly buffer V { float v[]; };
layout(std430, binding = 2) buffer KC { uint kc[]; };
layout(std430, binding = 3) buffer VC { uint vc[]; };
layout(std430, binding = 4) readonly buffer Pos { int pos[]; };

float src(bool key, uint i) { return key ? k[pc.off[0] + i] : v[pc.off[1] + i]; }

uint bits16(uint type, float x) { return type == 1u ? kv_f32_to_f16(x) : f32_to_bf16(x); }

// Word w of the cache's f16/bf16 elements [2w, 2w + 2), its elements in [lo, hi) replaced by the
// step's rows (element lo is the step's first).
uint half_word(bool key, uint type, uint w, uint lo, uint hi, uint old) {
  uint word = old;
  for (uint part = 0u; part < 2u; ++part) {
    const uint e = 2u * w + part;
    if (e < lo || e >= hi) continue;
    const uint shift = 16u * part;
    word = (word & ~(0xffffu << shift)) | (bits16(type, src(key, e - lo)) << shift);
  }
  return word;
}

// Block b of the step's rows (32 values from element 32 b of k or v) as q8_0: the 34 bytes, in the
// words they fall into when the block starts at byte `at` (words[i] is word (at >> 2) + i; masks[i]
// says which of its bytes are the block's).
void q8_words(bool key, uint b, uint at, out uint words[10], out uint masks[10]) {
  float amax = 0.0;
  for (uint j = 0u; j < 32u; ++j) amax = max(amax, abs(src(key, 32u * b + j)));
  const float d = div_rn(amax, 127.0);
  const float id = d != 0.0 ? div_rn(1.0, d) : 0.0;
  for (uint i = 0u; i < 10u; ++i) {
    words[i] = 0u;
    masks[i] = 0u;
  }
  const uint d16 = kv_f32_to_f16(d);
  for (uint i = 0u; i < 34u; ++i) {
    uint byte_value;
    if (i < 2u) {
      byte_value = (d16 >> (8u * i)) & 0xffu;
    } else {
      const float q = kv_round(src(key, 32u * b + i - 2u) * id);
      byte_value = uint(int(q >= -127.0 && q <= 127.0 ? q : 0.0)) & 0xffu;
    }
    const uint g = (at & 3u) + i;  // byte within the words from word (at >> 2)
    words[g >> 2] |= byte_value << ((g & 3u) * 8u);
    masks[g >> 2] |= 0xffu << ((g & 3u) * 8u);
  }
}

void main() {
  const uint T = pc.p[0], W = pc.p[1], type = pc.p[4];
  const uint i = global_index();
  const uint off = pc.p[2] != 0u ? uint(pos[pc.off[4]]) : pc.p[3];
  if (type == 0u) {
    if (i >= T * W) return;
    kc[pc.off[2] + off * W + i] = floatBitsToUint(k[pc.off[0] + i]);
    vc[pc.off[3] + off * W + i] = floatBitsToUint(v[pc.off[1] + i]);
  } else if (type == 3u) {
    const uint blocks = W / 32u;
    if (i >= T * blocks) return;
    const uint at = (off + i / blocks) * blocks * 34u + (i % blocks) * 34u;  // bytes into the cache
    uint words[10], masks[10];
    for (uint c = 0u; c < 2u; ++c) {
      const bool key = c == 0u;
      q8_words(key, i, at, words, masks);
      const uint first = (key ? pc.off[2] : pc.off[3]) + (at >> 2);
      for (uint w = 0u; w < 10u; ++w) {
        if (masks[w] == 0u) continue;
        if (masks[w] == 0xffffffffu) {
          if (key) kc[first + w] = words[w]; else vc[first + w] = words[w];
        } else if (key) {
          atomicAnd(kc[first + w], ~masks[w]);
          atomicOr(kc[first + w], words[w]);
        } else {
          atomicAnd(vc[first + w], ~masks[w]);
          atomicOr(vc[first + w], words[w]);
        }
      }
    }
  } else {
    const uint lo = off * W, hi = (off + T) * W;  // elements written
    const uint w = (lo >> 1) + i;
    if (w >= (hi + 1u) >> 1) return;
    kc[pc.off[2] + w] = half_word(true, type, w, lo, hi, kc[pc.off[2] + w]);
    vc[pc.off[3] + w] = half_word(false, type, w, lo, hi, vc[pc.off[3] + w]);
  }
}
