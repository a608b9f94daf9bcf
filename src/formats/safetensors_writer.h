// Writes safetensors files (one file, or shards with a model.safetensors.index.json), the layout
// Hugging Face checkpoints use. The tools that make test checkpoints and any converter use it.
//
// File layout: 8-byte little-endian header length N, then N bytes of JSON
//   {"__metadata__": {...}, "<name>": {"dtype": "F32", "shape": [...], "data_offsets": [begin, end]}, ...}
// padded with spaces so the data starts 8-byte aligned, then the tensors' bytes in the given order.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/tensor.h"

namespace ferry {

// One tensor to write (also used by GgufWriter). Its bytes come from exactly one of:
//   data   borrowed pointer to nbytes() bytes that must stay valid until the write returns;
//   bytes  owned copy of exactly nbytes() bytes;
//   fill   called once, when the writer reaches this tensor, with a buffer of nbytes() bytes to fill:
//          lets a large checkpoint be produced one tensor at a time without holding it in memory.
struct WriteTensor {
  std::string name;
  DType dtype = DType::F32;
  Shape shape;  // outermost-first
  const void* data = nullptr;
  std::vector<uint8_t> bytes;
  std::function<void(uint8_t* out, size_t nbytes)> fill;

  // dtype_bytes(dtype, numel); throws Error(Usage) naming the tensor if the shape is negative or
  // not a whole number of blocks.
  size_t nbytes() const;
  // Throws Error(Usage) naming the tensor unless exactly one byte source is set and `bytes` has the
  // right size.
  void check_source() const;
  // Writes the tensor's bytes to `out` (calls `fill` with a scratch buffer when needed).
  void emit(const std::function<void(const uint8_t*, size_t)>& out) const;
};

// A file being written, for the writers: every failure throws Error(Io) naming the path, and the
// file is removed unless close() succeeded, so a failed write leaves no half-written checkpoint.
class OutputFile {
 public:
  explicit OutputFile(const std::string& path);
  ~OutputFile();
  OutputFile(const OutputFile&) = delete;
  OutputFile& operator=(const OutputFile&) = delete;

  void write(const void* data, size_t n);
  void write_zeros(size_t n);
  uint64_t offset() const { return offset_; }
  void close();

 private:
  std::string path_;
  std::FILE* file_ = nullptr;
  uint64_t offset_ = 0;
};

// The safetensors dtype string ("F32", "F16", "BF16", "I32"); throws Error(Unsupported) for block
// formats, which safetensors cannot hold.
const char* safetensors_dtype_name(DType dtype, const std::string& tensor_name);

// Writes one .safetensors file. `metadata` goes into "__metadata__" (string values only, as the
// format requires). Throws Error(Io) naming the path when it cannot write, Error(Usage) for a
// duplicate name or a tensor without a valid byte source.
void write_safetensors(const std::string& path, const std::vector<WriteTensor>& tensors,
                       const std::map<std::string, std::string>& metadata = {});

// Splits `tensors` (in order, balancing bytes) over `n_shards` files named
// model-0000K-of-0000N.safetensors in `dir`, and writes dir/model.safetensors.index.json
// ({"metadata": {"total_size": bytes}, "weight_map": {name: file}}). n_shards == 1 writes
// dir/model.safetensors and no index. Returns the file names written (without `dir`).
// Throws Error(Usage) when n_shards < 1 or exceeds the number of tensors.
std::vector<std::string> write_safetensors_sharded(const std::string& dir, const std::vector<WriteTensor>& tensors,
                                                   int n_shards,
                                                   const std::map<std::string, std::string>& metadata = {});

}  // namespace ferry
