// Writes GGUF version 3 files, the format llama.cpp reads.
//
// Layout: "GGUF", u32 version 3, u64 tensor count, u64 key/value count, the key/values, the tensor
// infos (name, u32 n_dims, u64 ne[n_dims] innermost-first, u32 ggml type, u64 offset into the data
// section), zero padding to general.alignment (32 unless set), then each tensor's bytes, each
// starting at a multiple of the alignment. All integers little-endian.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <variant>
#include <vector>

#include "core/dtype.h"
#include "core/tensor.h"
#include "formats/safetensors_writer.h"  // WriteTensor

namespace ferry {

// The ggml type id of a ferry dtype (F32 0, F16 1, Q4_0 2, Q8_0 8, I32 26, BF16 30).
uint32_t gguf_type_id(DType dtype);

class GgufWriter {
 public:
  // Setting a key again replaces its value and keeps its position. Keys are written in the order
  // they were first set.
  void set_string(const std::string& key, const std::string& value);
  void set_u32(const std::string& key, uint32_t value);
  void set_i32(const std::string& key, int32_t value);
  void set_u64(const std::string& key, uint64_t value);
  void set_f32(const std::string& key, float value);
  void set_bool(const std::string& key, bool value);
  void set_string_array(const std::string& key, const std::vector<std::string>& values);
  void set_f32_array(const std::string& key, const std::vector<float>& values);
  void set_i32_array(const std::string& key, const std::vector<int32_t>& values);

  // shape is outermost-first (ferry's convention) and is written reversed, as GGUF's ne.
  // Throws Error(Usage) for a duplicate name, a name of 64 bytes or more, rank 0 or above 4, or a
  // byte count that does not match dtype and shape.
  void add_tensor(const std::string& name, DType dtype, const Shape& shape, std::vector<uint8_t> bytes);
  // Any byte source of WriteTensor (data, bytes or a fill callback run when the tensor is written).
  void add_tensor(WriteTensor tensor);

  // general.alignment (default 32): written as a key when not 32, and used for the padding.
  void set_alignment(uint32_t alignment);

  // Throws Error(Io) naming the path when it cannot write.
  void write(const std::string& path) const;
  // The whole file in memory (small files: a vocabulary-only GGUF, tests); GgufFile::parse reads it
  // back through MappedFile::from_bytes.
  std::vector<uint8_t> to_bytes() const;

  size_t tensor_count() const { return tensors_.size(); }

 private:
  struct StringArray {
    std::vector<std::string> values;
  };
  using Value = std::variant<std::string, uint32_t, int32_t, uint64_t, float, bool, StringArray, std::vector<float>,
                             std::vector<int32_t>>;
  void set(const std::string& key, Value value);
  // The file's bytes in order, handed to `out` piece by piece (write and to_bytes share it).
  void emit(const std::function<void(const uint8_t*, size_t)>& out) const;

  std::vector<std::pair<std::string, Value>> kv_;
  std::vector<WriteTensor> tensors_;
  uint32_t alignment_ = 32;
};

}  // namespace ferry
