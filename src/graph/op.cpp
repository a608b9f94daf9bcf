#include "graph/op.h"

#include <iterator>

namespace ferry {

namespace {
constexpr std::string_view kOpNames[] = {
    "embedding", "matmul",    "add",  "mul",     "scale",     "rms_norm",        "layer_norm",
    "rope",      "attention", "silu", "gelu",    "gelu_tanh", "swiglu",          "softmax",
    "concat",    "slice",     "copy", "reshape", "patchify",  "block_attention",
};
static_assert(std::size(kOpNames) == static_cast<size_t>(Op::Count), "every op needs a name");
}  // namespace

std::string_view op_name(Op op) {
  return kOpNames[static_cast<size_t>(op)];
}

}  // namespace ferry
