#include "engine/gguf_export.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <map>
#include <set>
#include <thread>

#include "backends/cpu/kernels/kernels.h"
#include "core/error.h"
#include "core/thread_pool.h"
#include "engine/generator.h"
#include "engine/gguf_vocab_export.h"
#include "models/tensor_names.h"

namespace ferry {

namespace fs = std::filesystem;

namespace {

constexpr int64_t kChunkElements = int64_t{1} << 22;  // f32 values converted at a time (16 MiB)

std::string directory_name(const std::string& dir) {
  const fs::path p = fs::absolute(fs::path(dir)).lexically_normal();
  const std::string name = p.filename().string();
  return name.empty() ? p.parent_path().filename().string() : name;
}

bool same_file(const fs::path& a, const fs::path& b) {
  std::error_code ec;
  return fs::equivalent(a, b, ec) && !ec;
}

// The output must be a file we may create, and none of the files being read (the mapped
// safetensors would be truncated under the reader).
void check_output_path(const Checkpoint& ck, const std::string& out) {
  std::error_code ec;
  const fs::path path(out);
  if (out.empty()) fail(ErrorKind::Usage, "the output path is empty; name the .gguf file to write");
  if (fs::is_directory(path, ec)) {
    fail(ErrorKind::Usage, "{} is a directory; name the .gguf file to write (e.g. {}/model.gguf)", out, out);
  }
  const fs::path parent = path.has_parent_path() ? path.parent_path() : fs::path(".");
  if (!fs::is_directory(parent, ec)) {
    fail(ErrorKind::Io, "cannot write {}: {} {}", out, parent.string(),
         fs::exists(parent, ec) ? "is not a directory" : "does not exist (create the directory first)");
  }
  if (!fs::exists(path, ec)) return;
  std::set<std::string> inputs;
  for (const TensorRecord& r : ck.tensors.all()) inputs.insert(r.file->path());
  for (const char* f :
       {"config.json", "generation_config.json", "tokenizer.json", "tokenizer.model", "tokenizer_config.json"}) {
    inputs.insert((fs::path(ck.directory) / f).string());
  }
  for (const std::string& in : inputs) {
    if (same_file(path, in)) {
      fail(ErrorKind::Usage, "{} is one of the checkpoint's own files ({}); write the GGUF somewhere else", out, in);
    }
  }
}

// Where a tensor's rows come from and how they are written.
struct RowPlan {
  const TensorRecord* source = nullptr;
  DType dtype = DType::F32;  // written
  int64_t rows = 0;
  int64_t cols = 0;
  int64_t permute_heads = 0;  // > 0: llama q/k rows reordered for adjacent-pair RoPE
};

Tensor host_tensor(const void* data, size_t nbytes, DType dtype, const Shape& shape,
                   std::shared_ptr<const void> keep_alive = nullptr) {
  return Tensor::view(Storage::view(const_cast<void*>(data), nbytes, std::move(keep_alive)), 0, dtype, shape);
}

// Fills `out` with the written rows: the stored bytes moved as they are when the dtype is kept,
// else a chunk of rows at a time through f32 (to_f32, reorder, from_f32).
void fill_rows(const RowPlan& p, uint8_t* out, ThreadPool& pool) {
  const TensorRecord& src = *p.source;
  const size_t in_row = *dtype_bytes(src.dtype, static_cast<uint64_t>(p.cols));
  const size_t out_row = *dtype_bytes(p.dtype, static_cast<uint64_t>(p.cols));
  const auto source_row = [&](int64_t r) {
    return p.permute_heads > 0 ? gguf_permuted_source_row(r, p.rows, p.permute_heads) : r;
  };
  if (src.dtype == p.dtype) {
    for (int64_t r = 0; r < p.rows; ++r) {
      std::memcpy(out + static_cast<size_t>(r) * out_row, src.data + static_cast<size_t>(source_row(r)) * in_row,
                  out_row);
    }
    return;
  }
  // Chunks of whole heads, so a reordering never reaches outside its chunk.
  const int64_t group = p.permute_heads > 0 ? p.rows / p.permute_heads : 1;
  const int64_t chunk = std::max<int64_t>(group, kChunkElements / std::max<int64_t>(p.cols, 1) / group * group);
  std::vector<float> values(static_cast<size_t>(std::min(chunk, p.rows) * p.cols));
  std::vector<float> ordered(p.permute_heads > 0 ? values.size() : 0);
  for (int64_t r0 = 0; r0 < p.rows; r0 += chunk) {
    const int64_t n = std::min(chunk, p.rows - r0);
    const Shape shape{n, p.cols};
    const Tensor in = host_tensor(src.data + static_cast<size_t>(r0) * in_row, static_cast<size_t>(n) * in_row,
                                  src.dtype, shape, src.file);
    Tensor wide = host_tensor(values.data(), static_cast<size_t>(n * p.cols) * sizeof(float), DType::F32, shape);
    kernels::to_f32(in, wide, pool);
    if (p.permute_heads > 0) {
      for (int64_t r = 0; r < n; ++r) {
        const int64_t from = source_row(r0 + r) - r0;
        std::copy_n(values.data() + from * p.cols, p.cols, ordered.data() + r * p.cols);
      }
      wide = host_tensor(ordered.data(), static_cast<size_t>(n * p.cols) * sizeof(float), DType::F32, shape);
    }
    Tensor dst = host_tensor(out + static_cast<size_t>(r0) * out_row, static_cast<size_t>(n) * out_row, p.dtype, shape);
    kernels::from_f32(wide, dst, pool);
  }
}

// llama.cpp's choices of tokenizer.ggml.pre name and end-of-turn token by architecture.
GgufVocabOptions vocab_options(const ModelConfig& c) {
  GgufVocabOptions o;
  o.n_vocab = c.vocab;
  switch (c.family) {
    case Family::Llama:
      o.preferred_pre = {"llama-bpe"};
      break;
    case Family::Qwen2:
    case Family::Qwen3:
      o.preferred_pre = {"qwen2"};
      break;
    case Family::Glm:
    case Family::Glm4:
    case Family::ChatGlm:
      o.preferred_pre = {"chatglm-bpe"};
      o.eot_piece = "<|user|>";  // GLM ends an assistant turn by starting the user's
      break;
  }
  o.fallback_bos = c.bos_id;
  o.fallback_eos = c.eos_ids.empty() ? -1 : c.eos_ids.front();
  return o;
}

std::string describe_vocab(const Vocab& v) {
  return fmt::format("{}{}, {} tokens", v.kind == Vocab::Kind::Spm ? "llama (sentencepiece)" : "gpt2 (byte-level BPE)",
                     v.pre.empty() ? "" : ", pre " + v.pre, v.size());
}

// The dtype most matrices are written in (general.file_type without --dtype).
DType main_matrix_dtype(const ModelSpec& spec) {
  std::map<DType, int64_t> elements;
  for (const auto& m : spec.modules) {
    for (const auto& p : m.params) {
      if (p.shape.rank >= 2) elements[p.compute_dtype] += p.shape.numel();
    }
  }
  DType best = DType::F32;
  int64_t most = -1;
  for (const auto& [d, n] : elements) {
    if (n > most) best = d, most = n;
  }
  return best;
}

// Refusals that need no work: GGUF input and vision models.
void refuse_unconvertible(const Checkpoint& ckpt) {
  if (ckpt.is_gguf) {
    fail(ErrorKind::Usage,
         "{} is already a GGUF file; convert reads a Hugging Face checkpoint (a directory with config.json, "
         "*.safetensors and its tokenizer files)",
         ckpt.path);
  }
  if (ckpt.config().vision.present()) {
    fail(ErrorKind::Unsupported,
         "{}: {} is a vision-language model ({} vision tower); convert writes text models only: llama (and mistral), "
         "qwen2, qwen3, glm, glm4 and chatglm. llama.cpp splits a vision model into a text GGUF and an mmproj file, "
         "which ferry does not write; run this checkpoint from its directory",
         ckpt.path, ckpt.config().architecture, vision_family_name(ckpt.config().vision.family));
  }
}

// The tokenizer.* keys, checked by reading them back (gguf_vocab_for), or a note saying why none.
void add_tokenizer(GgufWriter& w, const Checkpoint& ckpt, const ModelConfig& c, const GgufExportOptions& options,
                   GgufExportResult& result) {
  result.tokenizer = "none";
  if (!options.tokenizer) {
    result.notes.push_back(
        "no tokenizer written (--no-tokenizer): ferry runs the file on token ids; llama.cpp needs a vocabulary to "
        "load it");
    return;
  }
  const std::optional<Tokenizer> tok = load_checkpoint_tokenizer(ckpt);
  if (!tok) {
    result.notes.push_back(fmt::format(
        "{} has no tokenizer (tokenizer.json or tokenizer.model): the GGUF has no tokenizer.* keys; ferry runs it on "
        "token ids, llama.cpp needs a vocabulary to load it",
        ckpt.directory));
    return;
  }
  const Vocab v = gguf_vocab_for(*tok, vocab_options(c));
  add_gguf_vocab(w, v);
  result.tokenizer = describe_vocab(v);
  result.chat_template = !v.chat_template.empty();
}

// Llama 3's scaling as llama.cpp's converter writes it: the per-pair divisors. A blended pair's
// divisor is 1 / ((1 - s) / factor + s) with that sum rounded to f32 first, as the goldens'
// converter rounds it (bit for bit: the f64 quotient alone is an ulp away).
WriteTensor rope_freqs_tensor(const ModelConfig& c) {
  std::vector<float> factors;
  for (double d : llama3_rope_divisors(c.n_rot, c.rope_theta, c.rope_scaling)) {
    factors.push_back(static_cast<float>(1.0 / static_cast<double>(static_cast<float>(1.0 / d))));
  }
  WriteTensor t;
  t.name = *tensor_name(TensorLayout::Gguf, LogicalTensor::RopeFreqs, 0);
  t.shape = Shape{static_cast<int64_t>(factors.size())};
  t.bytes.resize(factors.size() * sizeof(float));
  std::memcpy(t.bytes.data(), factors.data(), t.bytes.size());
  return t;
}

// Every parameter's GGUF name and row plan, in the order the checkpoint stores them (shard files by
// name, then by offset), as llama.cpp's converter reads them.
std::vector<std::pair<std::string, RowPlan>> tensor_plans(const Checkpoint& ckpt, const ModelSpec& spec) {
  const ModelConfig& c = spec.config;
  // HF Llama rotates halves (rotate_half); llama.cpp's llama rotates adjacent pairs, so the
  // converter reorders q and k rows. The other families use the same pairing on both sides.
  const bool permute = c.family == Family::Llama && c.rope_style == RopeStyle::HalfSplit;
  if (permute && c.n_rot != c.head_dim) {
    fail(ErrorKind::Unsupported,
         "{}: a llama model rotating {} of its {} head dims has no GGUF form (llama.cpp's converter permutes whole "
         "heads)",
         ckpt.path, c.n_rot, c.head_dim);
  }
  std::vector<std::pair<std::string, RowPlan>> plans;
  for (const auto& m : spec.modules) {
    for (const auto& p : m.params) {
      const std::optional<std::string> name = tensor_name(TensorLayout::Gguf, p.role, p.layer);
      const TensorRecord* src = ckpt.tensors.find(p.checkpoint_name());
      if (!name || src == nullptr || p.transform.any() || src->shape.numel() != p.shape.numel()) {
        fail(ErrorKind::Internal, "{}: parameter '{}' ({}) has no plain GGUF tensor", ckpt.path, p.name,
             logical_tensor_name(p.role));
      }
      RowPlan plan;
      plan.source = src;
      plan.dtype = p.compute_dtype;
      plan.rows = p.shape.rows();
      plan.cols = p.shape.last();
      const bool q = p.role == LogicalTensor::AttnQ || p.role == LogicalTensor::AttnQBias;
      const bool k = p.role == LogicalTensor::AttnK || p.role == LogicalTensor::AttnKBias;
      if (permute && (q || k)) {
        plan.permute_heads = q ? c.n_head : c.n_kv_head;
        if (p.shape.rank == 1) plan.rows = p.shape[0], plan.cols = 1;  // a bias: one value per row
      }
      plans.emplace_back(*name, plan);
    }
  }
  std::stable_sort(plans.begin(), plans.end(), [](const auto& a, const auto& b) {
    const TensorRecord& x = *a.second.source;
    const TensorRecord& y = *b.second.source;
    if (x.file->path() != y.file->path()) return x.file->path() < y.file->path();
    return x.data < y.data;
  });
  return plans;
}

bool any_quantized(const ModelSpec& spec) {
  for (const auto& m : spec.modules) {
    for (const auto& p : m.params) {
      if (dtype_traits(p.compute_dtype).is_quantized) return true;
    }
  }
  return false;
}

}  // namespace

std::string gguf_architecture(const ModelConfig& config) {
  switch (config.family) {
    case Family::Llama:
      return "llama";
    case Family::Qwen2:
      return "qwen2";
    case Family::Qwen3:
      return "qwen3";
    case Family::Glm4:
      return "glm4";
    case Family::Glm:
    case Family::ChatGlm:
      return "chatglm";
  }
  fail(ErrorKind::Internal, "no GGUF architecture for family {}", static_cast<int>(config.family));
}

uint32_t gguf_file_type(const WeightQuant& quant) {
  switch (quant.mix) {
    case QuantMix::Q3_K_S:
      return 11;
    case QuantMix::Q3_K_M:
      return 12;
    case QuantMix::Q3_K_L:
      return 13;
    case QuantMix::Q4_K_S:
      return 14;
    case QuantMix::Q4_K_M:
      return 15;
    case QuantMix::Q5_K_S:
      return 16;
    case QuantMix::Q5_K_M:
      return 17;
    case QuantMix::Pure:
      break;
  }
  // One type for every matrix (llama-quantize --pure): the ftype of that type, a k-quant's small mix.
  switch (quant.base) {
    case DType::F32:
      return 0;
    case DType::F16:
      return 1;
    case DType::Q4_0:
      return 2;
    case DType::Q4_1:
      return 3;
    case DType::Q8_0:
      return 7;
    case DType::Q5_0:
      return 8;
    case DType::Q5_1:
      return 9;
    case DType::Q2_K:
      return 10;
    case DType::Q3_K:
      return 11;
    case DType::Q4_K:
      return 14;
    case DType::Q5_K:
      return 16;
    case DType::Q6_K:
      return 18;
    case DType::IQ4_NL:
      return 25;
    case DType::IQ4_XS:
      return 30;
    case DType::BF16:
      return 32;
    case DType::I32:
    case DType::Count:
      break;
  }
  fail(ErrorKind::Internal, "no llama.cpp file type for weights in {}", dtype_name(quant.base));
}

void add_gguf_hyper_params(GgufWriter& gguf, const ModelConfig& c, const std::string& name, uint32_t file_type,
                           bool quantized) {
  const std::string a = gguf_architecture(c);
  const auto u32 = [&](const char* key, int64_t v) { gguf.set_u32(a + "." + key, static_cast<uint32_t>(v)); };
  const auto f32 = [&](const char* key, double v) { gguf.set_f32(a + "." + key, static_cast<float>(v)); };
  gguf.set_string("general.architecture", a);
  gguf.set_string("general.name", name);
  u32("context_length", c.max_context);
  u32("embedding_length", c.hidden);
  u32("block_count", c.n_layer);
  u32("feed_forward_length", c.ffn);
  u32("attention.head_count", c.n_head);
  u32("attention.head_count_kv", c.n_kv_head);
  u32("attention.key_length", c.head_dim);
  u32("attention.value_length", c.head_dim);
  u32("rope.dimension_count", c.n_rot);
  f32("rope.freq_base", c.rope_theta);
  f32("attention.layer_norm_rms_epsilon", c.norm_eps);
  const RopeScaling& r = c.rope_scaling;
  switch (r.type) {
    case RopeScalingType::None:
    case RopeScalingType::Llama3:  // as the rope_freqs.weight tensor
      break;
    case RopeScalingType::Linear:
      gguf.set_string(a + ".rope.scaling.type", "linear");
      f32("rope.scaling.factor", r.factor);
      break;
    case RopeScalingType::Yarn: {
      if (!r.truncate) {
        fail(ErrorKind::Unsupported,
             "YaRN RoPE scaling with truncate: false has no GGUF form (llama.cpp always rounds the correction range "
             "to whole pairs); a GGUF of this model would compute other logits");
      }
      gguf.set_string(a + ".rope.scaling.type", "yarn");
      f32("rope.scaling.factor", r.factor);
      u32("rope.scaling.original_context_length", r.original_context);
      // Written only where they differ from llama.cpp's defaults (32, 1, the 0.1 ln(factor) + 1 factor).
      if (r.beta_fast != 32.0) f32("rope.scaling.yarn_beta_fast", r.beta_fast);
      if (r.beta_slow != 1.0) f32("rope.scaling.yarn_beta_slow", r.beta_slow);
      const double attn = r.attention_factor / yarn_mscale(r.factor);
      if (std::abs(attn - 1.0) > 1e-6) f32("rope.scaling.attn_factor", attn);
      break;
    }
  }
  u32("vocab_size", c.vocab);
  gguf.set_u32("general.file_type", file_type);
  if (quantized) gguf.set_u32("general.quantization_version", 2);
}

int64_t gguf_permuted_source_row(int64_t row, int64_t rows, int64_t heads) {
  const int64_t hd = rows / heads;
  const int64_t h = row / hd, within = row % hd;
  const int64_t i = within / 2, j = within % 2;
  return h * hd + j * (hd / 2) + i;
}

std::vector<float> permute_rows_for_gguf(const float* hf, int64_t rows, int64_t cols, int64_t heads) {
  std::vector<float> out(static_cast<size_t>(rows * cols));
  for (int64_t r = 0; r < rows; ++r) {
    const float* src = hf + gguf_permuted_source_row(r, rows, heads) * cols;
    std::copy(src, src + cols, out.data() + r * cols);
  }
  return out;
}

GgufExportResult export_gguf(const Checkpoint& ckpt, const std::string& out_path, const GgufExportOptions& options) {
  refuse_unconvertible(ckpt);
  check_output_path(ckpt, out_path);
  ModelSpec spec = ckpt.spec;
  if (options.quant) apply_weight_quant(spec, *options.quant);
  const ModelConfig& c = spec.config;
  const std::vector<std::pair<std::string, RowPlan>> plans = tensor_plans(ckpt, spec);

  GgufExportResult result;
  result.architecture = gguf_architecture(c);
  GgufWriter w;
  const WeightQuant file_quant = options.quant ? *options.quant : WeightQuant{main_matrix_dtype(spec), QuantMix::Pure};
  add_gguf_hyper_params(w, c, options.name.empty() ? directory_name(ckpt.directory) : options.name,
                        gguf_file_type(file_quant), any_quantized(spec));
  add_tokenizer(w, ckpt, c, options, result);

  std::map<DType, int> counts;
  const auto add = [&](WriteTensor t) {
    ++counts[t.dtype];
    w.add_tensor(std::move(t));
  };
  if (c.rope_scaling.type == RopeScalingType::Llama3) add(rope_freqs_tensor(c));  // first, as llama.cpp
  ThreadPool pool(options.threads > 0 ? options.threads
                                      : std::max(1, static_cast<int>(std::thread::hardware_concurrency())));
  for (const auto& [name, plan] : plans) {
    WriteTensor t;
    t.name = name;
    t.dtype = plan.dtype;
    t.shape = plan.source->shape;
    t.fill = [p = &plan, &pool](uint8_t* out, size_t) {
      fill_rows(*p, out, pool);
      // Read once: let the mapped source pages go, so memory stays at about one tensor.
      p->source->file->release_pages(p->source->data, p->source->nbytes);
    };
    add(std::move(t));
  }
  w.write(out_path);

  std::error_code ec;
  result.bytes = fs::file_size(out_path, ec);
  result.tensors = w.tensor_count();
  std::vector<std::pair<int, DType>> by_count;
  for (const auto& [d, n] : counts) by_count.emplace_back(n, d);
  std::stable_sort(by_count.begin(), by_count.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
  for (const auto& [n, d] : by_count) result.dtypes.push_back(fmt::format("{} x{}", dtype_name(d), n));
  return result;
}

}  // namespace ferry
