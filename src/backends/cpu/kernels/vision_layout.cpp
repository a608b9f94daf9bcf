// Layout kernels the vision tower needs: a reshape (same bytes, new shape) and the patch gather
// that turns a stride-p convolution into a matmul.
#include <algorithm>
#include <cstring>

#include "backends/cpu/kernels/check.h"
#include "backends/cpu/kernels/kernels.h"
#include "core/error.h"

namespace ferry::kernels {

void reshape(const Tensor& x, Tensor& out, ThreadPool& pool) {
  constexpr std::string_view kName = "reshape";
  check_defined(kName, x, "input");
  check_dtype(kName, out, "output", x.dtype());
  check_same_device(kName, {&x, &out});
  if (x.shape().numel() != out.shape().numel() || x.nbytes() != out.nbytes()) {
    fail(ErrorKind::Shape, "reshape: '{}' {} ({} bytes) cannot become {} ({} bytes)", x.name(), x.shape().str(),
         x.nbytes(), out.shape().str(), out.nbytes());
  }
  const size_t bytes = x.nbytes();
  const auto* from = static_cast<const uint8_t*>(x.data());
  auto* to = static_cast<uint8_t*>(out.data());
  if (from == to) return;
  constexpr size_t kChunk = size_t{1} << 20;
  pool.parallel_for(static_cast<int64_t>((bytes + kChunk - 1) / kChunk), [&](int64_t c, int) {
    const size_t begin = static_cast<size_t>(c) * kChunk;
    std::memcpy(to + begin, from + begin, std::min(kChunk, bytes - begin));
  });
}

void patchify(const Tensor& x, const PatchParams& p, Tensor& out, ThreadPool& pool) {
  constexpr std::string_view kName = "patchify";
  check_f32(kName, x, "input");
  check_f32(kName, out, "output");
  check_same_device(kName, {&x, &out});
  if (x.rank() != 4 || p.patch <= 0) {
    fail(ErrorKind::Shape, "patchify: input '{}' {} is not a 4-d image batch, or patch {} is not positive", x.name(),
         x.shape().str(), p.patch);
  }
  const int64_t B = x.dim(0);
  const int64_t C = p.channels_last ? x.dim(3) : x.dim(1);
  const int64_t H = p.channels_last ? x.dim(1) : x.dim(2);
  const int64_t W = p.channels_last ? x.dim(2) : x.dim(3);
  const int64_t P = p.patch;
  if (H % P != 0 || W % P != 0) {
    fail(ErrorKind::Shape, "patchify: '{}' {} is not a whole number of {}x{} patches", x.name(), x.shape().str(), P, P);
  }
  const int64_t gh = H / P;
  const int64_t gw = W / P;
  check_shape(kName, out, "output", Shape{B * gh * gw, C * P * P});
  const float* src = x.data_as<float>();
  float* dst = out.data_as<float>();
  // Element (b, c, y, x) of the image, in either layout.
  const auto at = [&](int64_t b, int64_t c, int64_t y, int64_t xx) {
    return p.channels_last ? src[((b * H + y) * W + xx) * C + c] : src[((b * C + c) * H + y) * W + xx];
  };
  const int64_t rows = B * gh * gw;
  pool.parallel_range(rows, min_chunk_for(C * P * P), [&](int64_t begin, int64_t end, int) {
    for (int64_t r = begin; r < end; ++r) {
      const int64_t b = r / (gh * gw);
      const int64_t py = (r / gw) % gh;
      const int64_t px = r % gw;
      float* row = dst + r * C * P * P;
      for (int64_t c = 0; c < C; ++c) {
        for (int64_t ky = 0; ky < P; ++ky) {
          for (int64_t kx = 0; kx < P; ++kx) *row++ = at(b, c, py * P + ky, px * P + kx);
        }
      }
    }
  });
}

}  // namespace ferry::kernels
