// y[m, n] = sum_k x[m, k] w[n, k] (+ bias[n]), included by matmul_rows.comp (ROWS 8, COLS 1: long
// prompts) and matmul_cols.comp (ROWS 1, COLS 8: decode and short steps). A workgroup computes a
// tile of ROWS rows of x by COLS columns (weight rows); the tile is fixed at compile time so every
// accumulator stays a register. The 64 invocations split k (whole 32-element groups for the block
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
shared float group_max[ROWS][64];  // the 256-element types: each group's largest x per row

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
      // bf16 weights meet x rounded to bf16, as on the CPU (and in llama.cpp).
      if (type == 2u) {
        for (uint r = 0u; r < ROWS; ++r) xk[r] = uintBitsToFloat(f32_to_bf16(xk[r]) << 16);
      }
      for (uint c = 0u; c < COLS; ++c) {
        if (c >= cols) break;
        const float wk = w_at_plain(type, w0 + c * row_bytes, k);
        for (uint r = 0u; r < ROWS; ++r) acc[r][c] += wk * xk[r];
      }
    }
  } else if (w_block_size(type) == 32u) {
    // Block types meet x rounded as llama.cpp rounds it for them (the CPU backend's arithmetic,
    // cpu/quant_blocks.h): q8_0 blocks, with q8_1's sums for the types with a min; exact integer
    // products per block, then the scales. Each x block is rounded once for all the tile's columns,
    // and a lone column's block decoded once for all the rows.
    const uint block_bytes = w_block_bytes(type);
    const bool has_min = type == kQ4_1 || type == kQ5_1;
    int wq[32];
    vec2 wd = vec2(0.0);
    for (uint blk = t; blk < K / 32u; blk += 64u) {
      for (uint r = 0u; r < ROWS; ++r) {
        if (r >= rows) break;
        const uint xb = pc.off[0] + (m0 + r) * K + blk * 32u;
        float amax = 0.0;
        for (uint j = 0u; j < 32u; ++j) amax = max(amax, abs(x[xb + j]));
        const float d = div_rn(amax, 127.0);
        const float id = d != 0.0 ? div_rn(1.0, d) : 0.0;
        const float dx = unpackHalf2x16(packHalf2x16(vec2(d, 0.0))).x;
        int xq[32];
        int xsum = 0;
        for (uint j = 0u; j < 32u; ++j) {
          const float v = x[xb + j] * id;
          float q = roundEven(v);
          if (abs(v - trunc(v)) == 0.5) q = trunc(v) + sign(v);  // ties away from zero
          xq[j] = q >= -127.0 && q <= 127.0 ? int(q) : 0;
          xsum += xq[j];
        }
        // q8_1's s: fp16(d * the sum of the quants), d unrounded.
        const float s = unpackHalf2x16(packHalf2x16(vec2(float(xsum) * d, 0.0))).x;
        for (uint c = 0u; c < COLS; ++c) {
          if (c >= cols) break;
          const uint at = w0 + c * row_bytes + blk * block_bytes;
          if (COLS > 1u || r == 0u) {
            w_group32(type, at, wq);
            wd = w_scales(type, at);
          }
          int isum = 0;
          for (uint j = 0u; j < 32u; ++j) isum += wq[j] * xq[j];
          acc[r][c] += wd.x * dx * float(isum);
          if (has_min) acc[r][c] += wd.y * s;
        }
      }
    }
  } else {
    // The 256-element types meet x rounded to q8_K (one f32 scale per 256: the value of largest
    // magnitude maps to -127, round half to even) as on the CPU; each invocation takes a group of 32
    // of a super-block, whose eight groups sit in eight neighbouring invocations and share their
    // largest values through shared memory. Per group, the exact integer sums of its two halves of
    // 16 meet their scales and mins, then d and dmin (the CPU's sum over a super-block, in parts).
    const uint block_bytes = w_block_bytes(type);
    const uint groups = K / 32u;
    int wq[32];
    ivec2 wsm0 = ivec2(0), wsm1 = ivec2(0);
    vec2 wd = vec2(0.0);
    // The loop and its barriers are the same for the whole workgroup; invocations past the last
    // group take part with nothing to add.
    for (uint base = 0u; base < groups; base += 64u) {
      const uint blk = base + t;
      const bool live = blk < groups;
      for (uint r = 0u; r < ROWS; ++r) {
        if (r >= rows) break;
        // This group's first value of largest magnitude, sign kept.
        float amax = 0.0, vmax = 0.0;
        if (live) {
          const uint xb = pc.off[0] + (m0 + r) * K + blk * 32u;
          for (uint j = 0u; j < 32u; ++j) {
            const float v = x[xb + j];
            if (abs(v) > amax) {
              amax = abs(v);
              vmax = v;
            }
          }
        }
        group_max[r][t] = vmax;
      }
      barrier();
      if (live) {
        const uint first = t & ~7u, g = blk % 8u;
        for (uint r = 0u; r < ROWS; ++r) {
          if (r >= rows) break;
          // The super-block's first value of largest magnitude: its groups' in order.
          float amax = 0.0, vmax = 0.0;
          for (uint i = 0u; i < 8u; ++i) {
            const float v = group_max[r][first + i];
            if (abs(v) > amax) {
              amax = abs(v);
              vmax = v;
            }
          }
          const uint xb = pc.off[0] + (m0 + r) * K + blk * 32u;
          int xq[32];
          float xs = 0.0;
          if (amax != 0.0) {
            const float iscale = div_rn(-127.0, vmax);
            for (uint j = 0u; j < 32u; ++j) xq[j] = min(127, int(roundEven(iscale * x[xb + j])));
            xs = div_rn(1.0, iscale);
          } else {
            for (uint j = 0u; j < 32u; ++j) xq[j] = 0;
          }
          ivec2 xsum = ivec2(0);
          for (uint j = 0u; j < 16u; ++j) xsum += ivec2(xq[j], xq[j + 16u]);
          for (uint c = 0u; c < COLS; ++c) {
            if (c >= cols) break;
            const uint at = w0 + c * row_bytes + blk / 8u * block_bytes;
            if (COLS > 1u || r == 0u) {
              w_group256(type, at, g, wq);
              wsm0 = w_scale_min(type, at, 2u * g);
              wsm1 = w_scale_min(type, at, 2u * g + 1u);
              wd = w_scales(type, at);
            }
            ivec2 part = ivec2(0);
            for (uint j = 0u; j < 16u; ++j) part += ivec2(wq[j] * xq[j], wq[j + 16u] * xq[j + 16u]);
            const int dot = wsm0.x * part.x + wsm1.x * part.y;
            const int mins = wsm0.y * xsum.x + wsm1.y * xsum.y;
            acc[r][c] += wd.x * xs * float(dot);
            acc[r][c] -= wd.y * xs * float(mins);
          }
        }
      }
      barrier();  // group_max is written again by the next round
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
