// The CPU backend's entry point for the executor: one graph op to its kernel, and the answer to
// the scheduler's supports() question. Input orders are those documented in graph/op.h.
#include "backends/cpu/kernels/cpu/quant_blocks.h"
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
  return t == DType::F32 || t == DType::F16 || t == DType::BF16 || t == DType::Q8_0 || t == DType::Q4_0 ||
         cpu::is_block_type(t);
}

}  // namespace

void compute(Op op, const OpParams& params, const std::vector<Tensor*>& inputs, Tensor& out, ThreadPool& pool) {
  const auto& in = inputs;
  // A repacked weight (repack_weight) is read by matmul and embedding only (and to_f32, no op's).
  for (size_t i = 0; i < in.size(); ++i) {
    const bool reads_packed = (op == Op::MatMul && i == 1) || (op == Op::Embedding && i == 0);
    if (in[i] != nullptr && in[i]->layout() == Layout::Packed && !reads_packed) {
      fail(ErrorKind::Internal, "op {}: input {} '{}' is a repacked weight, which only matmul and embedding read",
           op_name(op), i, in[i]->name());
    }
  }
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
    case Op::SegmentAttention:
      expect_inputs(op, in, 3, 3);
      return segment_attention(*in[0], *in[1], *in[2], params_as<SegmentAttentionParams>(op, params), out, pool);
    case Op::Count:
      break;
  }
  fail(ErrorKind::Unsupported, "op #{} is not an op the CPU backend knows", static_cast<int>(op));
}

bool supports(Op op, const std::vector<DType>& input_dtypes) {
  return op_accepts(op, input_dtypes, is_weight_type);
}

}  // namespace ferry::kernels
