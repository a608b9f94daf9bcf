#include "backends/cpu/kernels/cpu/quantize_blocks.h"

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstring>

#include "backends/cpu/kernels/cpu/quant_blocks.h"
#include "core/error.h"
#include "core/half.h"

// Every expression below keeps ggml's association and its int -> float conversion points: float
// addition is not associative, and one ulp of difference in a scale can move a quant. The casts
// are where C converts implicitly. Nothing may be contracted into an FMA either (ggml's reference
// is built without one): this file is compiled without -march, keep it so, and never -ffast-math.

namespace ferry::kernels::cpu {

namespace {

// Below this a group's largest magnitude counts as zero (ggml's GROUP_MAX_EPS).
constexpr float kGroupMaxEps = 1e-15f;

// Round half to even, as ggml's nearest_int: adding 1.5 * 2^23 leaves the rounded integer in the
// low mantissa bits. Exact for |v| < 2^22; beyond that ggml gets the same (meaningless) bits.
int nearest_int(float v) {
  const float shifted = v + 12582912.0f;
  int32_t bits;
  std::memcpy(&bits, &shifted, 4);
  return (bits & 0x007fffff) - 0x00400000;
}

// The low byte of C's (int8_t)/(uint8_t) cast of a float as x86 compilers emit it: truncation to
// 32 bits, whose out-of-range result (NaN, inf) is 0x80000000. Written out so it is defined here.
uint8_t truncated_low_byte(float v) {
  const int32_t t = v >= -2147483648.0f && v < 2147483648.0f ? static_cast<int32_t>(v) : INT32_MIN;
  return static_cast<uint8_t>(t);
}

int clamp(int v, int lo, int hi) {
  return std::max(lo, std::min(hi, v));
}

float f(int v) {
  return static_cast<float>(v);
}

// The value of largest magnitude, its sign kept (the first of equal magnitudes), and that
// magnitude: where the symmetric formats put their extreme quant.
struct Extreme {
  float value = 0.0f;
  float magnitude = 0.0f;
};
Extreme largest_magnitude(int n, const float* x) {
  Extreme e;
  for (int i = 0; i < n; ++i) {
    const float ax = std::fabs(x[i]);
    if (ax > e.magnitude) {
      e.magnitude = ax;
      e.value = x[i];
    }
  }
  return e;
}

// 32 quants of 4 bits into 16 bytes: element j in the low nibble of byte j, element j + 16 high.
template <typename Q>
void pack_nibbles_32(const Q* q, uint8_t* qs) {
  for (int j = 0; j < 16; ++j) qs[j] = static_cast<uint8_t>((q[j] & 15) | ((q[j + 16] & 15) << 4));
}

// The fifth bits of 32 quants, bit j for element j (q5_0 / q5_1's qh, little-endian).
void store_high_bits_32(const uint8_t* q, uint8_t* qh) {
  uint32_t bits = 0;
  for (int j = 0; j < 32; ++j) bits |= static_cast<uint32_t>((q[j] >> 4) & 1) << j;
  std::memcpy(qh, &bits, 4);
}

// 256 2-bit values into the k-quant plane layout (core/dtype.h): element e lands in bits
// 2c..2c+1 of qs[32 h + l], h = e / 128, c = (e % 128) / 32, l = e % 32.
template <typename Q>
void pack_2bit_planes(const Q* q, uint8_t* qs) {
  for (int h = 0; h < 2; ++h) {
    for (int l = 0; l < 32; ++l) {
      const Q* e = q + 128 * h + l;
      qs[32 * h + l] = static_cast<uint8_t>((e[0] & 3) | ((e[32] & 3) << 2) | ((e[64] & 3) << 4) | ((e[96] & 3) << 6));
    }
  }
}

// ggml's make_qx_quants with rmse_type 1 and no weights (weights x^2): the symmetric scale of n
// values onto [-nmax, nmax - 1], the largest magnitude mapped to -nmax, then 18 nearby scales
// tried for a smaller weighted error. L gets the quants offset by nmax; returns the scale.
float fit_symmetric(int n, int nmax, const float* x, int8_t* L) {
  const auto [max, amax] = largest_magnitude(n, x);
  if (amax < kGroupMaxEps) {
    std::fill(L, L + n, int8_t{0});
    return 0.0f;
  }
  float iscale = f(-nmax) / max;
  float sumlx = 0.0f, suml2 = 0.0f;
  for (int i = 0; i < n; ++i) {
    const int l = clamp(nearest_int(iscale * x[i]), -nmax, nmax - 1);
    L[i] = static_cast<int8_t>(l + nmax);
    const float w = x[i] * x[i];
    sumlx += w * x[i] * f(l);
    suml2 += w * f(l) * f(l);
  }
  float scale = suml2 != 0.0f ? sumlx / suml2 : 0.0f;
  float best = scale * sumlx;
  for (int is = -9; is <= 9; ++is) {
    if (is == 0) continue;
    iscale = -(f(nmax) + 0.1f * f(is)) / max;
    sumlx = suml2 = 0.0f;
    for (int i = 0; i < n; ++i) {
      const int l = clamp(nearest_int(iscale * x[i]), -nmax, nmax - 1);
      const float w = x[i] * x[i];
      sumlx += w * x[i] * f(l);
      suml2 += w * f(l) * f(l);
    }
    if (suml2 > 0.0f && sumlx * sumlx > best * suml2) {
      for (int i = 0; i < n; ++i) L[i] = static_cast<int8_t>(nmax + clamp(nearest_int(iscale * x[i]), -nmax, nmax - 1));
      scale = sumlx / suml2;
      best = scale * sumlx;
    }
  }
  return scale;
}

// ggml's make_q3_quants with do_rmse: the symmetric start of fit_symmetric, then up to 5 sweeps
// that move single quants while the weighted (x^2) least-squares fit improves. L as above.
float fit_symmetric_sweeps(int n, int nmax, const float* x, int8_t* L) {
  const auto [max, amax] = largest_magnitude(n, x);
  if (amax < kGroupMaxEps) {
    std::fill(L, L + n, int8_t{0});
    return 0.0f;
  }
  const float iscale = f(-nmax) / max;
  float sumlx = 0.0f, suml2 = 0.0f;
  for (int i = 0; i < n; ++i) {
    const int l = clamp(nearest_int(iscale * x[i]), -nmax, nmax - 1);
    L[i] = static_cast<int8_t>(l);
    const float w = x[i] * x[i];
    sumlx += w * x[i] * f(l);
    suml2 += w * f(l) * f(l);
  }
  for (int sweep = 0; sweep < 5; ++sweep) {
    int changed = 0;
    for (int i = 0; i < n; ++i) {
      const float w = x[i] * x[i];
      float slx = sumlx - w * x[i] * f(L[i]);
      if (slx > 0.0f) {
        float sl2 = suml2 - w * f(L[i]) * f(L[i]);
        const int l = clamp(nearest_int(x[i] * sl2 / slx), -nmax, nmax - 1);
        if (l != L[i]) {
          slx += w * x[i] * f(l);
          sl2 += w * f(l) * f(l);
          if (sl2 > 0.0f && slx * slx * suml2 > sumlx * sumlx * sl2) {
            L[i] = static_cast<int8_t>(l);
            sumlx = slx;
            suml2 = sl2;
            ++changed;
          }
        }
      }
    }
    if (changed == 0) break;
  }
  for (int i = 0; i < n; ++i) L[i] = static_cast<int8_t>(L[i] + nmax);
  return suml2 > 0.0f ? sumlx / suml2 : 0.0f;
}

// ggml's make_qkx2_quants: an affine fit x ~ scale * q - the_min of n values (n <= 32) onto
// [0, nmax], min clamped to <= 0, searching nstep + 1 scales from (nmax + rmin) / range in steps
// of rdelta by weighted least squares, kept when the weighted error (|d| or d^2) drops.
float fit_affine(int n, int nmax, const float* x, const float* weights, uint8_t* L, float* the_min, float rmin,
                 float rdelta, int nstep, bool use_mad) {
  float min = x[0], max = x[0];
  float sum_w = weights[0];
  float sum_x = sum_w * x[0];
  for (int i = 1; i < n; ++i) {
    if (x[i] < min) min = x[i];
    if (x[i] > max) max = x[i];
    const float w = weights[i];
    sum_w += w;
    sum_x += w * x[i];
  }
  if (min > 0.0f) min = 0.0f;
  if (max == min) {
    std::fill(L, L + n, uint8_t{0});
    *the_min = -min;
    return 0.0f;
  }
  float iscale = f(nmax) / (max - min);
  float scale = 1.0f / iscale;
  auto error_of = [&](float s, float m, const uint8_t* q) {
    float error = 0.0f;
    for (int i = 0; i < n; ++i) {
      float diff = s * f(q[i]) + m - x[i];
      diff = use_mad ? std::fabs(diff) : diff * diff;
      error += weights[i] * diff;
    }
    return error;
  };
  for (int i = 0; i < n; ++i) L[i] = static_cast<uint8_t>(clamp(nearest_int(iscale * (x[i] - min)), 0, nmax));
  float best_error = error_of(scale, min, L);
  uint8_t trial[32];
  for (int is = 0; is <= nstep; ++is) {
    iscale = (rmin + rdelta * f(is) + f(nmax)) / (max - min);
    float sum_l = 0.0f, sum_l2 = 0.0f, sum_xl = 0.0f;
    for (int i = 0; i < n; ++i) {
      const int l = clamp(nearest_int(iscale * (x[i] - min)), 0, nmax);
      trial[i] = static_cast<uint8_t>(l);
      const float w = weights[i];
      sum_l += w * f(l);
      sum_l2 += w * f(l) * f(l);
      sum_xl += w * f(l) * x[i];
    }
    const float D = sum_w * sum_l2 - sum_l * sum_l;
    if (D > 0.0f) {
      float this_scale = (sum_w * sum_xl - sum_x * sum_l) / D;
      float this_min = (sum_l2 * sum_x - sum_l * sum_xl) / D;
      if (this_min > 0.0f) {
        this_min = 0.0f;
        this_scale = sum_xl / sum_l2;
      }
      const float error = error_of(this_scale, this_min, trial);
      if (error < best_error) {
        std::copy(trial, trial + n, L);
        best_error = error;
        scale = this_scale;
        min = this_min;
      }
    }
  }
  *the_min = -min;
  return scale;
}

// The 8 6-bit scales and mins of q4_k / q5_k into their 12 bytes (the inverse of unpack_scales_k4).
void pack_scales_k4(const uint8_t sc[8], const uint8_t m[8], uint8_t* packed) {
  for (int j = 0; j < 4; ++j) {
    packed[j] = sc[j];
    packed[j + 4] = m[j];
  }
  for (int j = 4; j < 8; ++j) {
    packed[j + 4] = static_cast<uint8_t>((sc[j] & 15) | ((m[j] & 15) << 4));
    packed[j - 4] = static_cast<uint8_t>(packed[j - 4] | ((sc[j] >> 4) << 6));
    packed[j] = static_cast<uint8_t>(packed[j] | ((m[j] >> 4) << 6));
  }
}

// q4_k and q5_k share everything but the quant width: per 32 an affine fit with weights
// rms + |x|, the 8 scales and 8 mins rounded to 6 bits against their largest, then every quant
// re-rounded against the scales as stored. Fills d, dmin, the 12 scale bytes and L[256].
void quantize_super_block_k4(const float* x, int nmax, float rmin, int nstep, uint16_t* d, uint16_t* dmin,
                             uint8_t* scales, uint8_t* L) {
  float sub_scale[8], sub_min[8], weights[32];
  float max_scale = 0.0f, max_min = 0.0f;  // the largest positive scale and min
  for (int j = 0; j < 8; ++j) {
    const float* xs = x + 32 * j;
    float sum_x2 = 0.0f;
    for (int l = 0; l < 32; ++l) sum_x2 += xs[l] * xs[l];
    const float av_x = std::sqrt(sum_x2 / 32.0f);
    for (int l = 0; l < 32; ++l) weights[l] = av_x + std::fabs(xs[l]);
    sub_scale[j] = fit_affine(32, nmax, xs, weights, L + 32 * j, &sub_min[j], rmin, 0.1f, nstep, false);
    if (sub_scale[j] > max_scale) max_scale = sub_scale[j];
    if (sub_min[j] > max_min) max_min = sub_min[j];
  }
  const float inv_scale = max_scale > 0.0f ? 63.0f / max_scale : 0.0f;
  const float inv_min = max_min > 0.0f ? 63.0f / max_min : 0.0f;
  uint8_t sc[8], m[8];
  for (int j = 0; j < 8; ++j) {
    // uint8_t first, then the clamp: ggml's order (a negative scale would wrap, then clamp to 63).
    sc[j] = std::min<uint8_t>(63, static_cast<uint8_t>(nearest_int(inv_scale * sub_scale[j])));
    m[j] = std::min<uint8_t>(63, static_cast<uint8_t>(nearest_int(inv_min * sub_min[j])));
  }
  pack_scales_k4(sc, m, scales);
  *d = f32_to_f16(max_scale / 63.0f);
  *dmin = f32_to_f16(max_min / 63.0f);
  const float dd = f16_to_f32(*d), dm = f16_to_f32(*dmin);
  for (int j = 0; j < 8; ++j) {
    const float ds = dd * f(sc[j]);
    if (ds == 0.0f) continue;  // keep the fit's quants
    const float ms = dm * f(m[j]);
    for (int l = 0; l < 32; ++l)
      L[32 * j + l] = static_cast<uint8_t>(clamp(nearest_int((x[32 * j + l] + ms) / ds), 0, nmax));
  }
}

// Index of the iq4 value nearest x; an exact midpoint goes to the larger value (ggml's
// best_index_int8 on the sorted table).
int nearest_iq4_index(float x) {
  const int8_t* v = kIq4NlValues;
  if (x <= f(v[0])) return 0;
  if (x >= f(v[15])) return 15;
  int lo = 0, hi = 15;
  while (hi - lo > 1) {
    const int mid = (lo + hi) / 2;
    if (x < f(v[mid])) {
      hi = mid;
    } else {
      lo = mid;
    }
  }
  return x - f(v[hi - 1]) < f(v[hi]) - x ? hi - 1 : hi;
}

// The scale of one block of 32 of iq4_nl / iq4_xs: quantize_row_iq4_nl_impl's search with weights
// x^2 and ntry 7 (the largest magnitude on -127, then 15 inverse scales around it, each scored by
// the weighted least-squares fit of the codebook values it picks).
float iq4_block_scale(const float* x) {
  const int8_t* v = kIq4NlValues;
  const auto [max, amax] = largest_magnitude(32, x);
  if (amax < kGroupMaxEps) return 0.0f;
  auto fit = [&](float id, float* sumqx, float* sumq2) {
    *sumqx = *sumq2 = 0.0f;
    for (int j = 0; j < 32; ++j) {
      const float q = f(v[nearest_iq4_index(id * x[j])]);
      const float w = x[j] * x[j];
      *sumqx += w * q * x[j];
      *sumq2 += w * q * q;
    }
  };
  float sumqx, sumq2;
  fit(1.0f / (-max / f(v[0])), &sumqx, &sumq2);
  float d = sumq2 > 0.0f ? sumqx / sumq2 : 0.0f;
  float best = d * sumqx;
  for (int itry = -7; itry <= 7; ++itry) {
    fit(f(itry + v[0]) / max, &sumqx, &sumq2);
    if (sumq2 > 0.0f && sumqx * sumqx > best * sumq2) {
      d = sumqx / sumq2;
      best = d * sumqx;
    }
  }
  return d;
}

template <typename Block>
void quantize_blocks(Block (*quantize)(const float*), int block_size, const float* src, uint8_t* dst, int64_t n) {
  for (int64_t b = 0; b < n / block_size; ++b) {
    const Block block = quantize(src + b * block_size);
    std::memcpy(dst + static_cast<size_t>(b) * sizeof(Block), &block, sizeof(Block));
  }
}

}  // namespace

BlockQ4_1 quantize_block_q4_1(const float* x) {
  float min = FLT_MAX, max = -FLT_MAX;
  for (int j = 0; j < 32; ++j) {
    if (x[j] < min) min = x[j];
    if (x[j] > max) max = x[j];
  }
  const float d = (max - min) / 15.0f;
  const float id = d != 0.0f ? 1.0f / d : 0.0f;
  BlockQ4_1 block{};
  block.d = f32_to_f16(d);
  block.m = f32_to_f16(min);
  uint8_t q[32];
  for (int j = 0; j < 32; ++j) {
    // Truncation of (x - min) / d + 0.5, as the reference's (int8_t) cast, capped at 15.
    const auto t = static_cast<int8_t>(truncated_low_byte((x[j] - min) * id + 0.5f));
    q[j] = static_cast<uint8_t>(std::min<int>(15, t));
  }
  pack_nibbles_32(q, block.qs);
  return block;
}

BlockQ5_0 quantize_block_q5_0(const float* x) {
  // The value of largest magnitude, sign kept, maps to -16.
  const float d = largest_magnitude(32, x).value / -16.0f;
  const float id = d != 0.0f ? 1.0f / d : 0.0f;
  BlockQ5_0 block{};
  block.d = f32_to_f16(d);
  uint8_t q[32];
  for (int j = 0; j < 32; ++j) {
    const auto t = static_cast<int8_t>(truncated_low_byte(x[j] * id + 16.5f));
    q[j] = static_cast<uint8_t>(std::min<int>(31, t));
  }
  pack_nibbles_32(q, block.qs);
  store_high_bits_32(q, block.qh);
  return block;
}

BlockQ5_1 quantize_block_q5_1(const float* x) {
  float min = FLT_MAX, max = -FLT_MAX;
  for (int j = 0; j < 32; ++j) {
    if (x[j] < min) min = x[j];
    if (x[j] > max) max = x[j];
  }
  const float d = (max - min) / 31.0f;
  const float id = d != 0.0f ? 1.0f / d : 0.0f;
  BlockQ5_1 block{};
  block.d = f32_to_f16(d);
  block.m = f32_to_f16(min);
  uint8_t q[32];
  // No cap here in the reference: (x - min) / d + 0.5 stays below 32 for finite input.
  for (int j = 0; j < 32; ++j) q[j] = truncated_low_byte((x[j] - min) * id + 0.5f);
  pack_nibbles_32(q, block.qs);
  store_high_bits_32(q, block.qh);
  return block;
}

BlockIQ4_NL quantize_block_iq4_nl(const float* x) {
  const float d = iq4_block_scale(x);
  BlockIQ4_NL block{};
  block.d = f32_to_f16(d);
  // The indices are picked with the unrounded scale.
  const float id = d != 0.0f ? 1.0f / d : 0.0f;
  uint8_t q[32];
  for (int j = 0; j < 32; ++j) q[j] = static_cast<uint8_t>(nearest_iq4_index(id * x[j]));
  pack_nibbles_32(q, block.qs);
  return block;
}

BlockQ2_K quantize_block_q2_k(const float* x) {
  uint8_t L[256];
  float sub_scale[16], sub_min[16], weights[16];
  float max_scale = 0.0f, max_min = 0.0f;
  for (int j = 0; j < 16; ++j) {
    for (int l = 0; l < 16; ++l) weights[l] = std::fabs(x[16 * j + l]);
    sub_scale[j] = fit_affine(16, 3, x + 16 * j, weights, L + 16 * j, &sub_min[j], -0.5f, 0.1f, 15, true);
    if (sub_scale[j] > max_scale) max_scale = sub_scale[j];
    if (sub_min[j] > max_min) max_min = sub_min[j];
  }
  BlockQ2_K block{};
  // Scales (low nibble) and mins (high nibble) to 4 bits against their largest.
  if (max_scale > 0.0f) {
    const float iscale = 15.0f / max_scale;
    for (int j = 0; j < 16; ++j) block.scales[j] = static_cast<uint8_t>(nearest_int(iscale * sub_scale[j]));
    block.d = f32_to_f16(max_scale / 15.0f);
  } else {
    block.d = f32_to_f16(0.0f);
  }
  if (max_min > 0.0f) {
    const float iscale = 15.0f / max_min;
    for (int j = 0; j < 16; ++j) {
      block.scales[j] = static_cast<uint8_t>(block.scales[j] | (nearest_int(iscale * sub_min[j]) << 4));
    }
    block.dmin = f32_to_f16(max_min / 15.0f);
  } else {
    block.dmin = f32_to_f16(0.0f);
  }
  const float dd = f16_to_f32(block.d), dm = f16_to_f32(block.dmin);
  for (int j = 0; j < 16; ++j) {
    const float ds = dd * f(block.scales[j] & 15);
    if (ds == 0.0f) continue;  // keep the fit's quants
    const float ms = dm * f(block.scales[j] >> 4);
    for (int l = 0; l < 16; ++l)
      L[16 * j + l] = static_cast<uint8_t>(clamp(nearest_int((x[16 * j + l] + ms) / ds), 0, 3));
  }
  pack_2bit_planes(L, block.qs);
  return block;
}

BlockQ3_K quantize_block_q3_k(const float* x) {
  int8_t L[256];
  float sub_scale[16];
  float max_scale = 0.0f, amax = 0.0f;  // the signed scale of largest magnitude
  for (int j = 0; j < 16; ++j) {
    sub_scale[j] = fit_symmetric_sweeps(16, 4, x + 16 * j, L + 16 * j);
    if (std::fabs(sub_scale[j]) > amax) {
      amax = std::fabs(sub_scale[j]);
      max_scale = sub_scale[j];
    }
  }
  BlockQ3_K block{};
  if (max_scale != 0.0f) {
    // 6-bit signed scales, the largest on -32, stored + 32: low nibbles in bytes 0..7, high two
    // bits in bytes 8..11 (core/dtype.h).
    const float iscale = -32.0f / max_scale;
    for (int j = 0; j < 16; ++j) {
      // int8_t first, as the reference's variable, then the clamp.
      const auto rounded = static_cast<int8_t>(nearest_int(iscale * sub_scale[j]));
      const int l = clamp(rounded, -32, 31) + 32;
      block.scales[j % 8] = static_cast<uint8_t>(block.scales[j % 8] | ((l & 15) << (j < 8 ? 0 : 4)));
      block.scales[8 + j % 4] = static_cast<uint8_t>(block.scales[8 + j % 4] | ((l >> 4) << (2 * (j / 4))));
    }
    block.d = f32_to_f16(1.0f / iscale);
  } else {
    block.d = f32_to_f16(0.0f);
  }
  uint8_t sc[16];
  unpack_scales_q3_k(block.scales, sc);
  const float dd = f16_to_f32(block.d);
  for (int j = 0; j < 16; ++j) {
    const float ds = dd * f(sc[j] - 32);
    if (ds == 0.0f) continue;  // keep the fit's quants
    for (int l = 0; l < 16; ++l) L[16 * j + l] = static_cast<int8_t>(clamp(nearest_int(x[16 * j + l] / ds), -4, 3) + 4);
  }
  // Quants in [0, 7]: the high bit of element e to bit e / 32 of hmask[e % 32], the low two bits
  // to the 2-bit planes.
  for (int e = 0; e < 256; ++e) {
    if (L[e] > 3) {
      block.hmask[e % 32] = static_cast<uint8_t>(block.hmask[e % 32] | (1 << (e / 32)));
      L[e] = static_cast<int8_t>(L[e] - 4);
    }
  }
  pack_2bit_planes(L, block.qs);
  return block;
}

BlockQ4_K quantize_block_q4_k(const float* x) {
  BlockQ4_K block{};
  uint8_t L[256];
  quantize_super_block_k4(x, 15, -1.0f, 20, &block.d, &block.dmin, block.scales, L);
  // Sub-blocks 2i and 2i + 1 share qs[32 i, 32 i + 32): low and high nibble.
  for (int i = 0; i < 4; ++i) {
    for (int l = 0; l < 32; ++l) block.qs[32 * i + l] = static_cast<uint8_t>(L[64 * i + l] | (L[64 * i + 32 + l] << 4));
  }
  return block;
}

BlockQ5_K quantize_block_q5_k(const float* x) {
  BlockQ5_K block{};
  uint8_t L[256];
  quantize_super_block_k4(x, 31, -0.5f, 15, &block.d, &block.dmin, block.scales, L);
  // As q4_k, with the fifth bit of sub-block j's element l in bit j of qh[l].
  for (int i = 0; i < 4; ++i) {
    for (int l = 0; l < 32; ++l) {
      const uint8_t lo = L[64 * i + l], hi = L[64 * i + 32 + l];
      block.qs[32 * i + l] = static_cast<uint8_t>((lo & 15) | ((hi & 15) << 4));
      block.qh[l] = static_cast<uint8_t>(block.qh[l] | ((lo >> 4) << (2 * i)) | ((hi >> 4) << (2 * i + 1)));
    }
  }
  return block;
}

BlockQ6_K quantize_block_q6_k(const float* x) {
  int8_t L[256];
  float sub_scale[16];
  float max_scale = 0.0f, max_abs_scale = 0.0f;
  for (int j = 0; j < 16; ++j) {
    sub_scale[j] = fit_symmetric(16, 32, x + 16 * j, L + 16 * j);
    if (std::fabs(sub_scale[j]) > max_abs_scale) {
      max_abs_scale = std::fabs(sub_scale[j]);
      max_scale = sub_scale[j];
    }
  }
  BlockQ6_K block{};
  if (max_abs_scale < kGroupMaxEps) return block;  // all bytes zero, d = +0
  // 8-bit signed scales, the largest on -128.
  const float iscale = -128.0f / max_scale;
  block.d = f32_to_f16(1.0f / iscale);
  for (int j = 0; j < 16; ++j) block.scales[j] = static_cast<int8_t>(std::min(127, nearest_int(iscale * sub_scale[j])));
  const float dd = f16_to_f32(block.d);
  for (int j = 0; j < 16; ++j) {
    const float ds = dd * f(block.scales[j]);
    if (ds == 0.0f) continue;  // keep the fit's quants
    for (int l = 0; l < 16; ++l)
      L[16 * j + l] = static_cast<int8_t>(clamp(nearest_int(x[16 * j + l] / ds), -32, 31) + 32);
  }
  // Quants in [0, 63] (core/dtype.h): low nibbles of chunks c = 0, 1 and 2, 3 of each half share
  // ql bytes, the high two bits go to the 2-bit planes of qh.
  for (int h = 0; h < 2; ++h) {
    const int8_t* e = L + 128 * h;
    for (int l = 0; l < 32; ++l) {
      block.ql[64 * h + l] = static_cast<uint8_t>((e[l] & 15) | ((e[l + 64] & 15) << 4));
      block.ql[64 * h + 32 + l] = static_cast<uint8_t>((e[l + 32] & 15) | ((e[l + 96] & 15) << 4));
    }
  }
  int8_t high[256];
  for (int e = 0; e < 256; ++e) high[e] = static_cast<int8_t>(L[e] >> 4);
  pack_2bit_planes(high, block.qh);
  return block;
}

BlockIQ4_XS quantize_block_iq4_xs(const float* x) {
  float sub_scale[8];
  float max_scale = 0.0f, amax_scale = 0.0f;  // the signed scale of largest magnitude
  for (int j = 0; j < 8; ++j) {
    sub_scale[j] = iq4_block_scale(x + 32 * j);
    if (std::fabs(sub_scale[j]) > amax_scale) {
      amax_scale = std::fabs(sub_scale[j]);
      max_scale = sub_scale[j];
    }
  }
  BlockIQ4_XS block{};
  // 6-bit signed sub-block scales against d, the largest on -32. An all-zero block gets d = -0.
  const float d = -max_scale / 32.0f;
  block.d = f32_to_f16(d);
  const float id = d != 0.0f ? 1.0f / d : 0.0f;
  for (int j = 0; j < 8; ++j) {
    const int l = clamp(nearest_int(id * sub_scale[j]), -32, 31);
    // Indices against the unrounded d times the stored sub-block scale.
    const float dl = d * f(l);
    const float idl = dl != 0.0f ? 1.0f / dl : 0.0f;
    const float* xs = x + 32 * j;
    uint8_t q[32];
    for (int i = 0; i < 32; ++i) q[i] = static_cast<uint8_t>(nearest_iq4_index(idl * xs[i]));
    pack_nibbles_32(q, block.qs + 16 * j);
    const int stored = l + 32;
    block.scales_l[j / 2] = static_cast<uint8_t>(block.scales_l[j / 2] | ((stored & 15) << (4 * (j % 2))));
    block.scales_h = static_cast<uint16_t>(block.scales_h | ((stored >> 4) << (2 * j)));
  }
  return block;
}

void quantize_row_blocks(DType type, const float* src, void* dst, int64_t n) {
  const DTypeTraits& t = dtype_traits(type);
  if (!is_block_type(type)) {
    fail(ErrorKind::Unsupported, "quantize_row_blocks: {} is not one of the block types (q4_1 .. iq4_xs)", t.name);
  }
  if (n % t.block_size != 0) {
    fail(ErrorKind::Shape, "cannot quantize a row of {} elements to {}: {} packs whole blocks of {}; pad the row", n,
         t.name, t.name, t.block_size);
  }
  auto* out = static_cast<uint8_t*>(dst);
  switch (type) {
    case DType::Q4_1:
      return quantize_blocks(quantize_block_q4_1, 32, src, out, n);
    case DType::Q5_0:
      return quantize_blocks(quantize_block_q5_0, 32, src, out, n);
    case DType::Q5_1:
      return quantize_blocks(quantize_block_q5_1, 32, src, out, n);
    case DType::IQ4_NL:
      return quantize_blocks(quantize_block_iq4_nl, 32, src, out, n);
    case DType::Q2_K:
      return quantize_blocks(quantize_block_q2_k, kQK_K, src, out, n);
    case DType::Q3_K:
      return quantize_blocks(quantize_block_q3_k, kQK_K, src, out, n);
    case DType::Q4_K:
      return quantize_blocks(quantize_block_q4_k, kQK_K, src, out, n);
    case DType::Q5_K:
      return quantize_blocks(quantize_block_q5_k, kQK_K, src, out, n);
    case DType::Q6_K:
      return quantize_blocks(quantize_block_q6_k, kQK_K, src, out, n);
    case DType::IQ4_XS:
      return quantize_blocks(quantize_block_iq4_xs, kQK_K, src, out, n);
    default:
      return;
  }
}

}  // namespace ferry::kernels::cpu
