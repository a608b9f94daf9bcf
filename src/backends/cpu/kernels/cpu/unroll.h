// Loops whose index the body needs as a compile-time constant (immediate shifts, register arrays):
// unroll<I, N>(f) calls f(Index<I>{}), ..., f(Index<N - 1>{}). No intrinsics or standard headers,
// so it may be included inside a file's target region.
#pragma once

namespace ferry::kernels::cpu {

template <int I>
struct Index {
  static constexpr int value = I;
};

template <int I, int N, class F>
inline void unroll(F& f) {
  if constexpr (I < N) {
    f(Index<I>{});
    unroll<I + 1, N>(f);
  }
}

}  // namespace ferry::kernels::cpu
