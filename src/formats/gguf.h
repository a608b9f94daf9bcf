// Reader for GGUF files (versions 2 and 3), llama.cpp's single-file checkpoint format.
//
// Layout (all little-endian): "GGUF", u32 version, u64 tensor_count, u64 kv_count; kv_count
// metadata entries (string key, u32 value type, value); tensor_count tensor infos (string name,
// u32 n_dims, u64 ne[n_dims] innermost-first, u32 ggml type, u64 offset); padding to the
// alignment (general.alignment, default 32); the data section. A string is u64 length + bytes.
//
// Every count and length is checked against the bytes that remain before anything is allocated,
// so a lying header cannot cause a huge allocation. Metadata values stay inside the mapping:
// numeric arrays are read on access, string arrays are views, so a 150k-token vocabulary costs
// one small vector.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "core/dtype.h"
#include "formats/checkpoint.h"

namespace ferry {

// GGUF metadata value types, numbered as in the file.
enum class GgufType : uint32_t {
  U8 = 0,
  I8 = 1,
  U16 = 2,
  I16 = 3,
  U32 = 4,
  I32 = 5,
  F32 = 6,
  Bool = 7,
  String = 8,
  Array = 9,
  U64 = 10,
  I64 = 11,
  F64 = 12,
};
std::string_view gguf_type_name(GgufType type);  // "u32", "string", "array", ...

// ggml tensor type ids as stored in tensor infos.
inline constexpr uint32_t kGgmlTypeF32 = 0;
inline constexpr uint32_t kGgmlTypeF16 = 1;
inline constexpr uint32_t kGgmlTypeQ4_0 = 2;
inline constexpr uint32_t kGgmlTypeQ4_1 = 3;
inline constexpr uint32_t kGgmlTypeQ5_0 = 6;
inline constexpr uint32_t kGgmlTypeQ5_1 = 7;
inline constexpr uint32_t kGgmlTypeQ8_0 = 8;
inline constexpr uint32_t kGgmlTypeQ2_K = 10;
inline constexpr uint32_t kGgmlTypeQ3_K = 11;
inline constexpr uint32_t kGgmlTypeQ4_K = 12;
inline constexpr uint32_t kGgmlTypeQ5_K = 13;
inline constexpr uint32_t kGgmlTypeQ6_K = 14;
inline constexpr uint32_t kGgmlTypeIQ4_NL = 20;
inline constexpr uint32_t kGgmlTypeIQ4_XS = 23;
inline constexpr uint32_t kGgmlTypeBF16 = 30;
// The ggml name of a type id ("q4_k"), nullopt for ids ggml never defined.
std::optional<std::string_view> ggml_type_name(uint32_t type_id);
// The ferry dtype a ggml type id is read as, nullopt when ferry does not load that type.
std::optional<DType> dtype_from_ggml_type(uint32_t type_id);

// One metadata value. Scalars are decoded; strings and arrays view the file's bytes (the GgufFile
// that owns the value keeps the mapping alive).
struct GgufValue {
  GgufType type = GgufType::U8;
  // Scalars: integers keep their bits (signed ones sign-extended into `bits`), floats are widened.
  uint64_t bits = 0;
  double number = 0.0;
  bool boolean = false;
  std::string_view string;
  // Arrays: element type and count. Fixed-size elements are `count` packed little-endian values
  // at `raw`; strings are in `strings`, nested arrays in `arrays`.
  GgufType elem_type = GgufType::U8;
  uint64_t count = 0;
  const uint8_t* raw = nullptr;
  std::vector<std::string_view> strings;
  std::vector<GgufValue> arrays;

  bool is_integer() const;  // u8..i64 scalar
  bool is_signed() const;   // i8/i16/i32/i64 scalar
  // The integer value when it fits, else nullopt (also for non-integers).
  std::optional<int64_t> as_int64() const;
  std::optional<uint64_t> as_uint64() const;
  // "u32 2048", "string \"llama\"", "array of 320 string", ... for messages.
  std::string describe() const;
};

class GgufFile {
 public:
  static GgufFile open(const std::string& path);
  // Parses a file already mapped (or held in memory: MappedFile::from_bytes).
  static GgufFile parse(std::shared_ptr<const MappedFile> file);

  uint32_t version() const { return version_; }
  const std::string& path() const { return file_->path(); }
  uint64_t alignment() const { return alignment_; }
  uint64_t data_offset() const { return data_offset_; }  // file offset of the data section
  const TensorSet& tensors() const { return tensors_; }
  // The ggml type id each tensor had in the file, in the order of tensors().all().
  const std::vector<uint32_t>& ggml_types() const { return ggml_types_; }

  bool has(const std::string& key) const { return find(key) != nullptr; }
  const GgufValue* find(const std::string& key) const;  // nullptr when absent
  std::vector<std::string> keys() const;                // in file order

  // Typed getters. A missing key or a value of another type is Error(Format) naming the file,
  // the key and what the value is.
  std::string get_string(const std::string& key) const;
  uint32_t get_u32(const std::string& key) const;  // any integer type whose value fits
  int64_t get_int(const std::string& key) const;   // any integer type whose value fits
  float get_f32(const std::string& key) const;     // f32 or f64
  bool get_bool(const std::string& key) const;
  std::vector<std::string> get_string_array(const std::string& key) const;
  std::vector<float> get_f32_array(const std::string& key) const;    // f32 or f64 elements
  std::vector<int32_t> get_i32_array(const std::string& key) const;  // any integer elements that fit

  // Optional forms: nullopt when the key is absent; Error(Format) when present with another type.
  std::optional<std::string> opt_string(const std::string& key) const;
  std::optional<uint32_t> opt_u32(const std::string& key) const;
  std::optional<int64_t> opt_int(const std::string& key) const;
  std::optional<float> opt_f32(const std::string& key) const;
  std::optional<bool> opt_bool(const std::string& key) const;

 private:
  GgufFile() = default;
  const GgufValue& require(const std::string& key, std::string_view wanted) const;
  [[noreturn]] void wrong_type(const std::string& key, const GgufValue& value, std::string_view wanted) const;

  std::shared_ptr<const MappedFile> file_;
  uint32_t version_ = 0;
  uint64_t alignment_ = 32;
  uint64_t data_offset_ = 0;
  std::vector<std::pair<std::string, GgufValue>> kvs_;
  std::unordered_map<std::string, size_t> kv_index_;
  TensorSet tensors_;
  std::vector<uint32_t> ggml_types_;
};

}  // namespace ferry
