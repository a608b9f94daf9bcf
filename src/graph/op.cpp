#include "graph/op.h"

#include <algorithm>
#include <iterator>

namespace ferry {

namespace {
constexpr std::string_view kOpNames[] = {
    "embedding", "matmul",     "add",     "mul",       "scale",
    "rms_norm",  "layer_norm", "rope",    "attention", "silu",
    "gelu",      "gelu_tanh",  "swiglu",  "softmax",   "concat",
    "slice",     "copy",       "reshape", "patchify",  "segment_attention",
};
static_assert(std::size(kOpNames) == static_cast<size_t>(Op::Count), "every op needs a name");
}  // namespace

std::string_view op_name(Op op) {
  return kOpNames[static_cast<size_t>(op)];
}

bool is_kv_cache_dtype(DType t) {
  return std::find(std::begin(kKvCacheDtypes), std::end(kKvCacheDtypes), t) != std::end(kKvCacheDtypes);
}

bool op_accepts(Op op, std::span<const DType> d, bool (*reads_weight_type)(DType)) {
  const auto all_f32 = [&](size_t n) {
    return d.size() == n && std::all_of(d.begin(), d.end(), [](DType t) { return t == DType::F32; });
  };
  const auto is_float = [](DType t) { return t == DType::F32 || t == DType::F16 || t == DType::BF16; };
  switch (op) {
    case Op::Embedding:
      return d.size() == 2 && reads_weight_type(d[0]) && d[1] == DType::I32;
    case Op::MatMul:
      return (d.size() == 2 || d.size() == 3) && d[0] == DType::F32 && reads_weight_type(d[1]) &&
             (d.size() == 2 || is_float(d[2]));
    case Op::Add:
    case Op::Mul:
      return all_f32(2);
    case Op::Scale:
    case Op::Silu:
    case Op::Gelu:
    case Op::GeluTanh:
    case Op::Softmax:
    case Op::Patchify:
      return all_f32(1);
    case Op::RmsNorm:
      return d.size() == 2 && d[0] == DType::F32 && is_float(d[1]);
    case Op::LayerNorm:
      return (d.size() == 2 || d.size() == 3) && d[0] == DType::F32 && is_float(d[1]) &&
             (d.size() == 2 || is_float(d[2]));
    case Op::Rope:
      return d.size() == 2 && d[0] == DType::F32 && d[1] == DType::I32;
    case Op::Attention:
      // q, k, v f32 and two caches of one KV-cache dtype; the optional sixth input is the KV write
      // position.
      if (d.size() == 6) return d[5] == DType::I32 && op_accepts(op, d.first(5), reads_weight_type);
      return d.size() == 5 && d[0] == DType::F32 && d[1] == DType::F32 && d[2] == DType::F32 && d[3] == d[4] &&
             is_kv_cache_dtype(d[3]);
    case Op::SegmentAttention:
      return all_f32(3);
    case Op::SwiGlu:
      return all_f32(1) || all_f32(2);
    case Op::Concat:
      return !d.empty() && std::all_of(d.begin(), d.end(), [&](DType t) { return t == d[0]; });
    case Op::Slice:
    case Op::Copy:
    case Op::Reshape:
      return d.size() == 1 && d[0] != DType::Count;
    case Op::Count:
      break;
  }
  return false;
}

}  // namespace ferry
