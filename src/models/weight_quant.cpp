#include "models/weight_quant.h"

#include <array>
#include <cctype>

#include "core/error.h"

namespace ferry {

namespace {

struct MixName {
  std::string_view name;
  QuantMix mix;
  DType base;
};

constexpr std::array<MixName, 7> kMixes = {{
    {"q3_k_s", QuantMix::Q3_K_S, DType::Q3_K},
    {"q3_k_m", QuantMix::Q3_K_M, DType::Q3_K},
    {"q3_k_l", QuantMix::Q3_K_L, DType::Q3_K},
    {"q4_k_s", QuantMix::Q4_K_S, DType::Q4_K},
    {"q4_k_m", QuantMix::Q4_K_M, DType::Q4_K},
    {"q5_k_s", QuantMix::Q5_K_S, DType::Q5_K},
    {"q5_k_m", QuantMix::Q5_K_M, DType::Q5_K},
}};

// llama-quantize's "use more bits" layers: the first and last eighth, and every third between.
bool use_more_bits(int layer, int n_layer) {
  return layer < n_layer / 8 || layer >= 7 * n_layer / 8 || (layer - n_layer / 8) % 3 == 2;
}

// The mix's choice for one matrix before the row-length fallback (llama-quant.cpp's
// llama_tensor_get_type_impl for the k-quant ftypes; the mixture-of-experts and Falcon cases do not
// arise for the architectures ferry runs).
DType mix_choice(const ModelSpec& spec, const ParamSpec& p, const WeightQuant& q, bool tied) {
  const QuantMix mix = q.mix;
  const int n = spec.config.n_layer;
  const int i = p.layer;
  const bool output = p.role == LogicalTensor::Output || (tied && p.role == LogicalTensor::TokenEmbedding);
  if (output) {
    // q8_0 when its rows are not whole super-blocks, else q6_k.
    return p.shape.last() % kQK_K != 0 ? DType::Q8_0 : DType::Q6_K;
  }
  switch (p.role) {
    case LogicalTensor::AttnV:
    case LogicalTensor::AttnQkv: {  // llama.cpp counts a fused qkv as an attn_v
      DType t = q.base;
      if (mix == QuantMix::Q3_K_M) t = i < 2 ? DType::Q5_K : DType::Q4_K;
      if (mix == QuantMix::Q3_K_L) t = DType::Q5_K;
      if ((mix == QuantMix::Q4_K_M || mix == QuantMix::Q5_K_M) && use_more_bits(i, n)) t = DType::Q6_K;
      if (mix == QuantMix::Q4_K_S && i < 4) t = DType::Q5_K;
      // llama.cpp's 70B models (80 layers) share each attn_v among 8 heads, so more bits cost little.
      if (n == 80 && (t == DType::Q3_K || t == DType::Q4_K)) t = DType::Q5_K;
      return t;
    }
    case LogicalTensor::FfnDown:
      if (mix == QuantMix::Q3_K_M) return i < n / 16 ? DType::Q5_K : DType::Q4_K;
      if (mix == QuantMix::Q3_K_L) return DType::Q5_K;
      if ((mix == QuantMix::Q4_K_M || mix == QuantMix::Q5_K_M) && use_more_bits(i, n)) return DType::Q6_K;
      if (mix == QuantMix::Q4_K_S && i < n / 8) return DType::Q5_K;
      return q.base;
    case LogicalTensor::AttnOut:
      if (mix == QuantMix::Q3_K_M) return DType::Q4_K;
      if (mix == QuantMix::Q3_K_L) return DType::Q5_K;
      return q.base;
    default:
      return q.base;
  }
}

// A type whose block does not divide the rows: llama-quantize's fallback, then f16.
DType fit_rows(DType t, int64_t row) {
  if (row % dtype_traits(t).block_size == 0) return t;
  switch (t) {
    case DType::Q2_K:
    case DType::Q3_K:
      t = DType::Q4_0;
      break;
    case DType::Q4_K:
      t = DType::Q5_0;
      break;
    case DType::Q5_K:
      t = DType::Q5_1;
      break;
    case DType::Q6_K:
      t = DType::Q8_0;
      break;
    case DType::IQ4_XS:
      t = DType::IQ4_NL;
      break;
    default:
      break;
  }
  return row % dtype_traits(t).block_size == 0 ? t : DType::F16;
}

bool is_text_matrix(const ParamSpec& p) {
  // Vision parameters carry no role; norms and biases are vectors.
  return p.role != LogicalTensor::Count && p.role != LogicalTensor::RopeFreqs && p.shape.rank >= 2;
}

bool tied_embeddings(const ModelSpec& spec) {
  const ParamSpec* out = spec.find(LogicalTensor::Output);
  const ParamSpec* embed = spec.find(LogicalTensor::TokenEmbedding);
  return out == nullptr || (embed != nullptr && out->name == embed->name);
}

std::string lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

}  // namespace

std::optional<WeightQuant> parse_weight_quant(std::string_view name) {
  const std::string n = lower(name);
  for (const MixName& m : kMixes) {
    if (n == m.name) return WeightQuant{m.base, m.mix};
  }
  const auto d = dtype_from_name(n);
  if (!d || *d == DType::I32) return std::nullopt;
  return WeightQuant{*d, QuantMix::Pure};
}

std::string weight_quant_name(const WeightQuant& quant) {
  for (const MixName& m : kMixes) {
    if (quant.mix == m.mix) return std::string(m.name);
  }
  return std::string(dtype_name(quant.base));
}

std::string weight_quant_names() {
  std::string out;
  for (int i = 0; i < static_cast<int>(DType::Count); ++i) {
    const auto d = static_cast<DType>(i);
    if (d == DType::I32) continue;
    if (!out.empty()) out += ", ";
    out += dtype_name(d);
  }
  for (const MixName& m : kMixes) out += ", " + std::string(m.name);
  return out;
}

DType quantized_dtype(const ModelSpec& spec, const ParamSpec& p, const WeightQuant& quant) {
  if (!is_text_matrix(p)) return p.compute_dtype;
  if (!dtype_traits(quant.base).is_quantized) return quant.base;
  const DType chosen = quant.mix == QuantMix::Pure ? quant.base : mix_choice(spec, p, quant, tied_embeddings(spec));
  return fit_rows(chosen, p.shape.last());
}

void check_weight_quant(const ModelSpec& spec, const WeightQuant& quant) {
  for (const auto& m : spec.modules) {
    for (const auto& p : m.params) {
      if (is_text_matrix(p) && dtype_traits(p.stored_dtype).is_quantized) {
        fail(ErrorKind::Usage,
             "--dtype {}: this checkpoint's matrices are already quantized ('{}' is {}); ferry quantizes f32, f16 and "
             "bf16 checkpoints only, since quantizing twice loses accuracy twice. Drop --dtype to run it as stored",
             weight_quant_name(quant), p.checkpoint_name(), dtype_name(p.stored_dtype));
      }
    }
  }
}

void apply_weight_quant(ModelSpec& spec, const WeightQuant& quant) {
  check_weight_quant(spec, quant);
  // Decided on the unchanged spec (the rule reads roles and shapes only), then applied.
  std::vector<std::vector<DType>> chosen;
  for (const auto& m : spec.modules) {
    auto& row = chosen.emplace_back();
    for (const auto& p : m.params) row.push_back(quantized_dtype(spec, p, quant));
  }
  for (size_t mi = 0; mi < spec.modules.size(); ++mi) {
    for (size_t pi = 0; pi < spec.modules[mi].params.size(); ++pi) {
      spec.modules[mi].params[pi].compute_dtype = chosen[mi][pi];
    }
  }
}

}  // namespace ferry
