// Writes a Hugging Face checkpoint as a GGUF file the way llama.cpp's convert_hf_to_gguf.py does:
// its architecture names, tensor names, <arch>.* hyper-parameters, RoPE scaling (Llama 3 as the
// rope_freqs.weight tensor, YaRN and linear as rope.scaling.* keys), Q/K rows permuted for
// adjacent-pair RoPE under arch llama, and the tokenizer (see engine/gguf_vocab_export.h). Every
// tensor is written in its ParamSpec's compute dtype, so --dtype follows models/weight_quant.h's
// one rule; tensors are converted one bounded chunk of rows at a time, straight into the file.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "engine/checkpoint.h"
#include "formats/gguf_writer.h"
#include "models/weight_quant.h"

namespace ferry {

// The GGUF architecture of a text model (general.architecture): llama (Llama, Mistral), qwen2,
// qwen3, glm4 (GLM-4-0414), chatglm (THUDM ChatGLM and HF GlmForCausalLM, as llama.cpp maps them).
std::string gguf_architecture(const ModelConfig& config);

// llama.cpp's general.file_type (llama_ftype) for weights quantized by `quant`: 0 all f32, 1 f16,
// 7 q8_0, 15 q4_k_m, 32 bf16, ... A plain k-quant counts as llama-quantize's alias for it (q4_k:
// q4_k_m).
uint32_t gguf_file_type(const WeightQuant& quant);

// general.architecture, general.name, every <arch>.* hyper-parameter llama.cpp reads (context,
// widths, heads, key/value lengths, RoPE dimensions, base and scaling keys, norm epsilon,
// vocabulary size), general.file_type, and general.quantization_version when `quantized`. Throws
// Error(Unsupported) for what a GGUF cannot say (YaRN without truncation).
void add_gguf_hyper_params(GgufWriter& gguf, const ModelConfig& config, const std::string& name, uint32_t file_type,
                           bool quantized);

// convert_hf_to_gguf.py's LlamaModel.permute: the Hugging Face row that GGUF row `row` of a q or k
// projection with `heads` heads holds. GGUF row h*hd + 2i + j holds row h*hd + j*hd/2 + i, so
// llama.cpp's adjacent-pair RoPE computes what rotate_half computes on the Hugging Face rows.
int64_t gguf_permuted_source_row(int64_t row, int64_t rows, int64_t heads);
// The rows of a [rows, cols] f32 matrix in that order.
std::vector<float> permute_rows_for_gguf(const float* hf, int64_t rows, int64_t cols, int64_t heads);

struct GgufExportOptions {
  std::optional<WeightQuant> quant;  // --dtype; none: matrices as stored, vectors f32
  std::string name;                  // general.name; empty: the checkpoint directory's name
  bool tokenizer = true;             // false: write no tokenizer.* keys
  int threads = 0;                   // conversion threads (0: all cores)
};

struct GgufExportResult {
  std::string architecture;
  size_t tensors = 0;
  uint64_t bytes = 0;               // the file's size
  std::vector<std::string> dtypes;  // "f32 x25", "q4_k x12", ... by count
  std::string tokenizer;            // "gpt2 (pre llama-bpe), 128256 tokens" or "none"
  bool chat_template = false;
  std::vector<std::string> notes;  // what the GGUF leaves out, for the user to read
};

// Writes `ckpt` (a Hugging Face text checkpoint) to `out_path` as GGUF. Refuses GGUF input, vision
// models (llama.cpp splits them into a text GGUF and an mmproj file), an output that is one of the
// input files, and tokenizers whose GGUF form would tokenize differently (Error naming the text and
// both id sequences). A failed write leaves no file behind.
GgufExportResult export_gguf(const Checkpoint& ckpt, const std::string& out_path, const GgufExportOptions& options);

}  // namespace ferry
