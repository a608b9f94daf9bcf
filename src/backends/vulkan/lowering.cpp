#include "backends/vulkan/lowering.h"

#include <bit>
#include <cmath>
#include <optional>

#include "core/error.h"
#include "graph/graph.h"

namespace ferry::vulkan {

namespace {

constexpr uint64_t kGroup = 64;   // invocations per workgroup in every shader
constexpr int kMaxHeadDim = 256;  // attention keeps 4 output dims per invocation

// The shaders' weight type codes (shaders/quant.glsl): every GGUF weight type, numbered as DType;
// none for the others.
std::optional<uint32_t> shader_weight_code(DType t) {
  switch (t) {
    case DType::F32:
      return 0;
    case DType::F16:
      return 1;
    case DType::BF16:
      return 2;
    case DType::Q8_0:
      return 3;
    case DType::Q4_0:
      return 4;
    case DType::Q4_1:
      return 5;
    case DType::Q5_0:
      return 6;
    case DType::Q5_1:
      return 7;
    case DType::IQ4_NL:
      return 8;
    case DType::Q2_K:
      return 9;
    case DType::Q3_K:
      return 10;
    case DType::Q4_K:
      return 11;
    case DType::Q5_K:
      return 12;
    case DType::Q6_K:
      return 13;
    case DType::IQ4_XS:
      return 14;
    case DType::I32:
    case DType::Count:
      break;
  }
  return std::nullopt;
}

uint32_t weight_code(DType t) {
  const std::optional<uint32_t> code = shader_weight_code(t);
  if (!code) fail(ErrorKind::Unsupported, "the Vulkan backend has no kernels for {} weights", dtype_name(t));
  return *code;
}

bool is_weight_type(DType t) {
  return shader_weight_code(t).has_value();
}

uint32_t u32(int64_t v, std::string_view what) {
  if (v < 0 || v > static_cast<int64_t>(UINT32_MAX / 2)) {
    fail(ErrorKind::Unsupported, "the Vulkan backend indexes with 32 bits: {} = {} is too large", what, v);
  }
  return static_cast<uint32_t>(v);
}
uint32_t bits(float f) {
  return std::bit_cast<uint32_t>(f);
}
uint64_t groups_for(int64_t invocations) {
  return (static_cast<uint64_t>(invocations) + kGroup - 1) / kGroup;
}

void expect(bool ok, const BoundOp& op, std::string_view what) {
  if (!ok) fail(ErrorKind::Shape, "{} into '{}' on Vulkan: {}", op_name(op.node->op), op.output->name(), what);
}

Dispatch make(std::string_view shader) {
  Dispatch d;
  d.shader = shader;
  return d;
}

template <typename P>
const P& params_of(const BoundOp& op) {
  const P* p = std::get_if<P>(&op.node->params);
  if (p == nullptr) {
    fail(ErrorKind::Usage, "op {} into '{}': its parameters are missing", op_name(op.node->op), op.output->name());
  }
  return *p;
}

Dispatch eltwise(const BoundOp& op, uint32_t mode, float factor) {
  const Tensor& a = *op.inputs[0];
  expect(op.output->numel() == a.numel(), op, "input and output sizes differ");
  Dispatch d = make("eltwise");
  d.tensors[0] = &a;
  d.tensors[1] = op.inputs.size() > 1 ? op.inputs[1] : &a;
  if (op.inputs.size() > 1) expect(op.inputs[1]->numel() == a.numel(), op, "the two inputs differ in size");
  d.tensors[2] = op.output;
  d.params[0] = u32(a.numel(), "elements");
  d.params[1] = mode;
  d.params[2] = bits(factor);
  d.groups = groups_for(a.numel());
  return d;
}

int64_t product(const Shape& s, int from, int to) {
  int64_t p = 1;
  for (int i = from; i < to; ++i) p *= s[i];
  return p;
}

size_t bytes_of(DType t, int64_t count) {
  const auto b = dtype_bytes(t, static_cast<uint64_t>(count));
  if (!b) fail(ErrorKind::Shape, "{} elements of {} do not make whole blocks", count, dtype_name(t));
  return *b;
}

std::vector<Step> norm(const BoundOp& op, uint32_t mode) {
  const Tensor& x = *op.inputs[0];
  const int64_t H = x.dim(-1);
  expect(op.inputs[1]->numel() == H, op, "the weight does not match the last dim");
  Dispatch d = make("norm");
  d.tensors[0] = &x;
  d.tensors[1] = op.inputs[1];
  d.tensors[2] = op.inputs.size() > 2 ? op.inputs[2] : op.inputs[1];
  d.tensors[3] = op.output;
  d.params[0] = u32(H, "row length");
  d.params[1] = mode;
  d.params[2] = bits(params_of<NormParams>(op).eps);
  d.params[3] = weight_code(op.inputs[1]->dtype());
  d.params[4] = op.inputs.size() > 2 ? 1 : 0;
  d.params[5] = op.inputs.size() > 2 ? weight_code(op.inputs[2]->dtype()) : 0;
  d.groups = static_cast<uint64_t>(x.shape().rows());
  return {d};
}

std::vector<Step> rope(const BoundOp& op) {
  const RopeParams& p = params_of<RopeParams>(op);
  const Tensor& x = *op.inputs[0];
  expect(x.rank() == 2 && p.head_dim > 0 && x.dim(1) % p.head_dim == 0 && p.n_rot >= 0 && p.n_rot <= p.head_dim &&
             p.n_rot % 2 == 0 && op.inputs[1]->numel() == x.dim(0),
         op, "input is not [T, heads * head_dim] with T positions and an even n_rot <= head_dim");
  Dispatch d = make("rope");
  d.tensors[0] = &x;
  d.tensors[1] = op.inputs[1];
  d.tensors[3] = op.output;
  expect((p.freq_divisors.empty() || p.freq_divisors.size() == static_cast<size_t>(p.n_rot / 2)) &&
             std::isfinite(p.attn_factor) && p.attn_factor > 0.0f,
         op, "the frequency divisors must be none or n_rot / 2, the attention factor finite and positive");
  // Each pair's frequency (rope_frequencies, shared with the CPU kernel) in double, carried as
  // float (high, rest) pairs.
  d.constants_binding = 2;
  for (const double f : rope_frequencies(p)) {
    // The high part keeps 12 significant bits, so that the shader's (multiple of 4096) * high is exact.
    int exponent = 0;
    const double mantissa = std::frexp(f, &exponent);
    const double hi = std::ldexp(std::trunc(std::ldexp(mantissa, 12)), exponent - 12);
    d.constants.push_back(static_cast<float>(hi));
    d.constants.push_back(static_cast<float>(f - hi));
  }
  if (d.constants.empty()) d.constants.push_back(0.0f);
  const int64_t heads = x.dim(1) / p.head_dim;
  const int64_t per_head = p.n_rot / 2 + (p.head_dim - p.n_rot);
  d.params[0] = u32(x.dim(0), "tokens");
  d.params[1] = u32(heads, "heads");
  d.params[2] = u32(p.head_dim, "head_dim");
  d.params[3] = u32(p.n_rot, "n_rot");
  d.params[4] = p.style == RopeStyle::Adjacent ? 1 : 0;
  d.params[5] = bits(p.attn_factor);
  d.groups = groups_for(x.dim(0) * heads * per_head);
  return {d};
}

// The head layout both attention shaders need: positive counts, GQA groups whole, and head_dim
// within the 4 output dims per invocation the shader keeps.
void check_heads(const BoundOp& op, int n_head, int n_kv_head, int head_dim) {
  expect(n_head > 0 && n_kv_head > 0 && head_dim > 0 && n_head % n_kv_head == 0, op,
         "head counts must be positive and heads a multiple of kv heads");
  if (head_dim > kMaxHeadDim) {
    fail(ErrorKind::Unsupported, "{} '{}' on Vulkan: head_dim {} is over the {} this backend supports",
         op_name(op.node->op), op.output->name(), head_dim, kMaxHeadDim);
  }
}

// The KV-cache type codes of shaders/kv_cache.glsl: every type of graph/op.h's kKvCacheDtypes.
std::optional<uint32_t> kv_cache_code(DType t) {
  switch (t) {
    case DType::F32:
      return 0;
    case DType::F16:
      return 1;
    case DType::BF16:
      return 2;
    case DType::Q8_0:
      return 3;
    default:
      return std::nullopt;
  }
}

// kv_store.comp, then attention.comp. A cache of another type than f32 is written rounded (f16 and
// bf16 a word at a time, q8_0 a block at a time) and read element by element, both by byte address.
std::vector<Step> attention(const BoundOp& op) {
  const AttentionParams& p = params_of<AttentionParams>(op);
  const Tensor& q = *op.inputs[0];
  const Tensor& k = *op.inputs[1];
  const Tensor& v = *op.inputs[2];
  const Tensor& kc = *op.inputs[3];
  const Tensor& vc = *op.inputs[4];
  const Tensor* position = op.inputs.size() > 5 ? op.inputs[5] : nullptr;
  check_heads(op, p.n_head, p.n_kv_head, p.head_dim);
  const int64_t T = q.dim(0);
  const int64_t kv_width = static_cast<int64_t>(p.n_kv_head) * p.head_dim;
  expect(q.rank() == 2 && q.dim(1) == static_cast<int64_t>(p.n_head) * p.head_dim && k.numel() == T * kv_width &&
             v.numel() == T * kv_width && kc.rank() == 2 && kc.dim(1) == kv_width && vc.numel() == kc.numel(),
         op, "q, k, v and the caches do not have the documented shapes");
  if (position == nullptr && (p.kv_offset < 0 || p.kv_offset > kc.dim(0) - T)) {
    fail(ErrorKind::Usage, "attention '{}': {} new rows at offset {} overflow the cache of {} rows", op.output->name(),
         T, p.kv_offset, kc.dim(0));
  }
  const std::optional<uint32_t> cache_type = kv_cache_code(kc.dtype());
  if (!cache_type || vc.dtype() != kc.dtype()) {
    fail(ErrorKind::Unsupported,
         "attention '{}' on Vulkan: caches of {} and {}; this backend runs KV caches of f32, f16, bf16 or q8_0, both "
         "the same",
         op.output->name(), dtype_name(kc.dtype()), dtype_name(vc.dtype()));
  }
  expect(kc.dtype() != DType::Q8_0 || kv_width % 32 == 0, op, "a q8_0 cache needs a kv width of whole blocks of 32");
  if (kc.dtype() != DType::F32) u32(static_cast<int64_t>(kc.nbytes()) + 256, "KV-cache bytes");  // byte addresses
  Dispatch store = make("kv_store");
  store.tensors = {&k, &v, &kc, &vc, position != nullptr ? position : &k};
  store.params[0] = u32(T, "tokens");
  store.params[1] = u32(kv_width, "kv width");
  store.params[2] = position != nullptr ? 1 : 0;
  store.params[3] = position != nullptr ? 0 : u32(p.kv_offset, "kv offset");
  store.params[4] = *cache_type;
  // Invocations: one per element (f32), per cache word the rows can touch (f16, bf16: the rows may
  // start in the middle of a word), per q8_0 block.
  store.groups = groups_for(kc.dtype() == DType::F32    ? T * kv_width
                            : kc.dtype() == DType::Q8_0 ? T * kv_width / 32
                                                        : T * kv_width / 2 + 1);

  Dispatch attend = make("attention");
  attend.tensors = {&q, &kc, &vc, op.output, position != nullptr ? position : &q};
  attend.params[0] = u32(T, "tokens");
  attend.params[1] = static_cast<uint32_t>(p.n_head);
  attend.params[2] = static_cast<uint32_t>(p.n_kv_head);
  attend.params[3] = static_cast<uint32_t>(p.head_dim);
  attend.params[4] = bits(p.scale);
  attend.params[7] = store.params[2];
  attend.params[8] = store.params[3];
  attend.params[9] = *cache_type;
  attend.groups = static_cast<uint64_t>(T) * static_cast<uint64_t>(p.n_head);
  return {store, attend};
}

// One dispatch per segment (shaders/segment_attention.comp): workgroups of 8 query rows of one
// head against the segment's keys, 64 at a time.
std::vector<Step> segment_attention(const BoundOp& op) {
  const SegmentAttentionParams& p = params_of<SegmentAttentionParams>(op);
  const Tensor& q = *op.inputs[0];
  const Tensor& k = *op.inputs[1];
  const Tensor& v = *op.inputs[2];
  check_heads(op, p.n_head, p.n_kv_head, p.head_dim);
  const int64_t width = static_cast<int64_t>(p.n_head) * p.head_dim;
  const int64_t kv_width = static_cast<int64_t>(p.n_kv_head) * p.head_dim;
  expect(q.rank() == 2 && q.dim(1) == width && k.rank() == 2 && k.dim(1) == kv_width && v.shape() == k.shape() &&
             op.output->numel() == q.numel(),
         op, "q, k, v and the output do not have the documented shapes");
  expect(!p.segments.empty(), op, "there are no segments");
  constexpr int64_t kRowsPerGroup = 8;
  std::vector<Step> steps;
  int64_t q_first = 0;
  int64_t k_first = 0;
  for (const AttentionSegment& s : p.segments) {
    expect(s.q_rows > 0 && s.k_rows > 0, op, "a segment is empty");
    expect(s.q_rows <= q.dim(0) - q_first && s.k_rows <= k.dim(0) - k_first, op,
           "the segments cover more rows than q or k has");
    Dispatch d = make("segment_attention");
    d.tensors = {&q, &k, &v, op.output};
    d.params[0] = u32(s.q_rows, "segment query rows");
    d.params[1] = static_cast<uint32_t>(p.n_head);
    d.params[2] = static_cast<uint32_t>(p.n_kv_head);
    d.params[3] = static_cast<uint32_t>(p.head_dim);
    d.params[4] = bits(p.scale);
    d.params[5] = u32(q_first, "first query row");
    d.params[6] = u32(k_first, "first key row");
    d.params[7] = u32(s.k_rows, "segment key rows");
    u32((q_first + s.q_rows) * width, "query elements");  // the shader's indices are 32-bit
    u32((k_first + s.k_rows) * kv_width, "key elements");
    d.groups = static_cast<uint64_t>((s.q_rows + kRowsPerGroup - 1) / kRowsPerGroup) * static_cast<uint64_t>(p.n_head);
    steps.push_back(d);
    q_first += s.q_rows;
    k_first += s.k_rows;
  }
  expect(q_first == q.dim(0) && k_first == k.dim(0), op, "the segments do not cover every row of q and k");
  return steps;
}

// Concat, Slice, Copy and Reshape move bytes: buffer copies, one region per outer row.
std::vector<Step> concat(const BoundOp& op, int axis) {
  const Tensor& out = *op.output;
  expect(axis >= 0 && axis < out.rank(), op, "the axis is outside the output's rank");
  const int64_t outer = product(out.shape(), 0, axis);
  const int64_t inner = product(out.shape(), axis + 1, out.rank());
  const size_t out_chunk = bytes_of(out.dtype(), out.dim(axis) * inner);
  std::vector<Step> steps;
  size_t column = 0;
  for (const Tensor* part : op.inputs) {
    expect(part->dtype() == out.dtype() && part->rank() == out.rank(), op, "an input does not fit the output");
    const size_t chunk = bytes_of(out.dtype(), part->dim(axis) * inner);
    BufferCopy c{part, &out, {}};
    for (int64_t o = 0; o < outer; ++o) {
      c.regions.push_back({static_cast<uint64_t>(o) * chunk, static_cast<uint64_t>(o) * out_chunk + column, chunk});
    }
    column += chunk;
    if (chunk > 0) steps.push_back(std::move(c));
  }
  expect(column == out_chunk, op, "the inputs do not add up to the output along the axis");
  return steps;
}

std::vector<Step> slice(const BoundOp& op) {
  const AxisParams& p = params_of<AxisParams>(op);
  const Tensor& x = *op.inputs[0];
  expect(p.axis >= 0 && p.axis < x.rank() && p.start >= 0 && p.length >= 0 && p.start <= x.dim(p.axis) - p.length, op,
         "the range is outside the input");
  const int64_t outer = product(x.shape(), 0, p.axis);
  const int64_t inner = product(x.shape(), p.axis + 1, x.rank());
  const size_t in_chunk = bytes_of(x.dtype(), x.dim(p.axis) * inner);
  const size_t offset = bytes_of(x.dtype(), p.start * inner);
  const size_t chunk = bytes_of(x.dtype(), p.length * inner);
  expect(op.output->nbytes() == static_cast<size_t>(outer) * chunk, op, "the output's size does not match");
  BufferCopy c{&x, op.output, {}};
  for (int64_t o = 0; o < outer && chunk > 0; ++o) {
    c.regions.push_back({static_cast<uint64_t>(o) * in_chunk + offset, static_cast<uint64_t>(o) * chunk, chunk});
  }
  if (c.regions.empty()) return {};
  return {c};
}

std::vector<Step> whole_copy(const BoundOp& op) {
  const Tensor& x = *op.inputs[0];
  expect(x.dtype() == op.output->dtype() && x.nbytes() == op.output->nbytes(), op,
         "input and output differ in type or size");
  if (x.storage() == op.output->storage() && x.offset() == op.output->offset()) return {};  // in place
  if (x.nbytes() == 0) return {};
  return {BufferCopy{&x, op.output, {{0, 0, x.nbytes()}}}};
}

}  // namespace

std::vector<Step> lower(const BoundOp& op) {
  const Node& node = *op.node;
  const auto& in = op.inputs;
  const Tensor& out = *op.output;
  switch (node.op) {
    case Op::Embedding: {
      const Tensor& table = *in[0];
      expect(table.rank() == 2 && out.rank() == 2 && out.dim(1) == table.dim(1) && out.dim(0) == in[1]->numel(), op,
             "the table, ids and output do not match");
      Dispatch d = make("embedding");
      d.tensors = {&table, in[1], &out};
      d.params[0] = u32(out.dim(0), "tokens");
      d.params[1] = u32(table.dim(1), "row length");
      d.params[2] = weight_code(table.dtype());
      d.params[3] = u32(table.dim(0), "rows");
      d.groups = groups_for(out.numel());
      return {d};
    }
    case Op::MatMul: {
      const Tensor& x = *in[0];
      const Tensor& w = *in[1];
      const int64_t K = x.dim(-1);
      const int64_t M = x.shape().rows();
      expect(w.rank() == 2 && w.dim(1) == K && out.numel() == M * w.dim(0), op, "x, w and y do not match");
      if (in.size() > 2) expect(in[2]->numel() == w.dim(0), op, "the bias does not match w's rows");
      // A group's tile (shaders/matmul.glsl): 8 rows of x by one weight row for long steps; one
      // row of x by 8 weight rows when there are fewer rows than that (decode), so a group still
      // computes eight outputs and reads x once for them.
      constexpr int64_t kTile = 8;
      const bool long_step = M >= kTile;
      const int64_t rows_per_group = long_step ? kTile : 1;
      const int64_t cols_per_group = long_step ? 1 : kTile;
      Dispatch d = make(long_step ? "matmul_rows" : "matmul_cols");
      d.tensors = {&x, &w, in.size() > 2 ? in[2] : &x, &out};
      d.params[0] = u32(M, "rows");
      d.params[1] = u32(w.dim(0), "columns");
      d.params[2] = u32(K, "K");
      d.params[3] = weight_code(w.dtype());
      d.params[5] = in.size() > 2 ? 1 : 0;
      d.params[6] = in.size() > 2 ? weight_code(in[2]->dtype()) : 0;
      d.groups = static_cast<uint64_t>((w.dim(0) + cols_per_group - 1) / cols_per_group) *
                 static_cast<uint64_t>((M + rows_per_group - 1) / rows_per_group);
      return {d};
    }
    case Op::Add:
      return {eltwise(op, 0, 1.0f)};
    case Op::Mul:
      return {eltwise(op, 1, 1.0f)};
    case Op::Scale:
      return {eltwise(op, 2, params_of<ScaleParams>(op).factor)};
    case Op::Silu:
      return {eltwise(op, 3, 1.0f)};
    case Op::Gelu:
      return {eltwise(op, 4, 1.0f)};
    case Op::GeluTanh:
      return {eltwise(op, 5, 1.0f)};
    case Op::RmsNorm:
      return norm(op, 0);
    case Op::LayerNorm:
      return norm(op, 1);
    case Op::Rope:
      return rope(op);
    case Op::Attention:
      return attention(op);
    case Op::SegmentAttention:
      return segment_attention(op);
    case Op::SwiGlu: {
      const int64_t F = out.dim(-1);
      const int64_t rows = out.shape().rows();
      const bool fused = in.size() == 1;
      expect(fused ? in[0]->numel() == rows * 2 * F : in[0]->numel() == rows * F && in[1]->numel() == rows * F, op,
             "gate and up do not match the output");
      Dispatch d = make("swiglu");
      d.tensors = {in[0], fused ? in[0] : in[1], &out};
      d.params[0] = u32(rows, "rows");
      d.params[1] = u32(F, "features");
      d.params[2] = u32(fused ? 2 * F : F, "gate stride");
      d.params[3] = u32(fused ? 2 * F : F, "up stride");
      d.params[4] = fused ? static_cast<uint32_t>(F) : 0;
      d.groups = groups_for(rows * F);
      return {d};
    }
    case Op::Softmax: {
      expect(in[0]->numel() == out.numel(), op, "input and output sizes differ");
      Dispatch d = make("softmax");
      d.tensors = {in[0], &out};
      d.params[0] = u32(out.dim(-1), "row length");
      d.groups = static_cast<uint64_t>(out.shape().rows());
      return {d};
    }
    case Op::Concat:
      return concat(op, params_of<AxisParams>(op).axis);
    case Op::Slice:
      return slice(op);
    case Op::Copy:
    case Op::Reshape:
      return whole_copy(op);
    case Op::Patchify: {
      const PatchParams& p = params_of<PatchParams>(op);
      const Tensor& x = *in[0];
      expect(x.rank() == 4 && p.patch > 0, op, "the input is not a 4-d image batch");
      const int64_t B = x.dim(0);
      const int64_t C = p.channels_last ? x.dim(3) : x.dim(1);
      const int64_t H = p.channels_last ? x.dim(1) : x.dim(2);
      const int64_t W = p.channels_last ? x.dim(2) : x.dim(3);
      expect(H % p.patch == 0 && W % p.patch == 0 && out.numel() == x.numel(), op,
             "the image is not a whole number of patches");
      Dispatch d = make("patchify");
      d.tensors = {&x, &out};
      d.params = {u32(B, "images"),
                  u32(C, "channels"),
                  u32(H, "height"),
                  u32(W, "width"),
                  static_cast<uint32_t>(p.patch),
                  p.channels_last ? 1u : 0u};
      d.groups = groups_for(out.numel());
      return {d};
    }
    case Op::Count:
      break;
  }
  fail(ErrorKind::Unsupported, "op {} has no Vulkan kernel", op_name(node.op));
}

bool supports(Op op, std::span<const DType> d) {
  // Attention: KV caches of the types kv_cache.glsl knows (every KV-cache dtype today).
  if (op == Op::Attention && d.size() >= 5 && !kv_cache_code(d[3])) return false;
  return op_accepts(op, d, is_weight_type);
}

}  // namespace ferry::vulkan
