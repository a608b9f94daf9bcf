// Opens what the user points at — a Hugging Face directory (config.json + safetensors) or a .gguf
// file — reads headers only, and checks that the tensors fit the architecture the config declares.
// No weight bytes are read here.
#pragma once

#include <memory>
#include <string>

#include "formats/checkpoint.h"
#include "models/decoder.h"

namespace ferry {

class GgufFile;

struct Checkpoint {
  std::string path;       // as given
  std::string directory;  // where config/tokenizer files live (a GGUF file's own directory)
  bool is_gguf = false;
  TensorSet tensors;
  std::shared_ptr<const GgufFile> gguf;  // set for GGUF files (metadata, embedded tokenizer)
  ModelSpec spec;                        // config + modules, validated against the tensors
  bool has_chat_template = false;

  const ModelConfig& config() const { return spec.config; }
  uint64_t weight_bytes() const;  // stored bytes of every parameter the model uses
};

// Throws Error(Io) when the path does not exist, Error(Usage) when it is neither a directory with
// config.json nor a .gguf file, and the format/config/shape errors of the readers.
Checkpoint open_checkpoint(const std::string& path);

// The tensor headers alone (names, dtypes, shapes), not checked against any config: what
// `inspect --tensors` still lists when a checkpoint does not open as a model.
TensorSet open_checkpoint_tensors(const std::string& path);

}  // namespace ferry
