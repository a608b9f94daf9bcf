#version 450
// Elementwise f32: p0 n, p1 mode (0 add, 1 mul, 2 scale by pf(2), 3 silu, 4 gelu, 5 gelu_tanh).
#include "common.glsl"

layout(std430, binding = 0) readonly buffer A { float a[]; };
layout(std430, binding = 1) readonly buffer B { float b[]; };
layout(std430, binding = 2) writeonly buffer O { float o[]; };

// erfc for x >= 0 (Abramowitz and Stegun 7.1.26 is too coarse near 0; this is Numerical Recipes'
// erfcc Chebyshev fit, relative error below 1.2e-7 everywhere).
float erfc_nonneg(float x) {
  float t = 1.0 / (1.0 + 0.5 * x);
  float poly = -x * x - 1.26551223 +
               t * (1.00002368 + t * (0.37409196 + t * (0.09678418 + t * (-0.18628806 + t * (0.27886807 +
               t * (-1.13520398 + t * (1.48851587 + t * (-0.82215223 + t * 0.17087277))))))));
  return t * exp(poly);
}
float erfc_any(float x) { return x >= 0.0 ? erfc_nonneg(x) : 2.0 - erfc_nonneg(-x); }

void main() {
  const uint i = global_index();
  if (i >= pc.p[0]) return;
  const float x = a[pc.off[0] + i];
  const uint mode = pc.p[1];
  float y;
  if (mode == 0u) {
    y = x + b[pc.off[1] + i];
  } else if (mode == 1u) {
    y = x * b[pc.off[1] + i];
  } else if (mode == 2u) {
    y = x * pf(2);
  } else if (mode == 3u) {
    y = x / (1.0 + exp(-x));
  } else if (mode == 4u) {
    y = 0.5 * x * erfc_any(x * -0.70710678118654752);
  } else {
    // x * sigmoid(2z), z = sqrt(2/pi) (x + 0.044715 x^3): the tanh form without its cancellation.
    const float z = 0.7978845608028654 * (x + 0.044715 * x * x * x);
    y = x / (1.0 + exp(-2.0 * z));
  }
  o[pc.off[2] + i] = y;
}
