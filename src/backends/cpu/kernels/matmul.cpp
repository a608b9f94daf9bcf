// matmul and embedding: the weight-reading kernels. The inner loops are per ISA (cpu/*.cpp).
#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <string_view>
#include <vector>

#include "backends/cpu/kernels/check.h"
#include "backends/cpu/kernels/cpu/isa.h"
#include "backends/cpu/kernels/cpu/packed_weights.h"
#include "backends/cpu/kernels/cpu/quant.h"
#include "backends/cpu/kernels/cpu/quant_blocks.h"
#include "backends/cpu/kernels/cpu_features.h"
#include "backends/cpu/kernels/kernels.h"
#include "backends/cpu/kernels/packed_rows.h"
#include "core/error.h"
#include "core/half.h"

namespace ferry::kernels {

namespace {
bool is_matmul_weight_type(DType t) {
  return t == DType::F32 || t == DType::F16 || t == DType::BF16 || t == DType::Q8_0 || t == DType::Q4_0 ||
         cpu::is_block_type(t);
}

Q8Activations q8_0_activations_from_env() {
  const char* env = std::getenv("FERRY_Q8_ACTIVATIONS");
  if (env == nullptr || *env == '\0' || std::string_view(env) == "q8_0") return Q8Activations::Q8_0;
  if (std::string_view(env) == "f32") return Q8Activations::F32;
  fail(ErrorKind::Usage, "FERRY_Q8_ACTIVATIONS is '{}': use q8_0 or f32", env);
}

GemvPrefetch gemv_prefetch_default() {
  const char* env = std::getenv("FERRY_GEMV_PREFETCH");
  if (env != nullptr && *env != '\0') {
    if (std::string_view(env) == "on") return GemvPrefetch::On;
    if (std::string_view(env) == "off") return GemvPrefetch::Off;
    fail(ErrorKind::Usage, "FERRY_GEMV_PREFETCH is '{}': use on or off", env);
  }
  const CpuFeatures& cpu = cpu_features();
  return cpu.intel || (cpu.amd && cpu.family >= 0x1A) ? GemvPrefetch::On : GemvPrefetch::Off;
}

// A process-wide mode kept as an int, -1 until chosen: `choose()` decides at first use unless a
// setter came first.
template <typename Mode, typename Choose>
Mode mode_of(std::atomic<int>& slot, Choose choose) {
  int mode = slot.load(std::memory_order_relaxed);
  if (mode < 0) {
    const int chosen = static_cast<int>(choose());
    slot.compare_exchange_strong(mode, chosen, std::memory_order_relaxed);
    mode = slot.load(std::memory_order_relaxed);
  }
  return static_cast<Mode>(mode);
}

std::atomic<int> g_q8_0_activations{-1};
std::atomic<int> g_gemv_prefetch{-1};

// Whether the level's packed kernels take a packed weight of this type (else its rows are unpacked).
bool takes_packed(const cpu::Isa& isa, DType type) {
  return isa.matmul_packed != nullptr && (isa.packed_types == nullptr || isa.packed_types(type));
}

// args.xq and the rest: the args.M rows of x rounded as llama.cpp rounds them for the weight type
// (q8_0, q8_1 or q8_K), in the calling thread's buffers, the rows split over the pool.
void round_rows(cpu::MatmulArgs& args, const cpu::Isa& isa, cpu::ActivationQuant quant, ThreadPool& pool) {
  thread_local std::vector<int8_t> xq;
  thread_local std::vector<float> xq_scale;
  thread_local std::vector<float> xq_sum;
  thread_local std::vector<int16_t> xq_bsum;
  thread_local std::vector<uint8_t> flipped;
  thread_local std::vector<int32_t> block_sum;
  const int64_t K = args.K;
  const int64_t scales = K / cpu::activation_block(quant);
  xq.resize(static_cast<size_t>(args.M * K));
  xq_scale.resize(static_cast<size_t>(args.M * scales));
  if (quant == cpu::ActivationQuant::Q8_1) xq_sum.resize(static_cast<size_t>(args.M * (K / 32)));
  if (quant == cpu::ActivationQuant::Q8_K) xq_bsum.resize(static_cast<size_t>(args.M * (K / 16)));
  // Packed weights' vector loops on x in rows also read its quants + 128 (q8_0) or its block sums
  // (q4_0, q5_0, iq4_nl; iq4_xs takes q8_K's sums): where the level keeps no copy of its own for this call
  // (pack_x: batches go by that copy, amx's tiles or the vector loops' panels; decode by the rows).
  size_t own_bytes = 0, own_scales = 0;
  if (isa.packed_x_size != nullptr) isa.packed_x_size(args, &own_bytes, &own_scales);
  const bool vector_forms = args.w_packed && takes_packed(isa, args.w_type) && own_bytes == 0;
  const bool flip = vector_forms && args.w_type == DType::Q8_0;
  const bool sum_blocks =
      vector_forms && (args.w_type == DType::Q4_0 || args.w_type == DType::Q5_0 || args.w_type == DType::IQ4_NL);
  if (flip) flipped.resize(xq.size());
  if (sum_blocks) block_sum.resize(static_cast<size_t>(args.M * (K / 32)));
  // The buffers by pointer: inside the tasks, the names would be the pool threads' own.
  int8_t* const q_all = xq.data();
  float* const scale_all = xq_scale.data();
  float* const sum_all = xq_sum.data();
  int16_t* const bsum_all = xq_bsum.data();
  uint8_t* const flipped_all = flipped.data();
  int32_t* const block_sum_all = block_sum.data();
  pool.parallel_range(args.M, min_chunk_for(K), [&](int64_t begin, int64_t end, int) {
    for (int64_t m = begin; m < end; ++m) {
      const float* x = args.x + m * args.x_stride;
      int8_t* q = q_all + m * K;
      float* scale = scale_all + m * scales;
      if (quant == cpu::ActivationQuant::Q8_K) {
        isa.quantize_row_q8_K(x, K, q, scale, bsum_all + m * (K / 16));
      } else {
        isa.quantize_row_q8_0(x, K, q, scale);
        if (quant == cpu::ActivationQuant::Q8_1) cpu::q8_1_sums(x, q, K, sum_all + m * (K / 32));
      }
      if (flip) {
        uint8_t* u = flipped_all + m * K;
        for (int64_t k = 0; k < K; ++k) u[k] = static_cast<uint8_t>(q[k]) ^ 0x80;
      }
      if (sum_blocks) {
        for (int64_t b = 0; b < K / 32; ++b) {
          int32_t sum = 0;
          for (int64_t j = 0; j < 32; ++j) sum += q[b * 32 + j];
          block_sum_all[m * (K / 32) + b] = sum;
        }
      }
    }
  });
  args.xq = q_all;
  args.xq_scale = scale_all;
  args.xq_sum = quant == cpu::ActivationQuant::Q8_1 ? sum_all : nullptr;
  args.xq_bsum = quant == cpu::ActivationQuant::Q8_K ? bsum_all : nullptr;
  args.xq_unsigned = flip ? flipped_all : nullptr;
  args.xq_block_sum = sum_blocks ? block_sum_all : nullptr;
}

// Rows [n_begin, n_end) of y for a packed weight on a level without packed kernels (or x kept
// f32): the rows unpacked a few at a time into this thread's buffer for the level's own matmul.
void matmul_unpacked(const Tensor& w, cpu::MatmulArgs args, const cpu::Isa& isa, int64_t n_begin, int64_t n_end) {
  constexpr int64_t kRows = 64;
  thread_local std::vector<uint8_t> rows;
  rows.resize(static_cast<size_t>(kRows) * args.w_row_bytes);
  float* const y = args.y;
  const float* const bias = args.bias;
  args.w = rows.data();
  args.w_packed = false;
  // A copy of x made for the packed weight's loops is not the layout the level's matmul reads.
  args.x_packed = nullptr;
  args.x_packed_scale = nullptr;
  for (int64_t n0 = n_begin; n0 < n_end; n0 += kRows) {
    const int64_t count = std::min(kRows, n_end - n0);
    unpack_rows(w, n0, count, rows.data());
    args.y = y + n0;
    args.bias = bias != nullptr ? bias + n0 : nullptr;
    isa.matmul(args, 0, count);
  }
}

// args.x_packed: the rounded rows (args.xq or args.xb) in the level's own layout, in the calling
// thread's buffers, where the level has one for this call (Isa::packed_x_size); 16-row tiles split
// over the pool.
void pack_rows(cpu::MatmulArgs& args, const cpu::Isa& isa, ThreadPool& pool) {
  thread_local std::vector<uint8_t> packed;
  thread_local std::vector<float> packed_scale;
  size_t bytes = 0, scales = 0;
  isa.packed_x_size(args, &bytes, &scales);
  args.x_packed = nullptr;  // not a previous slab's
  args.x_packed_scale = nullptr;
  if (bytes == 0) return;
  packed.resize(bytes);
  packed_scale.resize(scales);
  uint8_t* const packed_all = packed.data();  // by pointer: in the tasks, these would be the pool thread's
  float* const packed_scale_all = packed_scale.data();
  constexpr int64_t kTileRows = 16;  // Isa::pack_x's unit of work
  pool.parallel_range(
      (args.M + kTileRows - 1) / kTileRows, min_chunk_for(kTileRows * args.K),
      [&](int64_t begin, int64_t end, int) { isa.pack_x(args, begin, end, packed_all, packed_scale_all); });
  args.x_packed = packed_all;
  args.x_packed_scale = packed_scale_all;
}

// The args.M rows of x rounded to bf16 (core/half.h f32_to_bf16), in the calling thread's buffer,
// the rows split over the pool: as bf16
// (args.xb) where the level multiplies bf16 pairs, else as the f32 values of the rounded numbers
// (args.x, rows K apart) for its f32 loops.
void round_rows_bf16(cpu::MatmulArgs& args, const cpu::Isa& isa, ThreadPool& pool) {
  const auto count = static_cast<size_t>(args.M * args.K);
  const int64_t K = args.K;
  if (isa.round_row_bf16 != nullptr) {
    thread_local std::vector<uint16_t> xb;
    xb.resize(count);
    uint16_t* const xb_all = xb.data();  // by pointer: in the tasks, xb would be the pool thread's
    pool.parallel_range(args.M, min_chunk_for(K), [&](int64_t begin, int64_t end, int) {
      for (int64_t m = begin; m < end; ++m) isa.round_row_bf16(args.x + m * args.x_stride, K, xb_all + m * K);
    });
    args.xb = xb_all;
    return;
  }
  thread_local std::vector<float> rounded;
  rounded.resize(count);
  float* const rounded_all = rounded.data();
  pool.parallel_range(args.M, min_chunk_for(K), [&](int64_t begin, int64_t end, int) {
    for (int64_t m = begin; m < end; ++m) {
      const float* row = args.x + m * args.x_stride;
      for (int64_t k = 0; k < K; ++k) rounded_all[m * K + k] = bf16_to_f32(f32_to_bf16(row[k]));
    }
  });
  args.x = rounded_all;
  args.x_stride = K;
}

}  // namespace

void set_q8_0_activations(Q8Activations mode) {
  g_q8_0_activations.store(static_cast<int>(mode), std::memory_order_relaxed);
}

Q8Activations q8_0_activations() {
  return mode_of<Q8Activations>(g_q8_0_activations, q8_0_activations_from_env);
}

void set_gemv_prefetch(GemvPrefetch mode) {
  g_gemv_prefetch.store(static_cast<int>(mode), std::memory_order_relaxed);
}

GemvPrefetch gemv_prefetch() {
  return mode_of<GemvPrefetch>(g_gemv_prefetch, gemv_prefetch_default);
}

void matmul(const Tensor& x, const Tensor& w, const Tensor* bias, Tensor& y, ThreadPool& pool) {
  constexpr std::string_view kName = "matmul";
  check_f32(kName, x, "input x");
  check_defined(kName, w, "weight w");
  check_same_device(kName, {&x, &w, bias, &y});
  if (w.rank() != 2) {
    fail(ErrorKind::Shape, "matmul: weight '{}' has shape {}, expected [N, K]", w.name(), w.shape().str());
  }
  if (!is_matmul_weight_type(w.dtype())) {
    fail(ErrorKind::Unsupported,
         "matmul: weight '{}' is {}; the CPU backend takes f32, f16, bf16, q8_0, q4_0, q4_1, q5_0, q5_1, iq4_nl, "
         "q2_k, q3_k, q4_k, q5_k, q6_k or iq4_xs",
         w.name(), dtype_name(w.dtype()));
  }
  const int64_t N = w.dim(0);
  const int64_t K = w.dim(1);
  if (x.rank() < 1 || x.dim(-1) != K) {
    fail(ErrorKind::Shape, "matmul: input '{}' {} does not fit weight '{}' {}: the last dim must be {}", x.name(),
         x.shape().str(), w.name(), w.shape().str(), K);
  }
  Shape out_shape = x.shape();
  out_shape[out_shape.rank - 1] = N;
  check_f32(kName, y, "output y");
  check_shape(kName, y, "output y", out_shape);
  {
    // Each output row reads the whole input row: writing into the input would corrupt it.
    const auto* x_begin = static_cast<const char*>(x.data());
    const auto* y_begin = static_cast<const char*>(y.data());
    if (y_begin < x_begin + x.nbytes() && x_begin < y_begin + y.nbytes()) {
      fail(ErrorKind::Usage, "matmul: output '{}' overlaps input '{}'; give the output its own buffer", y.name(),
           x.name());
    }
  }
  std::vector<float> bias_scratch;
  const float* bias_data = nullptr;
  if (bias != nullptr) {
    check_float_vector(kName, *bias, "bias", N);
    bias_data = float_vector(*bias, bias_scratch);
  }

  cpu::MatmulArgs args;
  args.w_type = w.dtype();
  args.x = x.data_as<const float>();
  args.M = x.shape().rows();
  args.call_rows = args.M;
  args.K = K;
  args.x_stride = K;
  args.w = static_cast<const uint8_t*>(w.data());
  args.w_row_bytes = w.row_bytes();
  args.bias = bias_data;
  args.y = y.data_as<float>();
  args.y_stride = N;
  args.f16_table = cpu::f16_table();
  args.prefetch = gemv_prefetch() == GemvPrefetch::On;
  args.w_packed = w.layout() == Layout::Packed;
  if (args.w_packed &&
      (!cpu::is_packable_type(w.dtype()) || N % cpu::kPackedRows != 0 || K % cpu::packed_k_multiple(w.dtype()) != 0)) {
    fail(ErrorKind::Internal,
         "matmul: weight '{}' ({} {}) is marked packed but is not a q8_0, q4_0, q4_1, q5_0, q5_1, iq4_nl, q2_k, q3_k, "
         "q4_k, q5_k, q6_k, iq4_xs, bf16, f16 or f32 matrix of 16-row groups",
         w.name(), dtype_name(w.dtype()), w.shape().str());
  }
  if (args.M == 0 || N == 0) return;
  if (K == 0) {  // empty sums
    for (int64_t m = 0; m < args.M; ++m) {
      for (int64_t n = 0; n < N; ++n) args.y[m * N + n] = bias_data ? bias_data[n] : 0.0f;
    }
    return;
  }
  const cpu::Isa& isa = cpu::active_isa();
  const cpu::ActivationQuant quant = cpu::activation_quant(args.w_type);
  const bool round_x = quant != cpu::ActivationQuant::None && q8_0_activations() == Q8Activations::Q8_0;
  // bf16 weights meet x rounded to bf16 (llama.cpp's vec_dot_type for them), on every level.
  const bool round_x_bf16 = args.w_type == DType::BF16 && q8_0_activations() == Q8Activations::Q8_0;
  // Rows of x rounded (to q8_0, q8_1, q8_K or bf16) go a slab at a time (kernels.h
  // kRoundedRowsSlabBytes of quants, or twice that of bf16), so the rounded copy (kept per calling
  // thread between calls: a decode step makes hundreds of matmuls of the same few sizes) stays
  // bounded, while each slab still has enough rows (1024 at K = 4096) that the weights it streams
  // serve many of them.
  const int64_t slab_rows = round_x || round_x_bf16 ? std::max<int64_t>(4, kRoundedRowsSlabBytes / K / 4 * 4) : args.M;
  const float* const x_all = args.x;
  float* const y_all = args.y;
  const int64_t M = args.M;
  for (int64_t m0 = 0; m0 < M; m0 += slab_rows) {
    args.M = std::min(slab_rows, M - m0);
    args.x = x_all + m0 * K;
    args.y = y_all + m0 * N;
    if (round_x) round_rows(args, isa, quant, pool);
    if (round_x_bf16) round_rows_bf16(args, isa, pool);
    if ((round_x || round_x_bf16) && isa.pack_x != nullptr) pack_rows(args, isa, pool);
    // Split the output rows; chunks are multiples of 16 rows so the ISA's row tiles stay whole.
    constexpr int64_t kRowTile = 16;
    const int64_t tiles = (N + kRowTile - 1) / kRowTile;
    const int64_t work_per_tile = kRowTile * K * args.M;
    // The packed kernels take x rounded: to q8_0 / q8_K, or to bf16 (as bf16 for BF16 dot products,
    // else widened to f32); f16 and f32 as it is.
    bool x_for_packed = args.xq != nullptr;
    if (args.w_type == DType::BF16) x_for_packed = round_x_bf16;
    if (args.w_type == DType::F16 || args.w_type == DType::F32) x_for_packed = true;
    const bool packed_kernels = args.w_packed && takes_packed(isa, args.w_type) && x_for_packed;
    pool.parallel_range(tiles, min_chunk_for(work_per_tile, 1 << 16), [&](int64_t begin, int64_t end, int) {
      const int64_t n_begin = begin * kRowTile;
      const int64_t n_end = std::min(N, end * kRowTile);
      if (packed_kernels) return isa.matmul_packed(args, n_begin, n_end);
      if (args.w_packed) return matmul_unpacked(w, args, isa, n_begin, n_end);
      isa.matmul(args, n_begin, n_end);
    });
  }
}

void embedding(const Tensor& table, const Tensor& ids, Tensor& out, ThreadPool& pool) {
  constexpr std::string_view kName = "embedding";
  check_defined(kName, table, "table");
  check_dtype(kName, ids, "ids", DType::I32);
  check_same_device(kName, {&table, &ids, &out});
  if (table.rank() != 2 || table.dtype() == DType::I32) {
    fail(ErrorKind::Shape, "embedding: table '{}' is {} {}, expected a float or quantized [V, H] matrix", table.name(),
         dtype_name(table.dtype()), table.shape().str());
  }
  const int64_t V = table.dim(0);
  const int64_t H = table.dim(1);
  const int64_t T = ids.numel();
  check_f32(kName, out, "output");
  check_shape(kName, out, "output", Shape{T, H});
  // Check every id before writing anything.
  const auto* id = ids.data_as<const int32_t>();
  for (int64_t t = 0; t < T; ++t) {
    if (id[t] < 0 || id[t] >= V) {
      fail(ErrorKind::Usage, "embedding: token id {} at position {} is outside the vocabulary [0, {}) of '{}'", id[t],
           t, V, table.name());
    }
  }
  const cpu::Isa& isa = cpu::active_isa();
  pool.parallel_range(T, min_chunk_for(H), [&](int64_t begin, int64_t end, int) {
    std::vector<uint8_t> unpacked;
    for (int64_t t = begin; t < end; ++t)
      isa.row_to_f32(table.dtype(), standard_row(table, id[t], unpacked), out.data_as<float>() + t * H, H);
  });
}

}  // namespace ferry::kernels
