#include "graph/graph.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"

namespace ferry {

int Graph::module(const std::string& name) {
  auto it = module_index_.find(name);
  if (it != module_index_.end()) return it->second;
  const int id = static_cast<int>(modules_.size());
  modules_.push_back(name);
  module_index_.emplace(name, id);
  return id;
}

ValueId Graph::add_value(Value v) {
  if (value_index_.count(v.name)) fail(ErrorKind::Internal, "graph value '{}' is defined twice", v.name);
  const auto id = static_cast<ValueId>(values_.size());
  value_index_.emplace(v.name, id);
  values_.push_back(std::move(v));
  return id;
}

ValueId Graph::input(const std::string& name, DType dtype, const Shape& shape) {
  return add_value(Value{ValueKind::Input, name, dtype, shape, -1, -1});
}

ValueId Graph::weight(const std::string& name, DType dtype, const Shape& shape, int module) {
  // Tied weights are the same value read by two modules: return the existing one.
  auto it = value_index_.find(name);
  if (it != value_index_.end() && values_[static_cast<size_t>(it->second)].kind == ValueKind::Weight) {
    return it->second;
  }
  return add_value(Value{ValueKind::Weight, name, dtype, shape, module, -1});
}

ValueId Graph::state(const std::string& name, DType dtype, const Shape& shape, int module) {
  return add_value(Value{ValueKind::State, name, dtype, shape, module, -1});
}

ValueId Graph::add_node(Op op, std::vector<ValueId> inputs, OpParams params, DType dtype, const Shape& shape,
                        const std::string& name, int module) {
  if (module < 0) fail(ErrorKind::Internal, "op '{}' ({}) has no module", name, op_name(op));
  for (ValueId in : inputs) {
    if (in < 0 || static_cast<size_t>(in) >= values_.size()) {
      fail(ErrorKind::Internal, "op '{}' ({}) reads an undefined value", name, op_name(op));
    }
  }
  const int node = static_cast<int>(nodes_.size());
  const ValueId out = add_value(Value{ValueKind::Result, name, dtype, shape, module, node});
  nodes_.push_back(Node{op, std::move(inputs), out, module, params});
  return out;
}

void Graph::mark_output(ValueId value) {
  outputs_.push_back(value);
}

void Graph::set_params(int node, OpParams params) {
  if (node < 0 || static_cast<size_t>(node) >= nodes_.size()) {
    fail(ErrorKind::Usage, "cannot set the parameters of node {}: the graph has {} nodes", node, nodes_.size());
  }
  Node& n = nodes_[static_cast<size_t>(node)];
  if (params.index() != n.params.index()) {
    fail(ErrorKind::Usage, "op '{}' ({}) keeps its kind of parameters; the new ones are of another kind",
         values_[static_cast<size_t>(n.output)].name, op_name(n.op));
  }
  n.params = std::move(params);
}

ValueId Graph::find(const std::string& name) const {
  auto it = value_index_.find(name);
  return it == value_index_.end() ? kNoValue : it->second;
}

// ---- GraphBuilder ----

namespace {
[[noreturn]] void shape_error(std::string_view op, const std::string& name, const std::string& detail) {
  fail(ErrorKind::Shape, "op {} '{}': {}", op, name, detail);
}
}  // namespace

ValueId GraphBuilder::embedding(ValueId table, ValueId ids, const std::string& name) {
  const Value& t = v(table);
  const Value& i = v(ids);
  if (t.shape.rank != 2 || i.dtype != DType::I32 || i.shape.rank != 1) {
    shape_error("embedding", name,
                fmt::format("table {} and ids {} {} (want [V, H] and [T] i32)", t.shape.str(), i.shape.str(),
                            dtype_name(i.dtype)));
  }
  return g_.add_node(Op::Embedding, {table, ids}, {}, DType::F32, Shape{i.shape[0], t.shape[1]}, name, module_);
}

ValueId GraphBuilder::matmul(ValueId x, ValueId w, ValueId bias, const std::string& name) {
  const Value& xv = v(x);
  const Value& wv = v(w);
  if (wv.shape.rank != 2 || xv.shape.last() != wv.shape[1]) {
    shape_error(
        "matmul", name,
        fmt::format("x {} ('{}') does not fit weight {} ('{}')", xv.shape.str(), xv.name, wv.shape.str(), wv.name));
  }
  Shape out = xv.shape;
  out[out.rank - 1] = wv.shape[0];
  std::vector<ValueId> inputs{x, w};
  if (bias != kNoValue) {
    if (v(bias).shape.numel() != wv.shape[0]) {
      shape_error("matmul", name, fmt::format("bias {} does not match {} outputs", v(bias).shape.str(), wv.shape[0]));
    }
    inputs.push_back(bias);
  }
  return g_.add_node(Op::MatMul, inputs, {}, DType::F32, out, name, module_);
}

ValueId GraphBuilder::add(ValueId a, ValueId b, const std::string& name) {
  if (!(v(a).shape == v(b).shape)) {
    shape_error("add", name, fmt::format("{} vs {}", v(a).shape.str(), v(b).shape.str()));
  }
  return g_.add_node(Op::Add, {a, b}, {}, DType::F32, v(a).shape, name, module_);
}

ValueId GraphBuilder::mul(ValueId a, ValueId b, const std::string& name) {
  if (!(v(a).shape == v(b).shape)) {
    shape_error("mul", name, fmt::format("{} vs {}", v(a).shape.str(), v(b).shape.str()));
  }
  return g_.add_node(Op::Mul, {a, b}, {}, DType::F32, v(a).shape, name, module_);
}

ValueId GraphBuilder::scale(ValueId x, float factor, const std::string& name) {
  return g_.add_node(Op::Scale, {x}, ScaleParams{factor}, DType::F32, v(x).shape, name, module_);
}

ValueId GraphBuilder::rms_norm(ValueId x, ValueId w, float eps, const std::string& name) {
  if (v(w).shape.numel() != v(x).shape.last()) {
    shape_error("rms_norm", name, fmt::format("weight {} vs input {}", v(w).shape.str(), v(x).shape.str()));
  }
  return g_.add_node(Op::RmsNorm, {x, w}, NormParams{eps}, DType::F32, v(x).shape, name, module_);
}

ValueId GraphBuilder::layer_norm(ValueId x, ValueId w, ValueId b, float eps, const std::string& name) {
  if (v(w).shape.numel() != v(x).shape.last() || (b != kNoValue && v(b).shape.numel() != v(x).shape.last())) {
    shape_error("layer_norm", name, fmt::format("weight {} vs input {}", v(w).shape.str(), v(x).shape.str()));
  }
  std::vector<ValueId> inputs{x, w};
  if (b != kNoValue) inputs.push_back(b);
  return g_.add_node(Op::LayerNorm, inputs, NormParams{eps}, DType::F32, v(x).shape, name, module_);
}

std::vector<double> rope_frequencies(const RopeParams& p) {
  const int half = p.n_rot / 2;
  std::vector<double> f(static_cast<size_t>(half > 0 ? half : 0));
  for (int i = 0; i < half; ++i) {
    double freq = static_cast<double>(p.freq_scale) *
                  std::pow(static_cast<double>(p.theta), -2.0 * i / static_cast<double>(p.n_rot));
    if (!p.freq_divisors.empty()) freq /= p.freq_divisors[static_cast<size_t>(i)];
    f[static_cast<size_t>(i)] = freq;
  }
  return f;
}

ValueId GraphBuilder::rope(ValueId x, ValueId positions, const RopeParams& p, const std::string& name) {
  const Value& xv = v(x);
  if (xv.shape.rank != 2 || p.head_dim <= 0 || xv.shape[1] % p.head_dim != 0 || p.n_rot > p.head_dim ||
      p.n_rot % 2 != 0 || v(positions).shape.numel() != xv.shape[0] || v(positions).dtype != DType::I32) {
    shape_error("rope", name,
                fmt::format("x {} with head_dim {}, n_rot {}, positions {}", xv.shape.str(), p.head_dim, p.n_rot,
                            v(positions).shape.str()));
  }
  const bool divisors_ok =
      (p.freq_divisors.empty() || p.freq_divisors.size() == static_cast<size_t>(p.n_rot / 2)) &&
      std::all_of(p.freq_divisors.begin(), p.freq_divisors.end(), [](double d) { return std::isfinite(d) && d > 0; });
  if (!divisors_ok || !(std::isfinite(p.attn_factor) && p.attn_factor > 0.0f)) {
    shape_error("rope", name,
                fmt::format("{} frequency divisors for n_rot {} (want n_rot / 2, each finite and positive) and "
                            "attention factor {} (want finite and positive)",
                            p.freq_divisors.size(), p.n_rot, p.attn_factor));
  }
  return g_.add_node(Op::Rope, {x, positions}, p, DType::F32, xv.shape, name, module_);
}

ValueId GraphBuilder::attention(ValueId q, ValueId k, ValueId v_new, ValueId k_cache, ValueId v_cache,
                                const AttentionParams& p, const std::string& name, ValueId kv_position) {
  const Value& qv = v(q);
  const Value& kc = v(k_cache);
  const int64_t T = qv.shape[0];
  const int64_t kv_width = static_cast<int64_t>(p.n_kv_head) * p.head_dim;
  const bool ok = qv.shape.rank == 2 && qv.shape[1] == static_cast<int64_t>(p.n_head) * p.head_dim &&
                  v(k).shape == Shape{T, kv_width} && v(v_new).shape == Shape{T, kv_width} && kc.shape.rank == 2 &&
                  kc.shape[1] == kv_width && v(v_cache).shape == kc.shape && p.n_kv_head > 0 &&
                  p.n_head % p.n_kv_head == 0 && p.kv_offset >= 0 && p.kv_offset + T <= kc.shape[0] &&
                  (kv_position == kNoValue || (v(kv_position).dtype == DType::I32 && v(kv_position).shape == Shape{1}));
  if (!ok) {
    shape_error("attention", name,
                fmt::format("q {}, k {}, v {}, cache {} with {} heads, {} kv heads, head_dim {}, offset {}",
                            qv.shape.str(), v(k).shape.str(), v(v_new).shape.str(), kc.shape.str(), p.n_head,
                            p.n_kv_head, p.head_dim, p.kv_offset));
  }
  std::vector<ValueId> inputs{q, k, v_new, k_cache, v_cache};
  if (kv_position != kNoValue) inputs.push_back(kv_position);
  return g_.add_node(Op::Attention, std::move(inputs), p, DType::F32, qv.shape, name, module_);
}

ValueId GraphBuilder::silu(ValueId x, const std::string& name) {
  return g_.add_node(Op::Silu, {x}, {}, DType::F32, v(x).shape, name, module_);
}
ValueId GraphBuilder::gelu(ValueId x, const std::string& name) {
  return g_.add_node(Op::Gelu, {x}, {}, DType::F32, v(x).shape, name, module_);
}
ValueId GraphBuilder::gelu_tanh(ValueId x, const std::string& name) {
  return g_.add_node(Op::GeluTanh, {x}, {}, DType::F32, v(x).shape, name, module_);
}

ValueId GraphBuilder::swiglu(ValueId x, const std::string& name) {
  Shape out = v(x).shape;
  if (out.last() % 2 != 0) shape_error("swiglu", name, fmt::format("odd width {}", out.str()));
  out[out.rank - 1] /= 2;
  return g_.add_node(Op::SwiGlu, {x}, {}, DType::F32, out, name, module_);
}

ValueId GraphBuilder::swiglu(ValueId gate, ValueId up, const std::string& name) {
  if (!(v(gate).shape == v(up).shape)) {
    shape_error("swiglu", name, fmt::format("gate {} vs up {}", v(gate).shape.str(), v(up).shape.str()));
  }
  return g_.add_node(Op::SwiGlu, {gate, up}, {}, DType::F32, v(gate).shape, name, module_);
}

ValueId GraphBuilder::softmax(ValueId x, const std::string& name) {
  return g_.add_node(Op::Softmax, {x}, {}, DType::F32, v(x).shape, name, module_);
}

ValueId GraphBuilder::concat(const std::vector<ValueId>& parts, int axis, const std::string& name) {
  if (parts.empty()) shape_error("concat", name, "no inputs");
  Shape out = v(parts[0]).shape;
  if (axis < 0 || axis >= out.rank) shape_error("concat", name, fmt::format("axis {} of {}", axis, out.str()));
  int64_t total = 0;
  for (ValueId p : parts) {
    const Shape& s = v(p).shape;
    bool same = s.rank == out.rank;
    for (int i = 0; same && i < s.rank; ++i) same = (i == axis) || s[i] == out[i];
    if (!same) shape_error("concat", name, fmt::format("{} does not fit {} along axis {}", s.str(), out.str(), axis));
    total += s[axis];
  }
  out[axis] = total;
  return g_.add_node(Op::Concat, parts, AxisParams{axis, 0, 0}, v(parts[0]).dtype, out, name, module_);
}

ValueId GraphBuilder::slice(ValueId x, int axis, int64_t start, int64_t length, const std::string& name) {
  Shape out = v(x).shape;
  if (axis < 0 || axis >= out.rank || start < 0 || length < 0 || start + length > out[axis]) {
    shape_error("slice", name, fmt::format("[{}, {}) along axis {} of {}", start, start + length, axis, out.str()));
  }
  out[axis] = length;
  return g_.add_node(Op::Slice, {x}, AxisParams{axis, start, length}, v(x).dtype, out, name, module_);
}

ValueId GraphBuilder::copy(ValueId x, const std::string& name) {
  return g_.add_node(Op::Copy, {x}, {}, v(x).dtype, v(x).shape, name, module_);
}

ValueId GraphBuilder::reshape(ValueId x, const Shape& shape, const std::string& name) {
  const Value& xv = v(x);
  const int64_t block = dtype_traits(xv.dtype).block_size;
  if (shape.rank <= 0 || shape.numel() != xv.shape.numel() || xv.shape.last() % block != 0 ||
      shape.last() % block != 0) {
    shape_error("reshape", name, fmt::format("{} {} into {}", dtype_name(xv.dtype), xv.shape.str(), shape.str()));
  }
  return g_.add_node(Op::Reshape, {x}, {}, xv.dtype, shape, name, module_);
}

ValueId GraphBuilder::patchify(ValueId x, const PatchParams& p, const std::string& name) {
  const Shape& in = v(x).shape;
  const int64_t H = p.channels_last ? in[1] : in[2];
  const int64_t W = p.channels_last ? in[2] : in[3];
  const int64_t C = p.channels_last ? in[3] : in[1];
  if (in.rank != 4 || p.patch <= 0 || H % p.patch != 0 || W % p.patch != 0) {
    shape_error(
        "patchify", name,
        fmt::format("{} in patches of {} ({})", in.str(), p.patch, p.channels_last ? "[B, H, W, C]" : "[B, C, H, W]"));
  }
  const Shape out{in[0] * (H / p.patch) * (W / p.patch), C * p.patch * p.patch};
  return g_.add_node(Op::Patchify, {x}, p, DType::F32, out, name, module_);
}

ValueId GraphBuilder::segment_attention(ValueId q, ValueId k, ValueId v_in, const SegmentAttentionParams& p,
                                        const std::string& name) {
  const Shape& qs = v(q).shape;
  const Shape& ks = v(k).shape;
  int64_t q_rows = 0;
  int64_t k_rows = 0;
  bool segments_ok = !p.segments.empty();
  for (const AttentionSegment& s : p.segments) {
    segments_ok = segments_ok && s.q_rows > 0 && s.k_rows > 0;
    q_rows += s.q_rows;
    k_rows += s.k_rows;
  }
  const int64_t kv_width = static_cast<int64_t>(p.n_kv_head) * p.head_dim;
  const bool ok = qs.rank == 2 && p.n_head > 0 && p.n_kv_head > 0 && p.head_dim > 0 && p.n_head % p.n_kv_head == 0 &&
                  qs[1] == static_cast<int64_t>(p.n_head) * p.head_dim && segments_ok && qs[0] == q_rows &&
                  ks == Shape{k_rows, kv_width} && v(v_in).shape == ks;
  if (!ok) {
    shape_error("segment_attention", name,
                fmt::format("q {}, k {}, v {} with {} heads, {} kv heads, head_dim {}, {} segments of {} query and {} "
                            "key rows in all (none may be empty)",
                            qs.str(), ks.str(), v(v_in).shape.str(), p.n_head, p.n_kv_head, p.head_dim,
                            p.segments.size(), q_rows, k_rows));
  }
  return g_.add_node(Op::SegmentAttention, {q, k, v_in}, p, DType::F32, qs, name, module_);
}

}  // namespace ferry
