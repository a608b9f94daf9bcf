// to_f32 / from_f32: widen or dequantize rows to f32, and narrow or quantize f32 rows.
#include <vector>

#include "backends/cpu/kernels/check.h"
#include "backends/cpu/kernels/cpu/isa.h"
#include "backends/cpu/kernels/cpu/quant.h"
#include "backends/cpu/kernels/kernels.h"
#include "backends/cpu/kernels/packed_rows.h"
#include "core/error.h"

namespace ferry::kernels {

void to_f32(const Tensor& x, Tensor& out, ThreadPool& pool) {
  constexpr std::string_view kName = "to_f32";
  check_defined(kName, x, "input");
  check_f32(kName, out, "output");
  check_same_device(kName, {&x, &out});
  check_shape(kName, out, "output", x.shape());
  const int64_t n = x.shape().last();
  const cpu::Isa& isa = cpu::active_isa();
  pool.parallel_range(x.shape().rows(), min_chunk_for(n), [&](int64_t begin, int64_t end, int) {
    std::vector<uint8_t> unpacked;
    for (int64_t r = begin; r < end; ++r)
      isa.row_to_f32(x.dtype(), standard_row(x, r, unpacked), out.data_as<float>() + r * n, n);
  });
}

void from_f32(const Tensor& x, Tensor& out, ThreadPool& pool) {
  constexpr std::string_view kName = "from_f32";
  check_f32(kName, x, "input");
  check_defined(kName, out, "output");
  check_same_device(kName, {&x, &out});
  check_shape(kName, out, "output", x.shape());
  if (out.dtype() == DType::I32) {
    fail(ErrorKind::Unsupported, "from_f32: output '{}' is i32; only float and quantized types are produced",
         out.name());
  }
  const int64_t n = x.shape().last();
  // Tensors of a block type cannot be made with partial blocks; this names the tensor should one
  // ever get here another way.
  const int block = dtype_traits(out.dtype()).block_size;
  if (n % block != 0) {
    fail(ErrorKind::Shape,
         "from_f32: rows of output '{}' ({}) hold {} elements, not whole blocks of {}; pad the rows to a multiple "
         "of {} or choose f32, f16 or bf16",
         out.name(), dtype_name(out.dtype()), n, block, block);
  }
  pool.parallel_range(x.shape().rows(), min_chunk_for(n), [&](int64_t begin, int64_t end, int) {
    for (int64_t r = begin; r < end; ++r)
      cpu::row_from_f32(out.dtype(), x.data_as<const float>() + r * n, out.row(r), n);
  });
}

}  // namespace ferry::kernels
