#include "backends/cpu/kernels/bandwidth.h"

#include <algorithm>
#include <chrono>
#include <memory>
#include <new>
#include <vector>

#include "backends/cpu/kernels/cpu/isa.h"
#include "core/error.h"

namespace ferry::kernels {

double measure_read_bandwidth(ThreadPool& pool, size_t bytes) {
  constexpr int kPasses = 5;
  const size_t n = bytes / sizeof(float);
  if (n < 1024) fail(ErrorKind::Usage, "measure_read_bandwidth: {} bytes is too small to time; use >= 4 KiB", bytes);
  struct AlignedDelete {
    void operator()(float* p) const { ::operator delete[](p, std::align_val_t(64)); }
  };
  std::unique_ptr<float[], AlignedDelete> data(new (std::align_val_t(64)) float[n]);
  const auto parts = static_cast<int64_t>(pool.size());
  const auto part_begin = [&](int64_t part) { return n / static_cast<size_t>(parts) * static_cast<size_t>(part); };
  const auto part_end = [&](int64_t part) { return part + 1 == parts ? n : part_begin(part + 1); };
  // Each thread writes its own part first, so the pages are mapped before any timing.
  pool.parallel_for(
      parts, [&](int64_t part, int) { std::fill(data.get() + part_begin(part), data.get() + part_end(part), 1.0f); });

  const cpu::Isa& isa = cpu::active_isa();
  std::vector<float> sums(static_cast<size_t>(parts));
  double best = 0.0;
  for (int pass = 0; pass < kPasses; ++pass) {
    const auto start = std::chrono::steady_clock::now();
    pool.parallel_for(parts, [&](int64_t part, int) {
      sums[static_cast<size_t>(part)] =
          isa.sum_f32(data.get() + part_begin(part), static_cast<int64_t>(part_end(part) - part_begin(part)));
    });
    const std::chrono::duration<double> elapsed = std::chrono::steady_clock::now() - start;
    best = std::max(best, static_cast<double>(n * sizeof(float)) / elapsed.count());
  }
  // The sums are all of ones: checking them keeps the reads from being optimised away.
  float total = 0.0f;
  for (float s : sums) total += s;
  if (!(total > 0.0f)) fail(ErrorKind::Internal, "measure_read_bandwidth: the probe summed to {}", total);
  return best;
}

}  // namespace ferry::kernels
