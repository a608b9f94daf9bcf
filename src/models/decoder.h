// One decoder for Llama (and Mistral), Qwen2, Qwen3, GLM (HF), GLM-4-0414 and ChatGLM: the
// differences between them are flags in ModelConfig and rows in the tensor-name table. Declares the
// model's modules (the units a plan places) and builds the graph of one step. Knows no devices.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "graph/graph.h"
#include "models/model_config.h"
#include "models/tensor_names.h"

namespace ferry {

// What the loader does to a stored tensor before the graph reads it, once at load instead of on
// every step: take a range of its rows (one part of a fused projection), transpose a matrix, and
// read it in another shape with the same elements (ParamSpec::shape; a conv kernel as a matrix).
struct WeightTransform {
  int64_t first_row = 0;
  int64_t rows = -1;  // -1: every row
  bool transpose = false;
  bool any() const { return first_row != 0 || rows >= 0 || transpose; }
};

struct ParamSpec {
  std::string name;    // the name the graph reads it by: the checkpoint name unless transformed
  std::string source;  // the checkpoint tensor it comes from (empty: `name`)
  WeightTransform transform;
  LogicalTensor role = LogicalTensor::Count;
  int layer = -1;  // -1 for input/output tensors
  DType stored_dtype = DType::F32;
  DType compute_dtype = DType::F32;  // matrices keep their stored dtype; vectors (norms, biases) become f32
  Shape shape;                       // as the graph reads it
  // Read by other ops than matmul and embedding (a norm, an add), as an activation is: kept in
  // rows, never in a device's own layout for its matmuls (Device::repacks_weight).
  bool read_as_activation = false;

  const std::string& checkpoint_name() const { return source.empty() ? name : source; }
};

struct ModuleSpec {
  std::string name;  // "embed", "layers.N", "head"
  std::vector<ParamSpec> params;
  int64_t state_bytes_per_token = 0;  // KV cache the module keeps per token of context
};

struct ModelSpec {
  ModelConfig config;
  std::vector<ModuleSpec> modules;  // in execution order: [vision, projector,] embed, layers.0.., head
  int first_layer = 1;              // index of layers.0 in modules

  // The parameter of `role` in `layer` (-1: outside the repeating layers), nullptr if absent. All
  // of a layer's parameters are in one module (the unit a plan places).
  const ParamSpec* find(LogicalTensor role, int layer = -1) const;
  uint64_t parameter_count() const;  // every parameter once (tied weights counted once)
};

// Answers whether the checkpoint holds a tensor and with which dtype and shape.
struct StoredTensor {
  DType dtype;
  Shape shape;
};
using TensorLookup = std::function<std::optional<StoredTensor>(const std::string& name)>;

// Builds the module list for `config`, checking every tensor the config needs against the
// checkpoint: a missing tensor or a wrong shape is Error(Shape) naming the tensor, the expected
// and the actual shape (all missing names are listed at once).
ModelSpec make_decoder_spec(const ModelConfig& config, const TensorLookup& lookup, const std::string& source);

// The spec a checkpoint for `config` would have, from the config alone (planning before any file
// exists): matrices in `matrix_dtype` (f16 where a quantized row would not fill whole blocks),
// vectors f32.
ModelSpec make_decoder_spec_from_config(const ModelConfig& config, DType matrix_dtype, const std::string& source);

// Module names (the placement units). A vision-language model adds vision_module() (patch
// embedding + transformer) and projector_module() (GLM-4V's conv + GLU, MiniCPM-V's resampler)
// before embed_module().
std::string vision_module();
std::string projector_module();
std::string embed_module();
std::string layer_module(int layer);
std::string head_module();
// State (KV cache) names of a layer.
std::string k_cache_name(int layer);
std::string v_cache_name(int layer);
// Error(Usage) unless `dtype` can hold this model's KV cache: one of graph/op.h's kKvCacheDtypes,
// and for q8_0 a kv width (n_kv_head x head_dim) of whole blocks of 32. The planner and the step
// graph both ask.
void check_kv_cache_dtype(const ModelConfig& config, DType dtype);

struct StepShape {
  int64_t n_tokens = 1;     // tokens in this step
  int64_t kv_offset = 0;    // cache rows filled before this step
  int64_t kv_capacity = 0;  // cache rows allocated (max context of the session)
  bool all_logits = false;  // logits for every token (else only the last)
  // The KV cache's element type (graph/op.h kKvCacheDtypes). A session sets the plan's
  // RunLimits::kv_dtype here; f32 only for graphs built outside a session (the planner's step
  // simulation, which counts no state, and tests).
  DType kv_dtype = DType::F32;
};

// Graph inputs: "tokens" [T] i32, "positions" [T] i32 (explicit position ids, independent of the
// cache slot), "kv_position" [1] i32 (the first cache row this step writes: the tokens already
// cached) and, when T > 1 without all_logits, "logit_rows" [1] i32 (the row whose logits are
// returned, T - 1 for the next token). Every value that changes from step to step is an input, so
// one graph per step shape runs every step. Output: "logits" [T or 1, vocab] f32. StepShape's
// kv_offset is only checked against the capacity. The caches are states [kv_capacity, kv width] of
// StepShape::kv_dtype; Error(Usage) for a dtype that is no KV-cache dtype, or q8_0 where the kv width
// is not a multiple of 32.
Graph build_decoder_graph(const ModelSpec& spec, const StepShape& step);

// GLM-4V: the same step with image embeddings spliced into its input. Extra inputs: "image_embeds"
// [image_rows, hidden] f32 and "embed_rows" [T] i32, where embed_rows[t] = t takes token t's
// embedding and embed_rows[t] = T + r takes image row r (the token id there is then unused).
Graph build_decoder_graph_with_images(const ModelSpec& spec, const StepShape& step, int64_t image_rows);

}  // namespace ferry
