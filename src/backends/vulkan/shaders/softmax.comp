#version 450
// Softmax over rows of n, one row per workgroup: p0 n.
#include "common.glsl"
#include "reduce.glsl"

layout(std430, binding = 0) readonly buffer X { float x[]; };
layout(std430, binding = 1) buffer O { float o[]; };

void main() {
  if (extra_group()) return;
  const uint n = pc.p[0];
  const uint row = group_index();
  const uint t = gl_LocalInvocationID.x;
  const uint xb = pc.off[0] + row * n, ob = pc.off[1] + row * n;
  float m = -1.0 / 0.0;
  for (uint i = t; i < n; i += 64u) m = max(m, x[xb + i]);
  m = group_max(m);
  float s = 0.0;
  for (uint i = t; i < n; i += 64u) {
    const float e = exp(x[xb + i] - m);
    o[ob + i] = e;
    s += e;
  }
  const float inv = 1.0 / group_sum(s);
  for (uint i = t; i < n; i += 64u) o[ob + i] *= inv;
}
