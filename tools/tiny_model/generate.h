// Writes a random-weight checkpoint, deterministic by seed, in Hugging Face layout and/or GGUF.
// Used by tools/make_tiny_model.cpp and directly by tests (header-only, so a test needs no
// binary: #include "../../tools/tiny_model/generate.h").
//
// The model for a seed is fixed before any file is chosen: every tensor's values are a pure
// function of (seed, its Hugging Face name), then rounded to what --dtype stores. So hf/, gguf and
// both hold the same model, whatever order or format they are written in:
//   f32        values as drawn;
//   f16, bf16  every tensor rounded to the dtype (GGUF keeps 1-D tensors in f32 containers);
//   q8_0, q4_0 2-D tensors quantized (GGUF), the Hugging Face copy holds the exactly dequantized
//              values in f32; 1-D tensors (norms, biases) stay f32, as llama.cpp does.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "architectures.h"
#include "backends/cpu/kernels/kernels.h"
#include "core/error.h"
#include "core/half.h"
#include "core/tensor.h"
#include "core/thread_pool.h"
#include "engine/gguf_export.h"
#include "engine/model_config_reader.h"
#include "formats/gguf_writer.h"
#include "formats/safetensors_writer.h"
#include "random.h"
#include "tokenizer.h"

namespace ferry::tiny {

struct Options {
  Arch arch = Arch::Llama;
  std::string out_dir;
  std::string format = "hf";  // hf | gguf | both
  DType dtype = DType::F32;
  uint64_t seed = 0;
  std::string preset = "tiny";
  // Overrides of the preset's sizes.
  std::optional<int64_t> layers, hidden, heads, kv_heads, head_dim, ffn, max_context, vocab;
  int shards = 1;   // Hugging Face safetensors shards
  int threads = 0;  // 0: all hardware threads
};

struct Result {
  Hyper hyper;
  std::vector<std::string> files;  // written, relative to out_dir
  int64_t parameters = 0;
};

// The preset's sizes with the overrides applied, checked. Without --head-dim, the preset's
// head_dim is kept unless --hidden or --heads changed, then head_dim = hidden / heads.
inline Hyper resolve_hyper(const Options& o, const Tokenizer& tok) {
  Hyper h = preset_hyper(o.preset, o.arch);
  if (o.layers) h.layers = *o.layers;
  if (o.hidden) h.hidden = *o.hidden;
  if (o.heads) h.heads = *o.heads;
  if (o.kv_heads) h.kv_heads = *o.kv_heads;
  if (o.ffn) h.ffn = *o.ffn;
  if (o.max_context) h.max_context = *o.max_context;
  if (o.vocab) h.vocab = *o.vocab;
  auto positive = [](const char* what, int64_t v) {
    if (v < 1) fail(ErrorKind::Usage, "--{} must be at least 1, got {}", what, v);
  };
  positive("layers", h.layers);
  positive("hidden", h.hidden);
  positive("heads", h.heads);
  positive("kv-heads", h.kv_heads);
  positive("ffn", h.ffn);
  positive("max-context", h.max_context);
  if (o.head_dim) {
    h.head_dim = *o.head_dim;
  } else if (o.hidden || o.heads) {
    if (h.hidden % h.heads != 0) {
      fail(ErrorKind::Usage, "--hidden {} is not divisible by --heads {}; pass --head-dim explicitly", h.hidden,
           h.heads);
    }
    h.head_dim = h.hidden / h.heads;
  }
  positive("head-dim", h.head_dim);
  if (h.heads % h.kv_heads != 0) {
    fail(ErrorKind::Usage, "--heads {} must be a multiple of --kv-heads {} (grouped-query attention)", h.heads,
         h.kv_heads);
  }
  const int64_t rotary_multiple = o.arch == Arch::Llama || o.arch == Arch::Qwen2 ? 2 : 4;
  if (h.head_dim % rotary_multiple != 0) {
    fail(ErrorKind::Usage, "--head-dim {} must be a multiple of {} for {} (RoPE rotates pairs of {} dims)", h.head_dim,
         rotary_multiple, arch_name(o.arch), rotary_multiple == 2 ? "all" : "the first half of the");
  }
  const int64_t min_vocab = (tok.size() + 63) / 64 * 64;
  if (h.vocab == 0) h.vocab = min_vocab;
  if (h.vocab < tok.size()) {
    fail(ErrorKind::Usage, "--vocab {} is smaller than the tokenizer's {} tokens; use at least {}", h.vocab, tok.size(),
         min_vocab);
  }
  // A test checkpoint is made in memory, one f32 tensor at a time: refuse sizes that could not be
  // (the largest matrix, and the whole model) before allocating anything.
  const auto d = [](int64_t v) { return static_cast<double>(v); };
  const double q = d(h.heads) * d(h.head_dim);
  const double largest =
      std::max({d(h.vocab) * d(h.hidden), d(h.ffn) * d(h.hidden) * 2, q * d(h.hidden), d(h.hidden) * d(h.hidden)});
  const double total = d(h.vocab) * d(h.hidden) * 2 + d(h.layers) * (2 * q * d(h.hidden) + 3 * d(h.ffn) * d(h.hidden));
  constexpr double kMaxTensor = double(int64_t{1} << 30);  // elements (4 GiB in f32)
  constexpr double kMaxModel = 20e9;                       // parameters
  if (largest > kMaxTensor || total > kMaxModel) {
    fail(ErrorKind::Usage,
         "a model of {} layers, hidden {}, ffn {}, vocab {} has about {:.3g} parameters and a tensor of {:.3g} "
         "elements; test checkpoints are made in memory: keep tensors under {:.3g} elements and the model under "
         "{:.3g} parameters",
         h.layers, h.hidden, h.ffn, h.vocab, total, largest, kMaxTensor, kMaxModel);
  }
  return h;
}

// Values as drawn, in Hugging Face layout.
inline void raw_values(const TensorSpec& s, uint64_t seed, float* out, ThreadPool& pool) {
  const int64_t n = s.shape.numel();
  if (s.init == Init::InvFreq) {
    const double d = static_cast<double>(2 * n);
    for (int64_t i = 0; i < n; ++i)
      out[i] = static_cast<float>(1.0 / std::pow(10000.0, static_cast<double>(2 * i) / d));
    return;
  }
  const uint64_t key = stream_key(seed, s.hf_name);
  const int64_t cols = s.shape.last();
  const double fan_in_std = s.init == Init::Matrix ? std::sqrt(1.0 / static_cast<double>(cols)) : 1.0;
  pool.parallel_range(n, 1 << 14, [&](int64_t begin, int64_t end, int) {
    for (int64_t i = begin; i < end; ++i) {
      const double z = stream_normal(key, static_cast<uint64_t>(i));
      double v = 0.0;
      switch (s.init) {
        case Init::Embedding:
          v = z;
          break;
        case Init::Matrix:
          v = z * fan_in_std * (i / cols < s.gain_rows ? s.gain : 1.0f);
          break;
        case Init::Bias:
          v = 0.5 * z;
          break;
        case Init::Norm:
          v = 1.0 + 0.1 * z;
          break;
        case Init::InvFreq:
          break;
      }
      out[i] = static_cast<float>(v);
    }
  });
}

inline Tensor host_view(const void* data, size_t nbytes, DType dtype, const Shape& shape) {
  return Tensor::view(Storage::view(const_cast<void*>(data), nbytes, nullptr), 0, dtype, shape);
}

// f32 values to `dtype` bytes. f16/bf16 use core's scalar round-to-nearest-even; the block formats
// use kernels::from_f32, which follows GGUF's reference quantizers.
inline void encode(const float* values, const Shape& shape, DType dtype, uint8_t* out, size_t nbytes,
                   ThreadPool& pool) {
  const size_t n = static_cast<size_t>(shape.numel());
  switch (dtype) {
    case DType::F32:
      std::memcpy(out, values, n * sizeof(float));
      return;
    case DType::F16:
    case DType::BF16:
      for (size_t i = 0; i < n; ++i) {
        const uint16_t h = dtype == DType::F16 ? f32_to_f16(values[i]) : f32_to_bf16(values[i]);
        std::memcpy(out + 2 * i, &h, 2);
      }
      return;
    default: {
      const Tensor src = host_view(values, n * sizeof(float), DType::F32, shape);
      Tensor dst = host_view(out, nbytes, dtype, shape);
      kernels::from_f32(src, dst, pool);
    }
  }
}

// `dtype` bytes back to f32, as GGUF's reference dequantizers (d * q, with d's sign kept on zeros):
// written out here so the Hugging Face twin of a quantized model has the same bytes whichever SIMD
// path the kernels take.
inline void decode(const uint8_t* bytes, DType dtype, size_t n, float* out) {
  switch (dtype) {
    case DType::F32:
      std::memcpy(out, bytes, n * sizeof(float));
      return;
    case DType::F16:
    case DType::BF16:
      for (size_t i = 0; i < n; ++i) {
        uint16_t h;
        std::memcpy(&h, bytes + 2 * i, 2);
        out[i] = dtype == DType::F16 ? f16_to_f32(h) : bf16_to_f32(h);
      }
      return;
    case DType::Q8_0:
      for (size_t b = 0; b < n / kQK8_0; ++b) {
        BlockQ8_0 block;
        std::memcpy(&block, bytes + b * sizeof(block), sizeof(block));
        const float d = f16_to_f32(block.d);
        for (int j = 0; j < kQK8_0; ++j) out[b * kQK8_0 + j] = static_cast<float>(block.qs[j]) * d;
      }
      return;
    case DType::Q4_0:
      for (size_t b = 0; b < n / kQK4_0; ++b) {
        BlockQ4_0 block;
        std::memcpy(&block, bytes + b * sizeof(block), sizeof(block));
        const float d = f16_to_f32(block.d);
        for (int j = 0; j < kQK4_0 / 2; ++j) {
          out[b * kQK4_0 + j] = static_cast<float>((block.qs[j] & 0x0F) - 8) * d;
          out[b * kQK4_0 + j + kQK4_0 / 2] = static_cast<float>((block.qs[j] >> 4) - 8) * d;
        }
      }
      return;
    default:
      fail(ErrorKind::Internal, "no decoder for {}", dtype_name(dtype));
  }
}

// Rounds `values` in place to what `dtype` can hold (quantize + dequantize for block formats).
inline void round_to(float* values, const Shape& shape, DType dtype, ThreadPool& pool) {
  if (dtype == DType::F32) return;
  const size_t n = static_cast<size_t>(shape.numel());
  const size_t nbytes = *dtype_bytes(dtype, n);
  std::vector<uint8_t> bytes(nbytes);
  encode(values, shape, dtype, bytes.data(), nbytes, pool);
  decode(bytes.data(), dtype, n, values);
}

// The dtype each file stores a tensor in, for --dtype `dtype`.
inline DType hf_dtype_for(DType dtype) {
  return dtype_traits(dtype).is_quantized ? DType::F32 : dtype;
}
inline DType gguf_dtype_for(const TensorSpec& s, DType dtype) {
  return s.shape.rank == 2 ? dtype : DType::F32;
}

// The Hugging Face copy of tensor `s`: the model's values in the safetensors dtype.
inline void fill_hf(const TensorSpec& s, uint64_t seed, DType dtype, uint8_t* out, size_t nbytes, ThreadPool& pool) {
  std::vector<float> v(static_cast<size_t>(s.shape.numel()));
  raw_values(s, seed, v.data(), pool);
  if (dtype_traits(dtype).is_quantized && s.shape.rank == 2) round_to(v.data(), s.shape, dtype, pool);
  encode(v.data(), s.shape, hf_dtype_for(dtype), out, nbytes, pool);
}

// The GGUF copy of tensor `s`: the same model, rows permuted where llama needs it.
inline void fill_gguf(const TensorSpec& s, uint64_t seed, DType dtype, uint8_t* out, size_t nbytes, ThreadPool& pool) {
  std::vector<float> v(static_cast<size_t>(s.shape.numel()));
  raw_values(s, seed, v.data(), pool);
  const DType stored = gguf_dtype_for(s, dtype);
  if (!dtype_traits(dtype).is_quantized && stored != dtype) round_to(v.data(), s.shape, dtype, pool);
  if (s.permute_heads > 0) v = permute_rows_for_gguf(v.data(), s.shape[0], s.shape[1], s.permute_heads);
  encode(v.data(), s.shape, stored, out, nbytes, pool);
}

inline void write_text_file(const std::string& path, const std::string& text) {
  OutputFile file(path);
  file.write(text.data(), text.size());
  file.close();
}

inline Result write_tiny_model(const Options& o) {
  namespace fs = std::filesystem;
  const Tokenizer& tok = default_tokenizer();
  if (o.format != "hf" && o.format != "gguf" && o.format != "both") {
    fail(ErrorKind::Usage, "unknown format '{}'; choose hf, gguf or both", o.format);
  }
  const bool hf = o.format != "gguf", gguf = o.format != "hf";
  if (o.dtype == DType::I32)
    fail(ErrorKind::Usage, "--dtype i32 is not a weight type; choose f32, f16, bf16, q8_0 or q4_0");
  if (o.format == "hf" && dtype_traits(o.dtype).is_quantized) {
    fail(ErrorKind::Usage,
         "--dtype {} is a GGUF block format; safetensors holds f32, f16 or bf16. Use --format gguf, or --format "
         "both (the Hugging Face copy then holds the exactly dequantized weights in f32)",
         dtype_name(o.dtype));
  }
  if (o.out_dir.empty()) fail(ErrorKind::Usage, "--out is required: the directory to write the model into");

  Result result;
  result.hyper = resolve_hyper(o, tok);
  const Hyper& h = result.hyper;
  const std::vector<TensorSpec> specs = tensor_specs(o.arch, h);
  result.parameters = parameter_count(specs);
  if (dtype_traits(o.dtype).is_quantized) {
    const int block = dtype_traits(o.dtype).block_size;
    for (const TensorSpec& s : specs) {
      if (s.shape.rank == 2 && s.shape.last() % block != 0) {
        fail(ErrorKind::Usage,
             "{} needs rows that are a multiple of {}: '{}' {} has rows of {}; choose sizes "
             "(hidden, ffn, heads*head_dim) that are multiples of {}",
             dtype_name(o.dtype), block, s.hf_name, s.shape.str(), s.shape.last(), block);
      }
    }
  }
  const int64_t hf_tensors = static_cast<int64_t>(specs.size());
  if (o.shards < 1 || o.shards > hf_tensors) {
    fail(ErrorKind::Usage, "--shards must be between 1 and {} (the number of tensors), got {}", hf_tensors, o.shards);
  }
  if (o.shards > 1 && !hf)
    fail(ErrorKind::Usage, "--shards applies to the Hugging Face files; use --format hf or both");

  std::error_code ec;
  fs::create_directories(o.out_dir, ec);
  if (ec) fail(ErrorKind::Io, "cannot create directory '{}': {}", o.out_dir, ec.message());

  const int threads = o.threads > 0 ? o.threads : std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
  ThreadPool pool(threads);
  const uint64_t seed = o.seed;
  const DType dtype = o.dtype;
  auto path = [&](const std::string& name) { return (fs::path(o.out_dir) / name).string(); };

  if (hf) {
    const DType stored = hf_dtype_for(dtype);
    std::vector<WriteTensor> tensors;
    for (const TensorSpec& s : specs) {
      WriteTensor t;
      t.name = s.hf_name;
      t.dtype = stored;
      t.shape = s.shape;
      t.fill = [&s, seed, dtype, &pool](uint8_t* out, size_t n) { fill_hf(s, seed, dtype, out, n, pool); };
      tensors.push_back(std::move(t));
    }
    for (const std::string& f : write_safetensors_sharded(o.out_dir, tensors, o.shards, {{"format", "pt"}})) {
      result.files.push_back(f);
    }
    if (o.shards > 1) result.files.push_back("model.safetensors.index.json");
    write_text_file(path("config.json"), config_json(o.arch, h, tok, stored).dump(2) + "\n");
    write_text_file(path("generation_config.json"), generation_config_json(tok).dump(2) + "\n");
    write_text_file(path("tokenizer.json"), tokenizer_json(tok).dump(2) + "\n");
    write_text_file(path("tokenizer_config.json"), tokenizer_config_json(tok, h.max_context).dump(2) + "\n");
    for (const char* f : {"config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json"}) {
      result.files.push_back(f);
    }
  }
  if (gguf) {
    GgufWriter w;
    // The hyper-parameter keys as `ferry convert` writes them, from the config.json of this model.
    const ModelConfig config = model_config_from_hf(
        nlohmann::json::parse(config_json(o.arch, h, tok, hf_dtype_for(dtype)).dump()), nullptr, "make_tiny_model");
    add_gguf_hyper_params(w, config, "ferry-" + o.preset + "-" + arch_name(o.arch),
                          gguf_file_type(WeightQuant{dtype, QuantMix::Pure}), dtype_traits(dtype).is_quantized);
    add_gguf_tokenizer(w, tok, h.vocab);
    for (const TensorSpec& s : specs) {
      if (s.gguf_name.empty()) continue;
      WriteTensor t;
      t.name = s.gguf_name;
      t.dtype = gguf_dtype_for(s, dtype);
      t.shape = s.shape;
      t.fill = [&s, seed, dtype, &pool](uint8_t* out, size_t n) { fill_gguf(s, seed, dtype, out, n, pool); };
      w.add_tensor(std::move(t));
    }
    w.write(path("model.gguf"));
    result.files.push_back("model.gguf");
  }
  return result;
}

}  // namespace ferry::tiny
