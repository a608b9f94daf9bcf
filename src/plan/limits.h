// What a plan reserves memory for: the longest context, how many sequences at once, the largest
// step, and the dtypes weights and KV cache will have.
#pragma once

#include <cstdint>
#include <optional>

#include "core/dtype.h"
#include "models/weight_quant.h"

namespace ferry {

struct RunLimits {
  int64_t max_context = 4096;               // KV-cache rows per sequence (prompt + generation, image tokens included)
  int64_t max_batch = 1;                    // sequences held at once (KV cache and workspace scale with it)
  int64_t prefill_chunk = 512;              // tokens per step at most: a longer prompt is fed in chunks
  std::optional<WeightQuant> weight_quant;  // matrices converted by this on load (models/weight_quant.h)
  DType kv_dtype = DType::F16;              // KV-cache element type; why f16: docs/cli.md "KV-cache dtype"
  uint64_t reserve_bytes = 0;               // kept free on every device (runtime context, fragmentation)

  // The tokens of the largest step: a prefill chunk, never longer than the context.
  int64_t largest_step() const { return prefill_chunk < max_context ? prefill_chunk : max_context; }
};

}  // namespace ferry
