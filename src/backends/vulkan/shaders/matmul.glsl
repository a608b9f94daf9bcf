// y[m, n] = sum_k x[m, k] w[n, k] (+ bias[n]), included by matmul_rows.comp (ROWS 8, COLS 1: long
// prompts) and matmul_cols.comp (ROWS 1, COLS 8: decode and short steps). A workgroup computes a
// tile of ROWS rows of x by COLS columns (weight rows); the tile is fixed at compile time so every
// accumulator stays a register. The 64 invocations split k (whole 32-element blocks for the block
// types) and sum through shared memory. Group g is column block g % ceil(N / COLS), row block
// g / ceil(N / COLS). p0 M, p1 N, p2 K, p3 weight type (quant.glsl), p5 has bias, p6 bias type
// (0 f32, 1 f16, 2 bf16).
#include "common.glsl"

layout(std430, binding = 0) readonly buffer X { float x[]; };
layout(std430, binding = 1) readonly buffer Weights { uint w[]; };
layout(std430, binding = 2) readonly buffer Bias { uint bias[]; };
layout(std430, binding = 3) writeonly buffer Y { float y[]; };

#include "quant.glsl"

const uint kTile = ROWS * COLS;
shared float partial[kTile][64];

float bias_at(uint type, uint n) {
  const uint word = bias[pc.off[2] + (type == 0u ? n : n / 2u)];
  if (type == 0u) return uintBitsToFloat(word);
  const uint bits = (n & 1u) == 0u ? word & 0xffffu : word >> 16;
  return type == 1u ? unpackHalf2x16(bits).x : uintBitsToFloat(bits << 16);
}

void main() {
  const uint M = pc.p[0], N = pc.p[1], K = pc.p[2], type = pc.p[3];
  if (extra_group()) return;
  const uint column_blocks = (N + COLS - 1u) / COLS;
  const uint n0 = group_index() % column_blocks * COLS;
  const uint m0 = group_index() / column_blocks * ROWS;
  const uint t = gl_LocalInvocationID.x;
  // The same for the whole workgroup, so every barrier below stays uniform.
  const uint rows = min(ROWS, M - m0), cols = min(COLS, N - n0);
  const uint row_bytes = w_row_bytes(type, K);
  const uint w0 = pc.off[1] * 4u + n0 * row_bytes;  // byte of column n0's first weight
  float acc[ROWS][COLS];
  for (uint r = 0u; r < ROWS; ++r) {
    for (uint c = 0u; c < COLS; ++c) acc[r][c] = 0.0;
  }
  if (type <= 2u) {
    for (uint k = t; k < K; k += 64u) {
      float xk[ROWS];
      // Rows past the end read the last row instead (never stored): no load depends on a condition.
      for (uint r = 0u; r < ROWS; ++r) xk[r] = x[pc.off[0] + min(m0 + r, M - 1u) * K + k];
      for (uint c = 0u; c < COLS; ++c) {
        if (c >= cols) break;
        const float wk = w_at(type, w0 + c * row_bytes, k);
        for (uint r = 0u; r < ROWS; ++r) acc[r][c] += wk * xk[r];
      }
    }
  } else {
    // Block types meet x rounded to q8_0 block by block (llama.cpp's arithmetic, as the CPU
    // backend does): exact integer products per block, then the two scales. Each x block is
    // rounded once for all the tile's columns.
    const uint block_bytes = type == 3u ? 34u : 18u;
    for (uint blk = t; blk < K / 32u; blk += 64u) {
      for (uint r = 0u; r < ROWS; ++r) {
        if (r >= rows) break;
        const uint xb = pc.off[0] + (m0 + r) * K + blk * 32u;
        float amax = 0.0;
        for (uint j = 0u; j < 32u; ++j) amax = max(amax, abs(x[xb + j]));
        const float d = amax / 127.0;
        const float id = d != 0.0 ? 1.0 / d : 0.0;
        const float dx = unpackHalf2x16(packHalf2x16(vec2(d, 0.0))).x;
        int xq[32];
        for (uint j = 0u; j < 32u; ++j) {
          const float v = x[xb + j] * id;
          float q = roundEven(v);
          if (abs(v - trunc(v)) == 0.5) q = trunc(v) + sign(v);  // ties away from zero
          xq[j] = q >= -127.0 && q <= 127.0 ? int(q) : 0;
        }
        for (uint c = 0u; c < COLS; ++c) {
          if (c >= cols) break;
          const uint at = w0 + c * row_bytes + blk * block_bytes;
          int isum = 0;
          if (type == 3u) {
            for (uint j = 0u; j < 32u; ++j) isum += int(w_i8(at + 2u + j)) * xq[j];
          } else {
            for (uint j = 0u; j < 16u; ++j) {
              const uint b = w_byte(at + 2u + j);
              isum += (int(b & 15u) - 8) * xq[j] + (int(b >> 4) - 8) * xq[j + 16u];
            }
          }
          acc[r][c] += w_f16(at) * dx * float(isum);
        }
      }
    }
  }
  for (uint r = 0u; r < ROWS; ++r) {
    for (uint c = 0u; c < COLS; ++c) partial[r * COLS + c][t] = acc[r][c];
  }
  barrier();
  for (uint s = 32u; s > 0u; s >>= 1) {
    if (t < s) {
      for (uint i = 0u; i < kTile; ++i) partial[i][t] += partial[i][t + s];
    }
    barrier();
  }
  if (t < kTile) {
    const uint r = t / COLS, c = t % COLS;
    if (r < rows && c < cols) {
      float v = partial[t][0];
      if (pc.p[5] != 0u) v += bias_at(pc.p[6], n0 + c);
      y[pc.off[3] + (m0 + r) * N + n0 + c] = v;
    }
  }
}
