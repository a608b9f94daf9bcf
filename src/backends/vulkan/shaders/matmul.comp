#version 450
// y[m, n] = sum_k x[m, k] w[n, k] (+ bias[n]). One workgroup per (output column n, block of 8 rows
// of x; group g is column g % N, rows from g / N * 8); the 64 invocations split k (whole 32-element blocks for the block types) and sum through
// shared memory. p0 M, p1 N, p2 K, p3 weight type (quant.glsl), p5 has bias, p6 bias type (0 f32, 1 f16, 2 bf16).
#include "common.glsl"

layout(std430, binding = 0) readonly buffer X { float x[]; };
layout(std430, binding = 1) readonly buffer Weights { uint w[]; };
layout(std430, binding = 2) readonly buffer Bias { uint bias[]; };
layout(std430, binding = 3) writeonly buffer Y { float y[]; };

#include "quant.glsl"

const uint kRows = 8u;
shared float partial[kRows][64];

float bias_at(uint type, uint n) {
  const uint word = bias[pc.off[2] + (type == 0u ? n : n / 2u)];
  if (type == 0u) return uintBitsToFloat(word);
  const uint bits = (n & 1u) == 0u ? word & 0xffffu : word >> 16;
  return type == 1u ? unpackHalf2x16(bits).x : uintBitsToFloat(bits << 16);
}

void main() {
  const uint M = pc.p[0], N = pc.p[1], K = pc.p[2], type = pc.p[3];
  if (extra_group()) return;
  const uint n = group_index() % N;
  const uint m0 = group_index() / N * kRows;
  const uint t = gl_LocalInvocationID.x;
  const uint rows = min(kRows, M - m0);
  const uint row = pc.off[1] * 4u + n * w_row_bytes(type, K);
  float acc[kRows];
  for (uint r = 0u; r < kRows; ++r) acc[r] = 0.0;
  if (type <= 2u) {
    for (uint k = t; k < K; k += 64u) {
      const float wk = w_at(type, row, k);
      for (uint r = 0u; r < rows; ++r) acc[r] += wk * x[pc.off[0] + (m0 + r) * K + k];
    }
  } else {
    // Block types meet x rounded to q8_0 block by block (llama.cpp's arithmetic, as the CPU
    // backend does): exact integer products per block, then the two scales.
    const uint block_bytes = type == 3u ? 34u : 18u;
    for (uint blk = t; blk < K / 32u; blk += 64u) {
      const uint at = row + blk * block_bytes;
      const float dw = w_f16(at);
      for (uint r = 0u; r < rows; ++r) {
        const uint xb = pc.off[0] + (m0 + r) * K + blk * 32u;
        float amax = 0.0;
        for (uint j = 0u; j < 32u; ++j) amax = max(amax, abs(x[xb + j]));
        const float d = amax / 127.0;
        const float id = d != 0.0 ? 1.0 / d : 0.0;
        const float dx = unpackHalf2x16(packHalf2x16(vec2(d, 0.0))).x;
        int isum = 0;
        for (uint j = 0u; j < 32u; ++j) {
          const float v = x[xb + j] * id;
          float q = roundEven(v);
          if (abs(v - trunc(v)) == 0.5) q = trunc(v) + sign(v);  // ties away from zero
          if (!(q >= -127.0 && q <= 127.0)) q = 0.0;
          int qw;
          if (type == 3u) {
            qw = int(w_i8(at + 2u + j));
          } else {
            const uint b = w_byte(at + 2u + (j & 15u));
            qw = int(j < 16u ? (b & 15u) : (b >> 4)) - 8;
          }
          isum += qw * int(q);
        }
        acc[r] += dw * dx * float(isum);
      }
    }
  }
  // Only the rows this group has (1 when decoding): `rows` is the same for the whole workgroup.
  for (uint r = 0u; r < rows; ++r) partial[r][t] = acc[r];
  barrier();
  for (uint s = 32u; s > 0u; s >>= 1) {
    if (t < s) {
      for (uint r = 0u; r < rows; ++r) partial[r][t] += partial[r][t + s];
    }
    barrier();
  }
  if (t < rows) {
    float v = partial[t][0];
    if (pc.p[5] != 0u) v += bias_at(pc.p[6], n);
    y[pc.off[3] + (m0 + t) * N + n] = v;
  }
}
