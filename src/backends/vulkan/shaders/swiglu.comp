#version 450
// out[r, i] = silu(gate[r, i]) * up[r, i]: p0 rows, p1 F, p2 gate row stride, p3 up row stride,
// p4 up's column offset (the fused form reads gate and up from one [rows, 2F] tensor).
#include "common.glsl"

layout(std430, binding = 0) readonly buffer G { float g[]; };
layout(std430, binding = 1) readonly buffer U { float u[]; };
layout(std430, binding = 2) writeonly buffer O { float o[]; };

void main() {
  const uint i = global_index();
  const uint F = pc.p[1];
  if (i >= pc.p[0] * F) return;
  const uint r = i / F, c = i % F;
  const float x = g[pc.off[0] + r * pc.p[2] + c];
  o[pc.off[2] + i] = x / (1.0 + exp(-x)) * u[pc.off[1] + r * pc.p[3] + pc.p[4] + c];
}
