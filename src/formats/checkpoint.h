// What every weight-file reader hands upward: named tensors with dtype, shape and bytes inside a
// memory-mapped file, every record already validated against the file.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/dtype.h"
#include "core/tensor.h"

namespace ferry {

// A read-only memory map of a whole file. Throws Error(Io) naming the path when it cannot open it.
class MappedFile {
 public:
  static std::shared_ptr<const MappedFile> open(const std::string& path);
  // The same interface over bytes held in memory (fuzzers, tests, files built on the fly). `name`
  // stands in for the path in error messages.
  static std::shared_ptr<const MappedFile> from_bytes(std::string name, std::vector<uint8_t> bytes);
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }
  const std::string& path() const { return path_; }
  // Drops the resident pages that lie wholly inside [data, data + bytes) (a range of this file):
  // after a tensor was converted into device memory its source bytes are not read again, and
  // reading them would only fault them back in from the file. A no-op for in-memory files.
  void release_pages(const void* data, size_t bytes) const;

 private:
  MappedFile() = default;
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
  bool mapped_ = false;         // data_ is an mmap region to unmap
  std::vector<uint8_t> owned_;  // from_bytes: the bytes themselves
  std::string path_;
};

struct TensorRecord {
  std::string name;  // as stored in the file
  DType dtype = DType::F32;
  Shape shape;                    // outermost-first (GGUF's ne order is reversed on reading)
  const uint8_t* data = nullptr;  // inside `file`
  size_t nbytes = 0;              // == dtype_bytes(dtype, shape.numel())
  std::shared_ptr<const MappedFile> file;

  // A host tensor viewing the mapped bytes (keeps the mapping alive).
  Tensor view() const;
};

// A set of tensors from one or more files (sharded safetensors, or one GGUF).
class TensorSet {
 public:
  void add(TensorRecord record);  // throws Error(Format) on a duplicate name, naming both files
  const TensorRecord* find(const std::string& name) const;  // nullptr if absent
  const std::vector<TensorRecord>& all() const { return records_; }
  size_t size() const { return records_.size(); }

  // Free-form string metadata of the checkpoint (safetensors "__metadata__"; for sharded
  // checkpoints the union over the shards, the first shard to set a key wins).
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  void add_metadata(const std::string& key, const std::string& value) { metadata_.emplace(key, value); }

 private:
  std::vector<TensorRecord> records_;
  std::unordered_map<std::string, size_t> index_;
  std::map<std::string, std::string> metadata_;
};

}  // namespace ferry
