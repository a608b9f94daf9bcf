// Deterministic random numbers for the test checkpoints: the same seed gives the same bytes on
// every machine and compiler.
//
// Element i of a stream is a pure function of (stream key, i) — a counter-based SplitMix64 — so a
// tensor can be filled in parallel chunks and regenerated for a second file without storing it.
// Normal samples use the Irwin–Hall sum of 12 uniforms minus 6 (mean 0, variance 1, range ±6).
// It needs integer arithmetic only: Box–Muller would need log/cos, whose last bit differs between
// C libraries, and std::normal_distribution's output is implementation-defined.
#pragma once

#include <cstdint>
#include <string_view>

namespace ferry::tiny {

inline constexpr uint64_t kGoldenGamma = 0x9e3779b97f4a7c15ull;

// SplitMix64's output function (Steele, Lea, Flood 2014).
inline uint64_t splitmix64_mix(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

// FNV-1a, to turn a tensor name into part of its stream key.
inline uint64_t fnv1a64(std::string_view text) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (char c : text) {
    h ^= static_cast<uint8_t>(c);
    h *= 0x100000001b3ull;
  }
  return h;
}

// The key of the stream that fills the tensor `name` for `seed`.
inline uint64_t stream_key(uint64_t seed, std::string_view name) {
  return splitmix64_mix(splitmix64_mix(seed ^ 0x5f3759df12345678ull) ^ fnv1a64(name));
}

// The k-th 64-bit output of the stream `key`.
inline uint64_t stream_u64(uint64_t key, uint64_t k) {
  return splitmix64_mix(key + (k + 1) * kGoldenGamma);
}

// Sample i of the standard normal-like stream `key` (Irwin–Hall, n = 12): twelve 21-bit uniforms,
// three from each of four 64-bit outputs. The result is exact in a double (the sum fits in 25 bits).
inline double stream_normal(uint64_t key, uint64_t i) {
  constexpr uint64_t kMask = (uint64_t{1} << 21) - 1;
  uint64_t sum = 0;
  for (uint64_t k = 0; k < 4; ++k) {
    const uint64_t r = stream_u64(key, 4 * i + k);
    sum += (r & kMask) + ((r >> 21) & kMask) + ((r >> 42) & kMask);
  }
  // Each 21-bit uniform u stands for (u + 0.5) / 2^21, so the twelve have mean 6 exactly.
  const int64_t centred = static_cast<int64_t>(2 * sum + 12) - (int64_t{12} << 21);
  return static_cast<double>(centred) * 0x1p-22;
}

}  // namespace ferry::tiny
