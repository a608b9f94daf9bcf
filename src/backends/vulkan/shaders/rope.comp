#version 450
// RoPE. One invocation per (token, head, j): j < n_rot/2 rotates pair j, j >= n_rot/2 copies dim
// n_rot + (j - n_rot/2). p0 T, p1 heads, p2 head_dim, p3 n_rot, p4 adjacent (1) or half-split (0),
// p5 the attention factor that scales cos and sin (float bits; 1 but for YaRN).
// Binding 2 holds each pair's frequency (rope_frequencies: freq_scale * theta^(-2i/n_rot) / divisor)
// as float pairs (high 12 bits, rest) computed on the host in double; the angle is reduced modulo 2 pi exactly enough that far
// positions keep their low bits, and the sine and cosine are our own polynomials (drivers' sin and
// cos need only be accurate to 2^-11).
#include "common.glsl"

layout(std430, binding = 0) readonly buffer X { float x[]; };
layout(std430, binding = 1) readonly buffer Pos { int pos[]; };
layout(std430, binding = 2) readonly buffer Freq { vec2 freq[]; };
layout(std430, binding = 3) writeonly buffer O { float o[]; };

// sin and cos of y, |y| <= pi/4 (Taylor to y^9 and y^8: error below 3e-8).
vec2 sincos_small(float y) {
  const float y2 = y * y;
  const float s = y * (1.0 + y2 * (-1.0 / 6.0 + y2 * (1.0 / 120.0 + y2 * (-1.0 / 5040.0 + y2 * (1.0 / 362880.0)))));
  const float c = 1.0 + y2 * (-0.5 + y2 * (1.0 / 24.0 + y2 * (-1.0 / 720.0 + y2 * (1.0 / 40320.0))));
  return vec2(s, c);
}

// x - k 2 pi for the nearest k, for x an exact product (Cody-Waite: 2 pi split into parts of 8
// and 10 significant bits, whose products with k < 2^14 are exact, so the subtractions are too).
float reduce_two_pi(float x) {
  precise float k = round(x * 0.15915494309189535);
  precise float r = x - k * 6.28125;
  r = r - k * 1.9359588623046875e-3;  // 1015 / 2^19
  r = r - k * -6.516827397717861e-7;  // 2 pi less the two parts above
  return r;
}

// (sin, cos) of r, |r| <= about 2 pi.
vec2 sincos_of(float r) {
  precise float q = round(r * 0.63661977236758134);
  precise float y = r - q * 1.5703125;
  y = y - q * 4.838267923332751e-4;
  const vec2 sc = sincos_small(y);
  const int quadrant = int(q) & 3;
  if (quadrant == 0) return sc;
  if (quadrant == 1) return vec2(sc.y, -sc.x);
  if (quadrant == 2) return vec2(-sc.x, -sc.y);
  return vec2(-sc.y, sc.x);
}

void main() {
  const uint T = pc.p[0], heads = pc.p[1], hd = pc.p[2], n_rot = pc.p[3];
  const uint half_rot = n_rot / 2u;
  const uint per_head = half_rot + (hd - n_rot);
  const uint i = global_index();
  if (i >= T * heads * per_head) return;
  const uint j = i % per_head;
  const uint h = (i / per_head) % heads;
  const uint t = i / (per_head * heads);
  const uint xb = pc.off[0] + t * heads * hd + h * hd;
  const uint ob = pc.off[3] + t * heads * hd + h * hd;
  if (j >= half_rot) {
    const uint d = n_rot + (j - half_rot);
    o[ob + d] = x[xb + d];
    return;
  }
  const uint a = pc.p[4] != 0u ? 2u * j : j;
  const uint b = pc.p[4] != 0u ? a + 1u : j + half_rot;
  // position = ph + pl with ph a multiple of 4096 (12 significant bits up to 2^24) and pl < 4096,
  // the frequency = fh + fl with fh of 12 significant bits (the host splits it): ph * fh and
  // pl * fh are exact, each is reduced on its own, and the small rest is added after.
  const int position = pos[pc.off[1] + t];
  precise float ph = float(position & ~4095);
  precise float pl = float(position & 4095);
  const vec2 f = freq[pc.off[2] / 2u + j];
  precise float angle = reduce_two_pi(ph * f.x) + reduce_two_pi(pl * f.x) + (ph * f.y + pl * f.y);
  const vec2 sc = sincos_of(angle) * pf(5);
  const float x0 = x[xb + a], x1 = x[xb + b];
  o[ob + a] = x0 * sc.y - x1 * sc.x;
  o[ob + b] = x0 * sc.x + x1 * sc.y;
}
