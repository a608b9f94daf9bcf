#version 450
// out[t, i] = table[ids[t], i] in f32. p0 T, p1 H, p2 table type (quant.glsl), p3 rows of the table. An id outside the table reads row 0 (the host checks
// ids before they reach a device).
#include "common.glsl"

layout(std430, binding = 0) readonly buffer Table { uint w[]; };
layout(std430, binding = 1) readonly buffer Ids { int ids[]; };
layout(std430, binding = 2) writeonly buffer O { float o[]; };

#include "quant.glsl"

void main() {
  const uint T = pc.p[0], H = pc.p[1], type = pc.p[2];
  const uint i = global_index();
  if (i >= T * H) return;
  const uint t = i / H, c = i % H;
  int id = ids[pc.off[1] + t];
  if (id < 0 || uint(id) >= pc.p[3]) id = 0;
  const uint row = pc.off[0] * 4u + uint(id) * w_row_bytes(type, H);
  o[pc.off[2] + i] = w_at(type, row, c);
}
