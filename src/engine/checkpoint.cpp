#include "engine/checkpoint.h"

#include <filesystem>
#include <unordered_set>

#include "core/error.h"
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
      if (!seen.insert(p.name).second) continue;
      if (const TensorRecord* r = tensors.find(p.name)) total += r->nbytes;
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

Checkpoint open_gguf(const std::string& path) {
  Checkpoint ck;
  ck.path = path;
  ck.directory = fs::path(path).parent_path().string();
  ck.is_gguf = true;
  auto gguf = std::make_shared<GgufFile>(GgufFile::open(path));
  ck.tensors = gguf->tensors();
  ModelConfig config = model_config_from_gguf(
      *gguf, [&](const std::string& name) { return ck.tensors.find(name) != nullptr; }, path);
  // The embedding's row count is the vocabulary the model computes over.
  if (const TensorRecord* emb = ck.tensors.find("token_embd.weight"); emb && emb->shape.rank == 2) {
    config.vocab = static_cast<int>(emb->shape[0]);
  }
  ck.spec = make_decoder_spec(config, lookup_in(ck.tensors), path);
  ck.has_chat_template = gguf->has("tokenizer.chat_template");
  ck.gguf = std::move(gguf);
  return ck;
}

Checkpoint open_hf_directory(const std::string& path) {
  Checkpoint ck;
  ck.path = path;
  ck.directory = path;
  const fs::path dir(path);
  const fs::path config_path = dir / "config.json";
  if (!fs::exists(config_path)) {
    fail(ErrorKind::Usage,
         "{}: no config.json in this directory; point --model at a Hugging Face model directory "
         "or a .gguf file",
         path);
  }
  const nlohmann::json config = read_json_file(config_path.string());
  const fs::path gen_path = dir / "generation_config.json";
  nlohmann::json generation;
  const bool has_generation = fs::exists(gen_path);
  if (has_generation) generation = read_json_file(gen_path.string());
  const ModelConfig mc = model_config_from_hf(config, has_generation ? &generation : nullptr, config_path.string());
  ck.tensors = open_safetensors(path);
  ck.spec = make_decoder_spec(mc, lookup_in(ck.tensors), path);
  const fs::path tok_config = dir / "tokenizer_config.json";
  if (fs::exists(tok_config)) {
    const nlohmann::json tc = read_json_file(tok_config.string());
    ck.has_chat_template = tc.contains("chat_template") && !tc["chat_template"].is_null();
  }
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

}  // namespace ferry
