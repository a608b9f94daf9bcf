// The CPU backend's entry point for the executor: one graph op to its kernel, and the answer to
// the scheduler's supports() question. Input orders are those documented in graph/op.h.
#include "backends/cpu/kernels/kernels.h"
#include "core/error.h"

namespace ferry::kernels {

namespace {

void expect_inputs(Op op, const std::vector<Tensor*>& inputs, size_t min, size_t max) {
  if (inputs.size() < min || inputs.size() > max) {
    if (min == max) fail(ErrorKind::Usage, "op {}: {} inputs, expected {}", op_name(op), inputs.size(), min);
    fail(ErrorKind::Usage, "op {}: {} inputs, expected {} to {}", op_name(op), inputs.size(), min, max);
  }
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (inputs[i] == nullptr) fail(ErrorKind::Usage, "op {}: input {} is null", op_name(op), i);
  }
}

template <typename P>
const P& params_as(Op op, const OpParams& params) {
  const P* p = std::get_if<P>(&params);
  if (p == nullptr) fail(ErrorKind::Usage, "op {}: its parameters are missing or of the wrong kind", op_name(op));
  return *p;
}

bool is_weight_type(DType t) {
  return t == DType::F32 || t == DType::F16 || t == DType::BF16 || t == DType::Q8_0 || t == DType::Q4_0;
}
bool is_float(DType t) {
  return t == DType::F32 || t == DType::F16 || t == DType::BF16;
}

}  // namespace

void compute(Op op, const OpParams& params, const std::vector<Tensor*>& inputs, Tensor& out, ThreadPool& pool) {
  const auto& in = inputs;
  switch (op) {
    case Op::Embedding:
      expect_inputs(op, in, 2, 2);
      return embedding(*in[0], *in[1], out, pool);
    case Op::MatMul:
      expect_inputs(op, in, 2, 3);
      return matmul(*in[0], *in[1], in.size() == 3 ? in[2] : nullptr, out, pool);
    case Op::Add:
      expect_inputs(op, in, 2, 2);
      return add(*in[0], *in[1], out, pool);
    case Op::Mul:
      expect_inputs(op, in, 2, 2);
      return mul(*in[0], *in[1], out, pool);
    case Op::Scale:
      expect_inputs(op, in, 1, 1);
      return scale(*in[0], params_as<ScaleParams>(op, params).factor, out, pool);
    case Op::RmsNorm:
      expect_inputs(op, in, 2, 2);
      return rms_norm(*in[0], *in[1], params_as<NormParams>(op, params).eps, out, pool);
    case Op::LayerNorm:
      expect_inputs(op, in, 2, 3);
      return layer_norm(*in[0], *in[1], in.size() == 3 ? in[2] : nullptr, params_as<NormParams>(op, params).eps, out,
                        pool);
    case Op::Rope:
      expect_inputs(op, in, 2, 2);
      return rope(*in[0], *in[1], params_as<RopeParams>(op, params), out, pool);
    case Op::Attention:
      expect_inputs(op, in, 5, 5);
      return attention(*in[0], *in[1], *in[2], *in[3], *in[4], params_as<AttentionParams>(op, params), out, pool);
    case Op::Silu:
      expect_inputs(op, in, 1, 1);
      return silu(*in[0], out, pool);
    case Op::Gelu:
      expect_inputs(op, in, 1, 1);
      return gelu(*in[0], out, pool);
    case Op::GeluTanh:
      expect_inputs(op, in, 1, 1);
      return gelu_tanh(*in[0], out, pool);
    case Op::SwiGlu:
      expect_inputs(op, in, 1, 2);
      if (in.size() == 1) return swiglu_fused(*in[0], out, pool);
      return swiglu(*in[0], *in[1], out, pool);
    case Op::Softmax:
      expect_inputs(op, in, 1, 1);
      return softmax(*in[0], out, pool);
    case Op::Concat: {
      expect_inputs(op, in, 1, SIZE_MAX);
      const std::vector<const Tensor*> parts(in.begin(), in.end());
      return concat(parts, params_as<AxisParams>(op, params).axis, out, pool);
    }
    case Op::Slice: {
      expect_inputs(op, in, 1, 1);
      const AxisParams& p = params_as<AxisParams>(op, params);
      return slice(*in[0], p.axis, p.start, p.length, out, pool);
    }
    case Op::Copy:
      expect_inputs(op, in, 1, 1);
      return copy(*in[0], out, pool);
    case Op::Reshape:
      expect_inputs(op, in, 1, 1);
      return reshape(*in[0], out, pool);
    case Op::Patchify:
      expect_inputs(op, in, 1, 1);
      return patchify(*in[0], params_as<PatchParams>(op, params), out, pool);
    case Op::BlockAttention:
      expect_inputs(op, in, 3, 3);
      return block_attention(*in[0], *in[1], *in[2], params_as<BlockAttentionParams>(op, params), out, pool);
    case Op::Count:
      break;
  }
  fail(ErrorKind::Unsupported, "op #{} is not an op the CPU backend knows", static_cast<int>(op));
}

bool supports(Op op, const std::vector<DType>& d) {
  const auto all_f32 = [&](size_t n) {
    if (d.size() != n) return false;
    for (DType t : d) {
      if (t != DType::F32) return false;
    }
    return true;
  };
  switch (op) {
    case Op::Embedding:
      return d.size() == 2 && is_weight_type(d[0]) && d[1] == DType::I32;
    case Op::MatMul:
      return (d.size() == 2 || d.size() == 3) && d[0] == DType::F32 && is_weight_type(d[1]) &&
             (d.size() == 2 || is_float(d[2]));
    case Op::Add:
    case Op::Mul:
      return all_f32(2);
    case Op::Scale:
    case Op::Silu:
    case Op::Gelu:
    case Op::GeluTanh:
    case Op::Softmax:
      return all_f32(1);
    case Op::RmsNorm:
      return d.size() == 2 && d[0] == DType::F32 && is_float(d[1]);
    case Op::LayerNorm:
      return (d.size() == 2 || d.size() == 3) && d[0] == DType::F32 && is_float(d[1]) &&
             (d.size() == 2 || is_float(d[2]));
    case Op::Rope:
      return d.size() == 2 && d[0] == DType::F32 && d[1] == DType::I32;
    case Op::Attention:
      return all_f32(5);
    case Op::SwiGlu:
      return all_f32(1) || all_f32(2);
    case Op::Concat:
      if (d.empty()) return false;
      for (DType t : d) {
        if (t != d[0]) return false;
      }
      return true;
    case Op::Slice:
    case Op::Copy:
    case Op::Reshape:
      return d.size() == 1 && d[0] != DType::Count;
    case Op::Patchify:
      return all_f32(1);
    case Op::BlockAttention:
      return all_f32(3);
    case Op::Count:
      break;
  }
  return false;
}

}  // namespace ferry::kernels
