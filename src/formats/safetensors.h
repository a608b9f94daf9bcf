// Reader for Hugging Face safetensors checkpoints: one file, or a directory sharded through
// model.safetensors.index.json.
//
// File layout: u64 little-endian header length N, N bytes of JSON, then the data section.
// The JSON maps each tensor name to {"dtype", "shape", "data_offsets": [begin, end]} (offsets
// relative to the data section) plus an optional "__metadata__" string map. Every field is
// validated before use; errors are ErrorKind::Format naming the file, the tensor and the numbers
// (ErrorKind::Unsupported for well-formed tensors of a dtype ferry does not load).
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/tensor.h"
#include "formats/checkpoint.h"

namespace ferry {

// Header lengths above this are refused before any parsing (real headers are kilobytes).
inline constexpr uint64_t kMaxSafetensorsHeaderBytes = 100ull << 20;

struct SafetensorsEntry {
  std::string name;
  DType dtype = DType::F32;
  Shape shape;         // as stored (outermost-first)
  uint64_t begin = 0;  // byte range inside the data section, end - begin == dtype_bytes(shape)
  uint64_t end = 0;
};

struct SafetensorsHeader {
  uint64_t data_start = 0;                      // file offset of the data section (8 + header length)
  uint64_t data_size = 0;                       // bytes from data_start to the end of the file
  std::vector<SafetensorsEntry> tensors;        // sorted by name
  std::map<std::string, std::string> metadata;  // "__metadata__"
};

// Validates the header of a safetensors file held in memory (`size` bytes at `data`, the whole
// file). `filename` is used in error messages only. Needs no mmap: the fuzzer calls it directly.
SafetensorsHeader parse_safetensors_header(const uint8_t* data, size_t size, const std::string& filename);

// The tensors of one safetensors file, viewing its bytes.
TensorSet read_safetensors_file(std::shared_ptr<const MappedFile> file);

// `path` is a .safetensors file, a model.safetensors.index.json, or a directory holding either
// (the index wins). For a sharded checkpoint every shard named in the index's weight_map is
// opened once; each tensor must be in the shard the index names, and every indexed tensor must
// exist.
TensorSet open_safetensors(const std::string& path);

}  // namespace ferry
