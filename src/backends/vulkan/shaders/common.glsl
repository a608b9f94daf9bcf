// Shared by every shader: the push constants and the index helpers. Every tensor is bound as a
// whole window of its buffer; off[i] is the tensor's offset in 32-bit words inside binding i's
// window, n_groups the workgroups the op needs (the host may launch a few more when it folds a long
// grid into two dimensions: those return at once), p[] the op's parameters (floats as bits).
#extension GL_GOOGLE_include_directive : require

layout(local_size_x = 64) in;

layout(push_constant) uniform Push {
  uint off[8];
  uint n_groups;
  uint p[23];
} pc;

float pf(uint i) { return uintBitsToFloat(pc.p[i]); }

// The flat index of this workgroup in a grid the host may fold into two dimensions.
uint group_index() { return gl_WorkGroupID.y * gl_NumWorkGroups.x + gl_WorkGroupID.x; }
bool extra_group() { return group_index() >= pc.n_groups; }
uint global_index() { return group_index() * 64u + gl_LocalInvocationID.x; }

// a / b correctly rounded, as the CPU divides: a SPIR-V division may be off by an ulp (some
// drivers lower it to a * (1 / b)), and the rounding of activations (matmul.glsl) and of q8_0
// KV-cache rows (kv_store.comp) must meet the CPU's to the bit, since one quant off by one moves a
// whole block. Long division of the 24-bit significands;
// zeros, subnormals, infinities and NaNs (and a quotient outside the normal range) take the
// driver's division.
float div_rn(float a, float b) {
  const uint ua = floatBitsToUint(a), ub = floatBitsToUint(b);
  const uint ea = (ua >> 23) & 0xffu, eb = (ub >> 23) & 0xffu;
  if (ea == 0u || ea == 255u || eb == 0u || eb == 255u) return a / b;
  uint ma = (ua & 0x7fffffu) | 0x800000u;
  const uint mb = (ub & 0x7fffffu) | 0x800000u;
  int e = int(ea) - int(eb);
  if (ma < mb) {
    ma <<= 1;
    e -= 1;
  }
  // 25 quotient bits (the significand and one more), the remainder for the rest: r < 2 mb < 2^25.
  uint q = 0u, r = ma;
  for (uint i = 0u; i < 25u; ++i) {
    q <<= 1;
    if (r >= mb) {
      r -= mb;
      q |= 1u;
    }
    r <<= 1;
  }
  uint m = q >> 1;
  if ((q & 1u) != 0u && (r != 0u || (m & 1u) != 0u)) m += 1u;  // to nearest, ties to even
  if (m == 0x1000000u) {
    m >>= 1;
    e += 1;
  }
  if (e + 127 <= 0 || e + 127 >= 255) return a / b;
  return uintBitsToFloat(((ua ^ ub) & 0x80000000u) | (uint(e + 127) << 23) | (m & 0x7fffffu));
}

// f32 to bf16 bits, round to nearest even, NaN kept NaN (core/half.h f32_to_bf16).
uint f32_to_bf16(float f) {
  const uint bits = floatBitsToUint(f);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return (bits >> 16) | 0x40u;
  return (bits + 0x7fffu + ((bits >> 16) & 1u)) >> 16;
}
