// The machine's streaming read bandwidth, the ceiling for decode: a gemv reads every weight byte
// once, so weight bytes per second divided by this number says how close a kernel comes.
#pragma once

#include <cstddef>

#include "core/thread_pool.h"

namespace ferry::kernels {

// Bytes per second of a SIMD sum over `bytes` of floats (default 256 MiB, far larger than any
// cache), each of the pool's threads reading its own contiguous part; the best of a few passes.
// Allocates and touches `bytes` of host memory for the duration of the call.
double measure_read_bandwidth(ThreadPool& pool, size_t bytes = size_t{256} << 20);

}  // namespace ferry::kernels
