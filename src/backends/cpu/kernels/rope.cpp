// Rotary position embedding, both pair layouts, partial rotary, linear position scaling, per-pair
// frequency divisors (Llama 3, rope_freqs, YaRN) and an attention factor on cos/sin (YaRN).
#include <algorithm>
#include <cmath>
#include <vector>

#include "backends/cpu/kernels/check.h"
#include "backends/cpu/kernels/kernels.h"
#include "core/error.h"

namespace ferry::kernels {

namespace {

// cos/sin per (token, pair) for one set of positions and frequencies (rope_frequencies: the one
// definition every backend shares), from angles computed in double: positions can be large and a
// float angle would lose the low bits of position * frequency. Both are scaled by the attention
// factor (YaRN). Every rope of a step (q and k of every layer) asks for the same table, so the last
// one is kept per calling thread and reused while positions and frequencies match.
struct CosSinTable {
  RopeParams params;  // the last table's (its head_dim and style unused)
  std::vector<int32_t> positions;
  std::vector<float> cos_sin;  // [T, n_rot / 2, 2]
  bool built = false;

  bool matches(const RopeParams& p, const int32_t* pos, int64_t T) const {
    return built && params.n_rot == p.n_rot && params.theta == p.theta && params.freq_scale == p.freq_scale &&
           params.attn_factor == p.attn_factor && params.freq_divisors == p.freq_divisors &&
           static_cast<int64_t>(positions.size()) == T && std::equal(positions.begin(), positions.end(), pos);
  }

  void build(const RopeParams& p, const int32_t* pos, int64_t T) {
    params = p;
    positions.assign(pos, pos + T);
    built = true;
    const std::vector<double> freqs = rope_frequencies(p);
    const auto half = static_cast<int64_t>(freqs.size());
    const auto scale = static_cast<double>(p.attn_factor);
    cos_sin.resize(static_cast<size_t>(T * half * 2));
    for (int64_t t = 0; t < T; ++t) {
      for (int64_t i = 0; i < half; ++i) {
        const double angle = static_cast<double>(pos[t]) * freqs[static_cast<size_t>(i)];
        cos_sin[static_cast<size_t>((t * half + i) * 2)] = static_cast<float>(scale * std::cos(angle));
        cos_sin[static_cast<size_t>((t * half + i) * 2 + 1)] = static_cast<float>(scale * std::sin(angle));
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
  if ((!p.freq_divisors.empty() && p.freq_divisors.size() != static_cast<size_t>(p.n_rot / 2)) ||
      !std::all_of(p.freq_divisors.begin(), p.freq_divisors.end(),
                   [](double d) { return std::isfinite(d) && d > 0.0; }) ||
      !(std::isfinite(p.attn_factor) && p.attn_factor > 0.0f)) {
    fail(ErrorKind::Usage,
         "rope: {} frequency divisors for n_rot {} (want none or n_rot / 2, each finite and > 0), attention factor {} "
         "(want finite and > 0)",
         p.freq_divisors.size(), p.n_rot, p.attn_factor);
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
