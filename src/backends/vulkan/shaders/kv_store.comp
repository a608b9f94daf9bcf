#version 450
// Writes the step's k and v rows into the caches at rows [off, off + T): p0 T, p1 kv width,
// p2 has a position buffer (binding 4: off = its first value), else p3 is off.
#include "common.glsl"

layout(std430, binding = 0) readonly buffer K { float k[]; };
layout(std430, binding = 1) readonly buffer V { float v[]; };
layout(std430, binding = 2) writeonly buffer KC { float kc[]; };
layout(std430, binding = 3) writeonly buffer VC { float vc[]; };
layout(std430, binding = 4) readonly buffer Pos { int pos[]; };

void main() {
  const uint T = pc.p[0], W = pc.p[1];
  const uint i = global_index();
  if (i >= T * W) return;
  const uint off = pc.p[2] != 0u ? uint(pos[pc.off[4]]) : pc.p[3];
  kc[pc.off[2] + off * W + i] = k[pc.off[0] + i];
  vc[pc.off[3] + off * W + i] = v[pc.off[1] + i];
}
