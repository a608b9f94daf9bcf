// Rotary position embedding, both pair layouts, partial rotary and linear position scaling.
#include <algorithm>
#include <cmath>
#include <vector>

#include "backends/cpu/kernels/check.h"
#include "backends/cpu/kernels/kernels.h"
#include "core/error.h"

namespace ferry::kernels {

namespace {

// cos/sin per (token, pair) for one set of positions and parameters, from angles computed in
// double: positions can be large and a float angle would lose the low bits of position * frequency.
// Every rope of a step (q and k of every layer) asks for the same table, so the last one is kept per
// calling thread and reused while positions and parameters match.
struct CosSinTable {
  int n_rot = -1;
  float theta = 0.0f;
  float freq_scale = 0.0f;
  std::vector<int32_t> positions;
  std::vector<float> cos_sin;  // [T, n_rot / 2, 2]

  bool matches(const RopeParams& p, const int32_t* pos, int64_t T) const {
    return n_rot == p.n_rot && theta == p.theta && freq_scale == p.freq_scale &&
           static_cast<int64_t>(positions.size()) == T && std::equal(positions.begin(), positions.end(), pos);
  }

  void build(const RopeParams& p, const int32_t* pos, int64_t T) {
    n_rot = p.n_rot;
    theta = p.theta;
    freq_scale = p.freq_scale;
    positions.assign(pos, pos + T);
    const int64_t half = p.n_rot / 2;
    cos_sin.resize(static_cast<size_t>(T * half * 2));
    std::vector<double> inv_freq(static_cast<size_t>(half));
    for (int64_t i = 0; i < half; ++i) {
      inv_freq[static_cast<size_t>(i)] =
          std::pow(static_cast<double>(p.theta), -2.0 * static_cast<double>(i) / static_cast<double>(p.n_rot));
    }
    for (int64_t t = 0; t < T; ++t) {
      const double scaled_pos = static_cast<double>(pos[t]) * static_cast<double>(p.freq_scale);
      for (int64_t i = 0; i < half; ++i) {
        const double angle = scaled_pos * inv_freq[static_cast<size_t>(i)];
        cos_sin[static_cast<size_t>((t * half + i) * 2)] = static_cast<float>(std::cos(angle));
        cos_sin[static_cast<size_t>((t * half + i) * 2 + 1)] = static_cast<float>(std::sin(angle));
      }
    }
  }
};

const std::vector<float>& cos_sin_for(const RopeParams& p, const int32_t* pos, int64_t T) {
  thread_local CosSinTable table;
  if (!table.matches(p, pos, T)) table.build(p, pos, T);
  return table.cos_sin;
}

}  // namespace

void rope(const Tensor& x, const Tensor& positions, const RopeParams& p, Tensor& out, ThreadPool& pool) {
  constexpr std::string_view kName = "rope";
  check_f32(kName, x, "input x");
  check_dtype(kName, positions, "positions", DType::I32);
  check_same_device(kName, {&x, &positions, &out});
  if (x.rank() != 2 || p.head_dim <= 0 || x.dim(1) % p.head_dim != 0) {
    fail(ErrorKind::Shape, "rope: input '{}' {} is not [T, n_heads * head_dim] with head_dim {}", x.name(),
         x.shape().str(), p.head_dim);
  }
  if (p.n_rot < 0 || p.n_rot > p.head_dim || p.n_rot % 2 != 0) {
    fail(ErrorKind::Usage, "rope: n_rot {} must be even and within [0, head_dim {}]", p.n_rot, p.head_dim);
  }
  if (!(p.theta > 0.0f) || !std::isfinite(p.theta) || !std::isfinite(p.freq_scale)) {
    fail(ErrorKind::Usage, "rope: theta {} must be > 0 and freq_scale {} finite", p.theta, p.freq_scale);
  }
  const int64_t T = x.dim(0);
  const int64_t width = x.dim(1);
  if (positions.numel() != T) {
    fail(ErrorKind::Shape, "rope: positions '{}' has {} values for {} tokens of '{}'", positions.name(),
         positions.numel(), T, x.name());
  }
  check_f32(kName, out, "output");
  check_shape(kName, out, "output", x.shape());

  const int64_t half = p.n_rot / 2;
  const int64_t n_heads = width / p.head_dim;
  const std::vector<float>& cos_sin = cos_sin_for(p, positions.data_as<const int32_t>(), T);
  // Pair i is (first + i*step_pair, first + i*step_pair + partner): adjacent (2i, 2i+1) or
  // half-split (i, i + n_rot/2).
  const bool adjacent = p.style == RopeStyle::Adjacent;
  const int64_t pair_stride = adjacent ? 2 : 1;
  const int64_t partner = adjacent ? 1 : half;
  const float* src = x.data_as<const float>();
  float* dst = out.data_as<float>();
  const bool in_place = src == dst;
  pool.parallel_range(T, min_chunk_for(width), [&](int64_t begin, int64_t end, int) {
    for (int64_t t = begin; t < end; ++t) {
      const float* cs = cos_sin.data() + t * half * 2;
      for (int64_t h = 0; h < n_heads; ++h) {
        const float* xh = src + t * width + h * p.head_dim;
        float* yh = dst + t * width + h * p.head_dim;
        for (int64_t i = 0; i < half; ++i) {
          const int64_t a = i * pair_stride;
          const int64_t b = a + partner;
          const float x0 = xh[a];
          const float x1 = xh[b];
          yh[a] = x0 * cs[2 * i] - x1 * cs[2 * i + 1];
          yh[b] = x0 * cs[2 * i + 1] + x1 * cs[2 * i];
        }
        if (!in_place) {
          for (int64_t d = p.n_rot; d < p.head_dim; ++d) yh[d] = xh[d];
        }
      }
    }
  });
}

}  // namespace ferry::kernels
