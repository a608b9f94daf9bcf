// Repacking q8_0, q4_0, q4_1, q5_0, q5_1, iq4_nl, q2_k..q6_k, iq4_xs, bf16, f16 and f32 weights at load into the
// layout of cpu/packed_weights.h, and reading them back a row at a time.
#include <algorithm>
#include <cstdlib>
#include <string_view>
#include <vector>

#include "backends/cpu/kernels/cpu/isa.h"
#include "backends/cpu/kernels/cpu/packed_weights.h"
#include "backends/cpu/kernels/kernels.h"
#include "backends/cpu/kernels/packed_rows.h"
#include "core/error.h"

namespace ferry::kernels {

namespace {

bool repack_enabled() {
  static const bool enabled = [] {
    const char* env = std::getenv("FERRY_REPACK");
    if (env == nullptr || *env == '\0' || std::string_view(env) == "on") return true;
    if (std::string_view(env) == "off") return false;
    fail(ErrorKind::Usage, "FERRY_REPACK is '{}': use on or off", env);
  }();
  return enabled;
}

}  // namespace

bool repacks_weight(DType dtype, const Shape& shape) {
  const cpu::Isa& isa = cpu::active_isa();
  return cpu::is_packable_type(dtype) && shape.rank == 2 && shape[0] > 0 && shape[0] % cpu::kPackedRows == 0 &&
         shape[1] > 0 && shape[1] % cpu::packed_k_multiple(dtype) == 0 && isa.repacks != nullptr &&
         isa.repacks(dtype) && repack_enabled() &&
         // the packed kernels take x rounded (q8_0, q8_K, bf16), but f16's and f32's as it is
         (dtype == DType::F16 || dtype == DType::F32 || q8_0_activations() == Q8Activations::Q8_0);
}

Tensor repack_weight(const Tensor& w, ThreadPool& pool) {
  if (!cpu::is_packable_type(w.dtype()) || w.rank() != 2 || w.dim(0) % cpu::kPackedRows != 0 ||
      w.dim(1) % cpu::packed_k_multiple(w.dtype()) != 0 || w.layout() != Layout::Rows) {
    fail(ErrorKind::Internal,
         "repack_weight: '{}' ({} {}) is not a q8_0, q4_0, q4_1, q5_0, q5_1, iq4_nl, q2_k..q6_k, iq4_xs, bf16, f16 or "
         "f32 matrix of whole 16-row groups (bf16, f16, f32: of an even number of columns; the k-quants and iq4_xs: of "
         "whole super-blocks)",
         w.name(), dtype_name(w.dtype()), w.shape().str());
  }
  const size_t row_bytes = w.row_bytes();
  const int64_t K = w.dim(1);
  auto* data = static_cast<uint8_t*>(w.data());
  const size_t group_bytes = row_bytes * cpu::kPackedRows;
  pool.parallel_range(w.dim(0) / cpu::kPackedRows, 1, [&](int64_t begin, int64_t end, int) {
    std::vector<uint8_t> rows(group_bytes);
    for (int64_t g = begin; g < end; ++g) {
      uint8_t* group = data + static_cast<size_t>(g) * group_bytes;
      std::copy(group, group + group_bytes, rows.begin());
      cpu::pack_group(w.dtype(), rows.data(), row_bytes, K, group);
    }
  });
  return w.with_layout(Layout::Packed);
}

void unpack_rows(const Tensor& w, int64_t first, int64_t count, uint8_t* out) {
  if (!cpu::is_packable_type(w.dtype()) || w.layout() != Layout::Packed) {
    fail(ErrorKind::Internal, "unpack_rows: '{}' ({}) is not a repacked weight", w.name(), dtype_name(w.dtype()));
  }
  const size_t row_bytes = w.row_bytes();
  const auto* data = static_cast<const uint8_t*>(w.data());
  for (int64_t r = first; r < first + count; ++r) {
    const uint8_t* group = data + static_cast<size_t>(r / cpu::kPackedRows) * cpu::kPackedRows * row_bytes;
    cpu::unpack_group_row(w.dtype(), group, w.dim(1), r % cpu::kPackedRows,
                          out + static_cast<size_t>(r - first) * row_bytes);
  }
}

const void* standard_row(const Tensor& x, int64_t r, std::vector<uint8_t>& buffer) {
  if (x.layout() == Layout::Rows) return x.row(r);
  buffer.resize(x.row_bytes());
  unpack_rows(x, r, 1, buffer.data());
  return buffer.data();
}

}  // namespace ferry::kernels
