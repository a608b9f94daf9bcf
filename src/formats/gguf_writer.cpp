#include "formats/gguf_writer.h"

#include <algorithm>
#include <bit>
#include <cstring>
#include <type_traits>

#include "core/error.h"

namespace ferry {

namespace {

// GGUF value type ids.
enum : uint32_t {
  kTypeU32 = 4,
  kTypeI32 = 5,
  kTypeF32 = 6,
  kTypeBool = 7,
  kTypeString = 8,
  kTypeArray = 9,
  kTypeU64 = 10,
};

constexpr size_t kMaxNameBytes = 63;  // ggml's GGML_MAX_NAME (64) includes the terminating zero

// Little-endian serialisation into a byte buffer (the header is built in memory, then written).
class Bytes {
 public:
  template <typename T>
  void put(T value) {
    static_assert(std::is_integral_v<T> || std::is_floating_point_v<T>);
    uint8_t raw[sizeof(T)];
    std::memcpy(raw, &value, sizeof(T));  // the machines we build for are little-endian
    buf_.insert(buf_.end(), raw, raw + sizeof(T));
  }
  void put_string(const std::string& s) {
    put<uint64_t>(s.size());
    buf_.insert(buf_.end(), s.begin(), s.end());
  }
  const std::vector<uint8_t>& data() const { return buf_; }

 private:
  std::vector<uint8_t> buf_;
};
static_assert(std::endian::native == std::endian::little, "the GGUF writer assumes a little-endian host");

uint64_t align_up(uint64_t x, uint64_t alignment) {
  return (x + alignment - 1) / alignment * alignment;
}

}  // namespace

uint32_t gguf_type_id(DType dtype) {
  switch (dtype) {
    case DType::F32:
      return 0;
    case DType::F16:
      return 1;
    case DType::Q4_0:
      return 2;
    case DType::Q4_1:
      return 3;
    case DType::Q5_0:
      return 6;
    case DType::Q5_1:
      return 7;
    case DType::Q8_0:
      return 8;
    case DType::Q2_K:
      return 10;
    case DType::Q3_K:
      return 11;
    case DType::Q4_K:
      return 12;
    case DType::Q5_K:
      return 13;
    case DType::Q6_K:
      return 14;
    case DType::IQ4_NL:
      return 20;
    case DType::IQ4_XS:
      return 23;
    case DType::I32:
      return 26;
    case DType::BF16:
      return 30;
    case DType::Count:
      break;
  }
  fail(ErrorKind::Internal, "no GGUF type for dtype {}", static_cast<int>(dtype));
}

void GgufWriter::set(const std::string& key, Value value) {
  if (key.empty()) fail(ErrorKind::Usage, "GGUF metadata key must not be empty");
  for (auto& [k, v] : kv_) {
    if (k == key) {
      v = std::move(value);
      return;
    }
  }
  kv_.emplace_back(key, std::move(value));
}

void GgufWriter::set_string(const std::string& key, const std::string& value) {
  set(key, value);
}
void GgufWriter::set_u32(const std::string& key, uint32_t value) {
  set(key, value);
}
void GgufWriter::set_i32(const std::string& key, int32_t value) {
  set(key, value);
}
void GgufWriter::set_u64(const std::string& key, uint64_t value) {
  set(key, value);
}
void GgufWriter::set_f32(const std::string& key, float value) {
  set(key, value);
}
void GgufWriter::set_bool(const std::string& key, bool value) {
  set(key, value);
}
void GgufWriter::set_string_array(const std::string& key, const std::vector<std::string>& values) {
  set(key, StringArray{values});
}
void GgufWriter::set_f32_array(const std::string& key, const std::vector<float>& values) {
  set(key, values);
}
void GgufWriter::set_i32_array(const std::string& key, const std::vector<int32_t>& values) {
  set(key, values);
}

void GgufWriter::set_alignment(uint32_t alignment) {
  if (alignment == 0 || (alignment & (alignment - 1)) != 0 || alignment % 8 != 0) {
    fail(ErrorKind::Usage, "GGUF alignment must be a power of two and a multiple of 8, got {}", alignment);
  }
  alignment_ = alignment;
}

void GgufWriter::add_tensor(const std::string& name, DType dtype, const Shape& shape, std::vector<uint8_t> bytes) {
  WriteTensor t;
  t.name = name;
  t.dtype = dtype;
  t.shape = shape;
  t.bytes = std::move(bytes);
  add_tensor(std::move(t));
}

void GgufWriter::add_tensor(WriteTensor tensor) {
  if (tensor.name.empty() || tensor.name.size() > kMaxNameBytes) {
    fail(ErrorKind::Usage, "GGUF tensor name '{}' must have 1 to {} bytes (llama.cpp's limit), it has {}", tensor.name,
         kMaxNameBytes, tensor.name.size());
  }
  if (tensor.shape.rank < 1 || tensor.shape.rank > 4) {
    fail(ErrorKind::Usage, "GGUF tensor '{}': rank must be 1 to 4, shape {} has rank {}", tensor.name,
         tensor.shape.str(), tensor.shape.rank);
  }
  for (const WriteTensor& t : tensors_) {
    if (t.name == tensor.name) fail(ErrorKind::Usage, "GGUF tensor '{}' added twice", tensor.name);
  }
  tensor.check_source();
  tensors_.push_back(std::move(tensor));
}

void GgufWriter::emit(const std::function<void(const uint8_t*, size_t)>& out) const {
  const bool write_alignment_key = alignment_ != 32 && std::none_of(kv_.begin(), kv_.end(), [](const auto& kv) {
                                     return kv.first == "general.alignment";
                                   });

  Bytes h;
  h.put<uint32_t>(0x46554747u);  // "GGUF"
  h.put<uint32_t>(3);
  h.put<uint64_t>(tensors_.size());
  h.put<uint64_t>(kv_.size() + (write_alignment_key ? 1 : 0));
  for (const auto& [key, value] : kv_) {
    h.put_string(key);
    std::visit(
        [&](const auto& v) {
          using T = std::decay_t<decltype(v)>;
          if constexpr (std::is_same_v<T, std::string>) {
            h.put<uint32_t>(kTypeString);
            h.put_string(v);
          } else if constexpr (std::is_same_v<T, uint32_t>) {
            h.put<uint32_t>(kTypeU32);
            h.put<uint32_t>(v);
          } else if constexpr (std::is_same_v<T, int32_t>) {
            h.put<uint32_t>(kTypeI32);
            h.put<int32_t>(v);
          } else if constexpr (std::is_same_v<T, uint64_t>) {
            h.put<uint32_t>(kTypeU64);
            h.put<uint64_t>(v);
          } else if constexpr (std::is_same_v<T, float>) {
            h.put<uint32_t>(kTypeF32);
            h.put<float>(v);
          } else if constexpr (std::is_same_v<T, bool>) {
            h.put<uint32_t>(kTypeBool);
            h.put<uint8_t>(v ? 1 : 0);
          } else if constexpr (std::is_same_v<T, StringArray>) {
            h.put<uint32_t>(kTypeArray);
            h.put<uint32_t>(kTypeString);
            h.put<uint64_t>(v.values.size());
            for (const std::string& s : v.values) h.put_string(s);
          } else if constexpr (std::is_same_v<T, std::vector<float>>) {
            h.put<uint32_t>(kTypeArray);
            h.put<uint32_t>(kTypeF32);
            h.put<uint64_t>(v.size());
            for (float x : v) h.put<float>(x);
          } else {
            static_assert(std::is_same_v<T, std::vector<int32_t>>);
            h.put<uint32_t>(kTypeArray);
            h.put<uint32_t>(kTypeI32);
            h.put<uint64_t>(v.size());
            for (int32_t x : v) h.put<int32_t>(x);
          }
        },
        value);
  }
  if (write_alignment_key) {
    h.put_string("general.alignment");
    h.put<uint32_t>(kTypeU32);
    h.put<uint32_t>(alignment_);
  }

  uint64_t offset = 0;
  std::vector<uint64_t> offsets;
  for (const WriteTensor& t : tensors_) {
    h.put_string(t.name);
    h.put<uint32_t>(static_cast<uint32_t>(t.shape.rank));
    for (int i = t.shape.rank - 1; i >= 0; --i) h.put<uint64_t>(static_cast<uint64_t>(t.shape[i]));
    h.put<uint32_t>(gguf_type_id(t.dtype));
    h.put<uint64_t>(offset);
    offsets.push_back(offset);
    offset = align_up(offset + t.nbytes(), alignment_);
  }

  uint64_t at = 0;
  const auto put = [&](const uint8_t* p, size_t n) {
    out(p, n);
    at += n;
  };
  const auto pad_to = [&](uint64_t target) {
    static const uint8_t zeros[64] = {};
    while (at < target) put(zeros, static_cast<size_t>(std::min<uint64_t>(target - at, sizeof(zeros))));
  };
  put(h.data().data(), h.data().size());
  pad_to(align_up(at, alignment_));
  const uint64_t data_start = at;
  for (size_t i = 0; i < tensors_.size(); ++i) {
    pad_to(data_start + offsets[i]);
    tensors_[i].emit(put);
  }
  pad_to(align_up(at, alignment_));
}

void GgufWriter::write(const std::string& path) const {
  OutputFile file(path);
  emit([&](const uint8_t* p, size_t n) { file.write(p, n); });
  file.close();
}

std::vector<uint8_t> GgufWriter::to_bytes() const {
  std::vector<uint8_t> bytes;
  emit([&](const uint8_t* p, size_t n) { bytes.insert(bytes.end(), p, p + n); });
  return bytes;
}

}  // namespace ferry
