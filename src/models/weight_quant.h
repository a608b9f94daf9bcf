// What `--dtype` asks of a model's weights, and the one rule that says which dtype each parameter
// gets: the planner counts bytes by it, the loader converts by it, `ferry convert` writes by it.
//
// A plain name ("q4_k", "q8_0", "f16") puts every text matrix in that dtype, as llama-quantize
// --pure does. A mix name ("q4_k_m", "q5_k_m", ...) follows llama-quantize's choices for that
// ftype: the output matrix in q6_k, more bits for attn_v and ffn_down in some layers, and so on.
// Either way a matrix whose rows are not whole blocks falls back as llama-quantize does
// (q4_k -> q5_0, q5_k -> q5_1, q6_k -> q8_0, q2_k/q3_k -> q4_0, iq4_xs -> iq4_nl, then f16).
//
// Vectors (norms, biases) stay f32, and the vision tower and projector stay as stored
// (llama.cpp keeps them apart, in an f16 mmproj file).
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "core/dtype.h"
#include "models/decoder.h"

namespace ferry {

// llama-quantize's k-quant mixes (llama_ftype MOSTLY_Q3_K_S ... MOSTLY_Q5_K_M).
enum class QuantMix : uint8_t { Pure, Q3_K_S, Q3_K_M, Q3_K_L, Q4_K_S, Q4_K_M, Q5_K_S, Q5_K_M };

struct WeightQuant {
  DType base = DType::F16;  // the dtype of most matrices
  QuantMix mix = QuantMix::Pure;

  friend bool operator==(const WeightQuant&, const WeightQuant&) = default;
};

// "q4_k_m" -> {Q4_K, Q4_K_M}, "q8_0" -> {Q8_0, Pure}, "f16" -> {F16, Pure}; nullopt for anything
// else (i32 included). Case-insensitive.
std::optional<WeightQuant> parse_weight_quant(std::string_view name);
std::string weight_quant_name(const WeightQuant& quant);
// Every accepted name, for help texts and errors: "f32, f16, bf16, q8_0, ..., q5_k_m".
std::string weight_quant_names();

// The dtype parameter `p` of `spec` has once loaded under `quant`.
DType quantized_dtype(const ModelSpec& spec, const ParamSpec& p, const WeightQuant& quant);

// Error(Usage) when the checkpoint's text matrices are already quantized: requantizing loses
// accuracy twice, so such a checkpoint runs as stored.
void check_weight_quant(const ModelSpec& spec, const WeightQuant& quant);
// Sets every parameter's compute dtype by quantized_dtype (after check_weight_quant).
void apply_weight_quant(ModelSpec& spec, const WeightQuant& quant);

}  // namespace ferry
