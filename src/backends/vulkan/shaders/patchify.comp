#version 450
// One invocation per output element: row (b, gy, gx), column (c, ky, kx). p0 B, p1 C, p2 H, p3 W,
// p4 patch, p5 channels_last.
#include "common.glsl"

layout(std430, binding = 0) readonly buffer X { float x[]; };
layout(std430, binding = 1) writeonly buffer O { float o[]; };

void main() {
  const uint B = pc.p[0], C = pc.p[1], H = pc.p[2], W = pc.p[3], P = pc.p[4];
  const uint gh = H / P, gw = W / P, cols = C * P * P;
  const uint i = global_index();
  if (i >= B * gh * gw * cols) return;
  const uint row = i / cols, col = i % cols;
  const uint b = row / (gh * gw), gy = (row / gw) % gh, gx = row % gw;
  const uint c = col / (P * P), ky = (col / P) % P, kx = col % P;
  const uint yy = gy * P + ky, xx = gx * P + kx;
  const uint src = pc.p[5] != 0u ? ((b * H + yy) * W + xx) * C + c : ((b * C + c) * H + yy) * W + xx;
  o[pc.off[1] + i] = x[pc.off[0] + src];
}
