#version 450
// The read-bandwidth probe: every invocation sums a grid-strided share of p0 vec4s from binding 0.
// The sum is written only when it equals p1's bits (never, for a zero-filled source), so the reads
// cannot be optimized away and almost nothing is written.
#include "common.glsl"

layout(std430, binding = 0) readonly buffer S { vec4 s[]; };
layout(std430, binding = 1) writeonly buffer O { float o[]; };

void main() {
  if (extra_group()) return;
  const uint n = pc.p[0];
  const uint stride = pc.n_groups * 64u;
  const uint base = pc.off[0] / 4u;
  vec4 acc = vec4(0.0);
  for (uint i = global_index(); i < n; i += stride) acc += s[base + i];
  const float total = acc.x + acc.y + acc.z + acc.w;
  if (total == pf(1)) o[pc.off[1] + gl_LocalInvocationID.x] = total;
}
