#version 450
// One row per workgroup. p0 H, p1 mode (0 rms, 1 layer), p2 eps bits, p3 weight type, p4 has bias,
// p5 bias type (types: 0 f32, 1 f16, 2 bf16).
#include "common.glsl"
#include "reduce.glsl"

layout(std430, binding = 0) readonly buffer X { float x[]; };
layout(std430, binding = 1) readonly buffer W { uint w[]; };
layout(std430, binding = 2) readonly buffer Bias { uint bias[]; };
layout(std430, binding = 3) writeonly buffer O { float o[]; };

float vec_at(uint type, uint word_off, uint i, bool is_bias) {
  const uint word = is_bias ? bias[word_off + (type == 0u ? i : i / 2u)] : w[word_off + (type == 0u ? i : i / 2u)];
  if (type == 0u) return uintBitsToFloat(word);
  const uint half_bits = (i & 1u) == 0u ? word & 0xffffu : word >> 16;
  return type == 1u ? unpackHalf2x16(half_bits).x : uintBitsToFloat(half_bits << 16);
}

void main() {
  if (extra_group()) return;
  const uint H = pc.p[0];
  const uint row = group_index();
  const uint t = gl_LocalInvocationID.x;
  const uint base = pc.off[0] + row * H;
  float mean = 0.0;
  if (pc.p[1] == 1u) {
    float s = 0.0;
    for (uint i = t; i < H; i += 64u) s += x[base + i];
    mean = group_sum(s) / float(H);
  }
  float sq = 0.0;
  for (uint i = t; i < H; i += 64u) {
    const float d = x[base + i] - mean;
    sq += d * d;
  }
  const float inv = 1.0 / sqrt(group_sum(sq) / float(H) + pf(2));
  for (uint i = t; i < H; i += 64u) {
    float y = (x[base + i] - mean) * inv * vec_at(pc.p[3], pc.off[1], i, false);
    if (pc.p[4] != 0u) y += vec_at(pc.p[5], pc.off[2], i, true);
    o[pc.off[3] + row * H + i] = y;
  }
}
