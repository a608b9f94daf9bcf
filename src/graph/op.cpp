#include "graph/op.h"

#include <iterator>

namespace ferry {

namespace {
constexpr std::string_view kOpNames[] = {
    "embedding", "matmul", "add",       "mul",    "scale",   "rms_norm", "layer_norm", "rope", "attention",
    "silu",      "gelu",   "gelu_tanh", "swiglu", "softmax", "concat",   "slice",      "copy",
};
static_assert(std::size(kOpNames) == static_cast<size_t>(Op::Count), "every op needs a name");
}  // namespace

std::string_view op_name(Op op) {
  return kOpNames[static_cast<size_t>(op)];
}

bool op_reads_weights(Op op) {
  switch (op) {
    case Op::Embedding:
    case Op::MatMul:
    case Op::RmsNorm:
    case Op::LayerNorm:
    case Op::Attention:  // reads the KV cache, which lives with its layer
      return true;
    default:
      return false;
  }
}

}  // namespace ferry
