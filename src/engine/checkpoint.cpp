#include "engine/checkpoint.h"

#include <algorithm>
#include <filesystem>
#include <unordered_set>

#include "core/error.h"
#include "engine/generator.h"
#include "engine/model_config_reader.h"
#include "formats/gguf.h"
#include "formats/json_file.h"
#include "formats/safetensors.h"

namespace ferry {

namespace fs = std::filesystem;

uint64_t Checkpoint::weight_bytes() const {
  uint64_t total = 0;
  std::unordered_set<std::string> seen;
  for (const auto& m : spec.modules) {
    for (const auto& p : m.params) {
      if (!seen.insert(p.checkpoint_name()).second) continue;
      if (const TensorRecord* r = tensors.find(p.checkpoint_name())) total += r->nbytes;
    }
  }
  return total;
}

namespace {

TensorLookup lookup_in(const TensorSet& tensors) {
  return [&tensors](const std::string& name) -> std::optional<StoredTensor> {
    const TensorRecord* r = tensors.find(name);
    if (r == nullptr) return std::nullopt;
    return StoredTensor{r->dtype, r->shape};
  };
}

// Buffers that carry no model weights, kept by some exporters.
bool is_ignorable_buffer(const std::string& name) {
  const auto ends_with = [&](std::string_view suffix) {
    return name.size() >= suffix.size() && name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0;
  };
  return ends_with("rotary_pos_emb.inv_freq") || ends_with("rotary_emb.inv_freq");
}

// Every tensor must be used: a leftover means the config does not describe these weights (fewer
// layers, a bias flag off) or the model has parts ferry does not run; either way running would
// give silently wrong output.
void refuse_unused_tensors(const Checkpoint& ck) {
  std::unordered_set<std::string> used;
  for (const auto& m : ck.spec.modules) {
    for (const auto& p : m.params) used.insert(p.checkpoint_name());
  }
  const ModelConfig& c = ck.spec.config;
  const auto tied_output = tensor_name(c, LogicalTensor::Output, 0);
  // GGUF rope_freqs: read into the config (its per-pair RoPE divisors), not loaded as a weight.
  const auto rope_freqs = tensor_name(c, LogicalTensor::RopeFreqs, 0);
  std::vector<std::string> unused;
  for (const auto& r : ck.tensors.all()) {
    if (used.count(r.name) || is_ignorable_buffer(r.name)) continue;
    if (c.tied_embeddings && tied_output && r.name == *tied_output) continue;  // a saved copy of the tie
    if (!c.rope_freq_factors.empty() && rope_freqs && r.name == *rope_freqs) continue;
    unused.push_back(r.name);
  }
  if (unused.empty()) return;
  std::sort(unused.begin(), unused.end());
  std::string listed;
  for (size_t i = 0; i < std::min<size_t>(unused.size(), 8); ++i) listed += "\n    " + unused[i];
  if (unused.size() > 8) listed += fmt::format("\n    ... and {} more", unused.size() - 8);
  fail(ErrorKind::Shape,
       "{}: {} tensor(s) are not part of the {} model the {} describes:{}\n  the {} may not match these weights "
       "(e.g. fewer layers than stored, a bias flag off), or the model has parts ferry does not run yet",
       ck.path, unused.size(), family_name(c.family), ck.is_gguf ? "GGUF metadata" : "config", listed,
       ck.is_gguf ? "metadata" : "config");
}

bool path_exists(const fs::path& p) {
  std::error_code ec;
  return fs::exists(p, ec);
}

Checkpoint open_gguf(const std::string& path) {
  Checkpoint ck;
  ck.path = path;
  ck.directory = fs::path(path).parent_path().string();
  ck.is_gguf = true;
  auto gguf = std::make_shared<GgufFile>(GgufFile::open(path));
  ck.tensors = gguf->tensors();
  const ModelConfig config = model_config_from_gguf(
      *gguf,
      [&](const std::string& name) -> std::optional<Shape> {
        const TensorRecord* r = ck.tensors.find(name);
        return r ? std::optional<Shape>(r->shape) : std::nullopt;
      },
      path);
  ck.spec = make_decoder_spec(config, lookup_in(ck.tensors), path);
  refuse_unused_tensors(ck);
  ck.has_chat_template = gguf->has("tokenizer.chat_template");
  ck.gguf = std::move(gguf);
  return ck;
}

// MiniCPM-V's image tokens (<image>, </image>, <slice>, </slice>, <unk>) by the strings
// preprocessor_config.json names, looked up in the checkpoint's tokenizer.
void resolve_minicpmv_tokens(Checkpoint& ck) {
  const fs::path pre_path = fs::path(ck.directory) / "preprocessor_config.json";
  nlohmann::json pre = nlohmann::json::object();
  if (path_exists(pre_path)) pre = read_json_file(pre_path.string());
  const std::string source = pre_path.string();
  const std::optional<Tokenizer> tok = load_checkpoint_tokenizer(ck);
  if (!tok) {
    fail(ErrorKind::Usage, "{}: MiniCPM-V needs its tokenizer (tokenizer.json) to find its image tokens", ck.path);
  }
  VisionConfig& v = ck.spec.config.vision;
  const auto id_of = [&](const char* key, const char* fallback) {
    const std::string piece = json_opt_string(pre, key, source).value_or(fallback);
    const int32_t id = tok->find_token(piece);
    if (id < 0) {
      fail(ErrorKind::Config, "{}: the tokenizer has no token '{}' ({} in preprocessor_config.json)", ck.path, piece,
           key);
    }
    return id;
  };
  v.boi_id = id_of("im_start", "<image>");
  v.eoi_id = id_of("im_end", "</image>");
  v.slice_start_id = id_of("slice_start", "<slice>");
  v.slice_end_id = id_of("slice_end", "</slice>");
  v.unk_id = id_of("unk", "<unk>");
  if (const auto q = json_opt_int(pre, "image_feature_size", source); q && *q != v.query_num) {
    fail(ErrorKind::Config, "{}: image_feature_size {} differs from config.json's query_num {}", source, *q,
         v.query_num);
  }
}

Checkpoint open_hf_directory(const std::string& path) {
  Checkpoint ck;
  ck.path = path;
  ck.directory = path;
  const fs::path dir(path);
  const fs::path config_path = dir / "config.json";
  if (!path_exists(config_path)) {
    fail(ErrorKind::Usage,
         "{}: no config.json in this directory; point --model at a Hugging Face model directory "
         "or a .gguf file",
         path);
  }
  const nlohmann::json config = read_json_file(config_path.string());
  const fs::path gen_path = dir / "generation_config.json";
  nlohmann::json generation;
  const bool has_generation = path_exists(gen_path);
  if (has_generation) generation = read_json_file(gen_path.string());
  const ModelConfig mc = model_config_from_hf(config, has_generation ? &generation : nullptr, config_path.string());
  ck.tensors = open_safetensors(path);
  ck.spec = make_decoder_spec(mc, lookup_in(ck.tensors), path);
  refuse_unused_tensors(ck);
  const fs::path tok_config = dir / "tokenizer_config.json";
  if (path_exists(tok_config)) {
    const nlohmann::json tc = read_json_file(tok_config.string());
    ck.has_chat_template = tc.contains("chat_template") && !tc["chat_template"].is_null();
  }
  if (ck.config().vision.family == VisionFamily::MiniCpmv) resolve_minicpmv_tokens(ck);
  return ck;
}

}  // namespace

Checkpoint open_checkpoint(const std::string& path) {
  std::error_code ec;
  const fs::file_status st = fs::status(path, ec);
  if (ec || !fs::exists(st)) {
    fail(ErrorKind::Io,
         "{}: no such file or directory; point --model at a Hugging Face model directory or a .gguf "
         "file",
         path);
  }
  if (fs::is_directory(st)) return open_hf_directory(path);
  if (fs::path(path).extension() == ".gguf") return open_gguf(path);
  if (fs::path(path).filename() == "config.json") return open_hf_directory(fs::path(path).parent_path().string());
  fail(ErrorKind::Usage, "{}: not a model: expected a directory with config.json and *.safetensors, or a .gguf file",
       path);
}

TensorSet open_checkpoint_tensors(const std::string& path) {
  std::error_code ec;
  if (fs::is_directory(path, ec)) return open_safetensors(path);
  if (fs::path(path).filename() == "config.json") return open_safetensors(fs::path(path).parent_path().string());
  return GgufFile::open(path).tensors();
}

}  // namespace ferry
