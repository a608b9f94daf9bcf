#include "formats/gguf.h"

#include <algorithm>
#include <bit>
#include <cstring>
#include <iterator>
#include <limits>

#include "core/error.h"
#include "formats/shape_limits.h"

namespace ferry {

static_assert(std::endian::native == std::endian::little, "the GGUF reader decodes little-endian values in place");

namespace {

constexpr uint32_t kMinVersion = 2;
constexpr uint32_t kMaxVersion = 3;
constexpr uint64_t kDefaultAlignment = 32;
constexpr int kMaxArrayDepth = 8;             // arrays of arrays of ...; real files use one level
constexpr uint64_t kMinKvBytes = 13;          // key length (8) + value type (4) + smallest value (1)
constexpr uint64_t kMinTensorInfoBytes = 24;  // name length (8) + n_dims (4) + type (4) + offset (8)
constexpr uint32_t kMaxGgmlDims = 4;

// ggml type names by id; empty for ids ggml never assigned. Removed types keep their names so a
// file that uses one gets "unsupported", not "corrupt".
constexpr std::string_view kGgmlTypeNames[] = {
    "f32",        "f16",        "q4_0",       "q4_1",  "q4_2",     "q4_3",     "q5_0",     "q5_1",    "q8_0",
    "q8_1",       "q2_k",       "q3_k",       "q4_k",  "q5_k",     "q6_k",     "q8_k",     "iq2_xxs", "iq2_xs",
    "iq3_xxs",    "iq1_s",      "iq4_nl",     "iq3_s", "iq2_s",    "iq4_xs",   "i8",       "i16",     "i32",
    "i64",        "f64",        "iq1_m",      "bf16",  "q4_0_4_4", "q4_0_4_8", "q4_0_8_8", "tq1_0",   "tq2_0",
    "iq4_nl_4_4", "iq4_nl_4_8", "iq4_nl_8_8", "mxfp4", "nvfp4",    "q1_0",     "q2_0",
};

size_t fixed_size(GgufType type) {
  switch (type) {
    case GgufType::U8:
    case GgufType::I8:
    case GgufType::Bool:
      return 1;
    case GgufType::U16:
    case GgufType::I16:
      return 2;
    case GgufType::U32:
    case GgufType::I32:
    case GgufType::F32:
      return 4;
    case GgufType::U64:
    case GgufType::I64:
    case GgufType::F64:
      return 8;
    case GgufType::String:
    case GgufType::Array:
      return 0;
  }
  return 0;
}

bool is_integer_type(GgufType t) {
  switch (t) {
    case GgufType::U8:
    case GgufType::I8:
    case GgufType::U16:
    case GgufType::I16:
    case GgufType::U32:
    case GgufType::I32:
    case GgufType::U64:
    case GgufType::I64:
      return true;
    default:
      return false;
  }
}

bool is_signed_type(GgufType t) {
  return t == GgufType::I8 || t == GgufType::I16 || t == GgufType::I32 || t == GgufType::I64;
}

template <typename T>
T load(const uint8_t* p) {
  T v;
  std::memcpy(&v, p, sizeof(T));
  return v;
}

// The integer at `p` of type `t`, as raw 64-bit two's complement (signed types sign-extended).
uint64_t load_integer_bits(GgufType t, const uint8_t* p) {
  switch (t) {
    case GgufType::U8:
      return p[0];
    case GgufType::I8:
      return static_cast<uint64_t>(static_cast<int64_t>(static_cast<int8_t>(p[0])));
    case GgufType::U16:
      return load<uint16_t>(p);
    case GgufType::I16:
      return static_cast<uint64_t>(static_cast<int64_t>(load<int16_t>(p)));
    case GgufType::U32:
      return load<uint32_t>(p);
    case GgufType::I32:
      return static_cast<uint64_t>(static_cast<int64_t>(load<int32_t>(p)));
    case GgufType::U64:
      return load<uint64_t>(p);
    case GgufType::I64:
      return load<uint64_t>(p);
    default:
      return 0;
  }
}

std::optional<int64_t> integer_as_int64(GgufType t, uint64_t bits) {
  if (is_signed_type(t)) return static_cast<int64_t>(bits);
  if (bits > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) return std::nullopt;
  return static_cast<int64_t>(bits);
}

std::string quoted(std::string_view s) {
  constexpr size_t kMax = 60;
  std::string out = "\"";
  for (char c : s.substr(0, kMax)) {
    const auto u = static_cast<unsigned char>(c);
    if (u < 0x20 || u == 0x7f) {
      out += fmt::format("\\x{:02x}", u);
    } else {
      out += c;
    }
  }
  out += s.size() > kMax ? "\"..." : "\"";
  return out;
}

// Bounds-checked reading of the header. `context_` names what is being read for messages
// ("key 'general.name'", "tensor 'blk.0.attn_q.weight'").
class Cursor {
 public:
  Cursor(const uint8_t* data, size_t size, const std::string& file) : data_(data), size_(size), file_(file) {}

  size_t pos() const { return pos_; }
  size_t remaining() const { return size_ - pos_; }
  void set_context(std::string context) { context_ = std::move(context); }
  const std::string& file() const { return file_; }
  const std::string& context() const { return context_; }

  const uint8_t* take(uint64_t n, std::string_view what) {
    if (n > remaining()) {
      fail(ErrorKind::Format,
           "{}: truncated {} of {} at offset {}: it needs {} bytes but only {} remain; the file is incomplete or "
           "corrupt",
           file_, what, context_, pos_, n, remaining());
    }
    const uint8_t* p = data_ + pos_;
    pos_ += static_cast<size_t>(n);
    return p;
  }
  uint32_t u32(std::string_view what) { return load<uint32_t>(take(4, what)); }
  uint64_t u64(std::string_view what) { return load<uint64_t>(take(8, what)); }
  std::string_view string(std::string_view what) {
    const size_t at = pos_;
    const uint64_t len = u64(what);
    if (len > remaining()) {
      fail(ErrorKind::Format, "{}: {} of {} at offset {} claims {} bytes but only {} remain in the file", file_, what,
           context_, at, len, remaining());
    }
    const auto* p = reinterpret_cast<const char*>(take(len, what));
    return std::string_view(p, static_cast<size_t>(len));
  }
  // A count of items of at least `min_item_bytes` each: checked against the remaining bytes so
  // that a lying count fails here instead of in an allocation.
  uint64_t count(std::string_view what, uint64_t min_item_bytes) {
    const size_t at = pos_;
    const uint64_t n = u64(what);
    if (min_item_bytes > 0 && n > remaining() / min_item_bytes) {
      fail(ErrorKind::Format,
           "{}: {} of {} at offset {} is {}, but the {} remaining bytes can hold at most {} (>= {} bytes each)", file_,
           what, context_, at, n, remaining(), remaining() / min_item_bytes, min_item_bytes);
    }
    return n;
  }

 private:
  const uint8_t* data_;
  size_t size_;
  size_t pos_ = 0;
  const std::string& file_;
  std::string context_;
};

GgufType read_type(Cursor& c, std::string_view what) {
  const size_t at = c.pos();
  const uint32_t id = c.u32(what);
  if (id > static_cast<uint32_t>(GgufType::F64)) {
    fail(ErrorKind::Format, "{}: {} of {} at offset {} is {}, not a GGUF value type (0..12)", c.file(), what,
         c.context(), at, id);
  }
  return static_cast<GgufType>(id);
}

void check_bool_byte(const Cursor& c, uint8_t byte, size_t at) {
  if (byte > 1) {
    fail(ErrorKind::Format, "{}: bool of {} at offset {} is {}, expected 0 or 1", c.file(), c.context(), at, byte);
  }
}

GgufValue read_value(Cursor& c, GgufType type, int depth);

void read_array(Cursor& c, GgufValue& v, int depth) {
  if (depth >= kMaxArrayDepth) {
    fail(ErrorKind::Format, "{}: arrays of {} nest deeper than {} levels", c.file(), c.context(), kMaxArrayDepth);
  }
  v.elem_type = read_type(c, "array element type");
  const size_t elem = fixed_size(v.elem_type);
  if (elem > 0) {
    v.count = c.count("array length", elem);
    const size_t at = c.pos();
    v.raw = c.take(v.count * elem, "array data");
    if (v.elem_type == GgufType::Bool) {
      for (uint64_t i = 0; i < v.count; ++i) check_bool_byte(c, v.raw[i], at + static_cast<size_t>(i));
    }
  } else if (v.elem_type == GgufType::String) {
    v.count = c.count("array length", 8);
    v.strings.reserve(static_cast<size_t>(v.count));
    for (uint64_t i = 0; i < v.count; ++i) v.strings.push_back(c.string("string length"));
  } else {
    v.count = c.count("array length", 12);  // each element: element type (4) + length (8)
    v.arrays.reserve(static_cast<size_t>(v.count));
    for (uint64_t i = 0; i < v.count; ++i) v.arrays.push_back(read_value(c, GgufType::Array, depth + 1));
  }
}

GgufValue read_value(Cursor& c, GgufType type, int depth) {
  GgufValue v;
  v.type = type;
  switch (type) {
    case GgufType::U8:
    case GgufType::I8:
    case GgufType::U16:
    case GgufType::I16:
    case GgufType::U32:
    case GgufType::I32:
    case GgufType::U64:
    case GgufType::I64:
      v.bits = load_integer_bits(type, c.take(fixed_size(type), "value"));
      break;
    case GgufType::F32:
      v.number = load<float>(c.take(4, "value"));
      break;
    case GgufType::F64:
      v.number = load<double>(c.take(8, "value"));
      break;
    case GgufType::Bool: {
      const size_t at = c.pos();
      const uint8_t byte = *c.take(1, "value");
      check_bool_byte(c, byte, at);
      v.boolean = byte != 0;
      break;
    }
    case GgufType::String:
      v.string = c.string("string length");
      break;
    case GgufType::Array:
      read_array(c, v, depth);
      break;
  }
  return v;
}

struct TensorInfo {
  std::string name;
  Shape shape;
  uint32_t ggml_type = 0;
  DType dtype = DType::F32;
  uint64_t offset = 0;  // relative to the data section
  size_t nbytes = 0;
};

TensorInfo read_tensor_info(Cursor& c, uint64_t index, uint64_t alignment) {
  TensorInfo t;
  c.set_context(fmt::format("tensor #{}", index));
  t.name = std::string(c.string("name length"));
  c.set_context(fmt::format("tensor '{}'", t.name));
  const std::string& file = c.file();

  const uint32_t n_dims = c.u32("n_dims");
  if (n_dims > kMaxGgmlDims) {
    fail(ErrorKind::Format, "{}: tensor '{}' has n_dims {}, more than GGUF's maximum of {}", file, t.name, n_dims,
         kMaxGgmlDims);
  }
  uint64_t ne[kMaxGgmlDims] = {1, 1, 1, 1};
  for (uint32_t i = 0; i < n_dims; ++i) ne[i] = c.u64("dimension");
  const auto ne_str = [&] {
    std::string s = "[";
    for (uint32_t i = 0; i < n_dims; ++i) {
      if (i > 0) s += ", ";
      s += std::to_string(ne[i]);
    }
    return s + "]";
  };
  const std::optional<uint64_t> nonzero = nonzero_element_count(ne, static_cast<int>(n_dims));
  if (!nonzero) {
    fail(ErrorKind::Format, "{}: tensor '{}' has dimensions ne={} with more than 2^56 elements; the header is corrupt",
         file, t.name, ne_str());
  }
  t.shape.rank = static_cast<int>(n_dims);
  for (uint32_t i = 0; i < n_dims; ++i) t.shape.dims[n_dims - 1 - i] = static_cast<int64_t>(ne[i]);

  t.ggml_type = c.u32("type");
  t.offset = c.u64("offset");

  const std::optional<std::string_view> type_name = ggml_type_name(t.ggml_type);
  if (!type_name) {
    fail(ErrorKind::Format, "{}: tensor '{}' has ggml type id {}, which is not a ggml type", file, t.name, t.ggml_type);
  }
  const std::optional<DType> dtype = dtype_from_ggml_type(t.ggml_type);
  if (!dtype) {
    fail(ErrorKind::Unsupported,
         "{}: tensor '{}' has type {} (id {}), which ferry does not load (supported: f32, f16, bf16, q8_0, q4_0, "
         "q4_1, q5_0, q5_1, iq4_nl, q2_k, q3_k, q4_k, q5_k, q6_k, iq4_xs); requantize the model to one of those",
         file, t.name, *type_name, t.ggml_type);
  }
  t.dtype = *dtype;
  const int block = dtype_traits(t.dtype).block_size;
  if (ne[0] % static_cast<uint64_t>(block) != 0) {
    fail(ErrorKind::Format, "{}: tensor '{}' of type {} has rows of {} elements, not a multiple of its block size {}",
         file, t.name, *type_name, ne[0], block);
  }
  const uint64_t numel = t.shape.numel() == 0 ? 0 : *nonzero;
  const std::optional<size_t> nbytes = dtype_bytes(t.dtype, numel);
  if (!nbytes) {
    fail(ErrorKind::Format, "{}: tensor '{}' with ne={} of type {} has a byte size that overflows", file, t.name,
         ne_str(), *type_name);
  }
  t.nbytes = *nbytes;
  if (t.offset % alignment != 0) {
    fail(ErrorKind::Format, "{}: tensor '{}' has data offset {}, not a multiple of the alignment {}", file, t.name,
         t.offset, alignment);
  }
  return t;
}

}  // namespace

std::string_view gguf_type_name(GgufType type) {
  switch (type) {
    case GgufType::U8:
      return "u8";
    case GgufType::I8:
      return "i8";
    case GgufType::U16:
      return "u16";
    case GgufType::I16:
      return "i16";
    case GgufType::U32:
      return "u32";
    case GgufType::I32:
      return "i32";
    case GgufType::F32:
      return "f32";
    case GgufType::Bool:
      return "bool";
    case GgufType::String:
      return "string";
    case GgufType::Array:
      return "array";
    case GgufType::U64:
      return "u64";
    case GgufType::I64:
      return "i64";
    case GgufType::F64:
      return "f64";
  }
  return "?";
}

std::optional<std::string_view> ggml_type_name(uint32_t type_id) {
  if (type_id >= std::size(kGgmlTypeNames)) return std::nullopt;
  return kGgmlTypeNames[type_id];
}

std::optional<DType> dtype_from_ggml_type(uint32_t type_id) {
  switch (type_id) {
    case kGgmlTypeF32:
      return DType::F32;
    case kGgmlTypeF16:
      return DType::F16;
    case kGgmlTypeQ4_0:
      return DType::Q4_0;
    case kGgmlTypeQ4_1:
      return DType::Q4_1;
    case kGgmlTypeQ5_0:
      return DType::Q5_0;
    case kGgmlTypeQ5_1:
      return DType::Q5_1;
    case kGgmlTypeQ8_0:
      return DType::Q8_0;
    case kGgmlTypeQ2_K:
      return DType::Q2_K;
    case kGgmlTypeQ3_K:
      return DType::Q3_K;
    case kGgmlTypeQ4_K:
      return DType::Q4_K;
    case kGgmlTypeQ5_K:
      return DType::Q5_K;
    case kGgmlTypeQ6_K:
      return DType::Q6_K;
    case kGgmlTypeIQ4_NL:
      return DType::IQ4_NL;
    case kGgmlTypeIQ4_XS:
      return DType::IQ4_XS;
    case kGgmlTypeBF16:
      return DType::BF16;
    default:
      return std::nullopt;
  }
}

bool GgufValue::is_integer() const {
  return is_integer_type(type);
}
bool GgufValue::is_signed() const {
  return is_signed_type(type);
}

std::optional<int64_t> GgufValue::as_int64() const {
  if (!is_integer()) return std::nullopt;
  return integer_as_int64(type, bits);
}

std::optional<uint64_t> GgufValue::as_uint64() const {
  if (!is_integer()) return std::nullopt;
  if (is_signed() && static_cast<int64_t>(bits) < 0) return std::nullopt;
  return bits;
}

std::string GgufValue::describe() const {
  const std::string_view name = gguf_type_name(type);
  switch (type) {
    case GgufType::F32:
      return fmt::format("f32 {}", static_cast<float>(number));
    case GgufType::F64:
      return fmt::format("f64 {}", number);
    case GgufType::Bool:
      return fmt::format("bool {}", boolean);
    case GgufType::String:
      return fmt::format("string {}", quoted(string));
    case GgufType::Array:
      return fmt::format("array of {} {}", count, gguf_type_name(elem_type));
    default:
      if (is_signed()) return fmt::format("{} {}", name, static_cast<int64_t>(bits));
      return fmt::format("{} {}", name, bits);
  }
}

GgufFile GgufFile::open(const std::string& path) {
  return parse(MappedFile::open(path));
}

GgufFile GgufFile::parse(std::shared_ptr<const MappedFile> file) {
  if (!file) fail(ErrorKind::Internal, "GgufFile::parse: no file");
  GgufFile g;
  g.file_ = file;
  const std::string& name = file->path();
  Cursor c(file->data(), file->size(), name);
  c.set_context("the header");

  if (file->size() < 4 || std::memcmp(file->data(), "GGUF", 4) != 0) {
    std::string seen;
    for (size_t i = 0; i < std::min<size_t>(4, file->size()); ++i) seen += fmt::format("{:02x}", file->data()[i]);
    fail(ErrorKind::Format, "{}: not a GGUF file: it starts with bytes {} instead of the magic \"GGUF\" (47475546)",
         name, seen.empty() ? std::string("(none: the file is empty)") : seen);
  }
  c.take(4, "magic");
  g.version_ = c.u32("version");
  if (g.version_ < kMinVersion || g.version_ > kMaxVersion) {
    if (g.version_ == 1) {
      fail(ErrorKind::Unsupported,
           "{}: GGUF version 1 is not supported (versions 2 and 3 are); reconvert the model "
           "with a current llama.cpp",
           name);
    }
    if ((g.version_ & 0xFFFFu) == 0 && (g.version_ >> 16) != 0) {
      fail(ErrorKind::Unsupported,
           "{}: GGUF version field is {:#x}: the file looks big-endian, which is not "
           "supported",
           name, g.version_);
    }
    fail(ErrorKind::Unsupported, "{}: GGUF version {} is not supported (versions 2 and 3 are)", name, g.version_);
  }
  const uint64_t tensor_count = c.u64("tensor count");
  const uint64_t kv_count = c.count("metadata count", kMinKvBytes);
  if (tensor_count > c.remaining() / kMinTensorInfoBytes) {
    fail(ErrorKind::Format, "{}: tensor count {} is impossible: the {} bytes after the header hold at most {} tensors",
         name, tensor_count, c.remaining(), c.remaining() / kMinTensorInfoBytes);
  }

  g.kvs_.reserve(static_cast<size_t>(kv_count));
  for (uint64_t i = 0; i < kv_count; ++i) {
    c.set_context(fmt::format("metadata entry #{}", i));
    std::string key(c.string("key length"));
    c.set_context(fmt::format("key '{}'", key));
    const GgufType type = read_type(c, "value type");
    GgufValue value = read_value(c, type, 0);
    if (!g.kv_index_.emplace(key, g.kvs_.size()).second) {
      fail(ErrorKind::Format, "{}: metadata key '{}' appears twice", name, key);
    }
    g.kvs_.emplace_back(std::move(key), std::move(value));
  }

  g.alignment_ = kDefaultAlignment;
  if (const GgufValue* a = g.find("general.alignment")) {
    const std::optional<uint64_t> v = a->as_uint64();
    if (!v || *v == 0 || (*v & (*v - 1)) != 0 || *v > (1u << 30)) {
      fail(ErrorKind::Format, "{}: general.alignment is {}, expected a power of two (default 32)", name, a->describe());
    }
    g.alignment_ = *v;
  }

  std::vector<TensorInfo> infos;
  infos.reserve(static_cast<size_t>(tensor_count));
  for (uint64_t i = 0; i < tensor_count; ++i) infos.push_back(read_tensor_info(c, i, g.alignment_));

  const uint64_t end_of_infos = c.pos();
  g.data_offset_ = (end_of_infos + g.alignment_ - 1) / g.alignment_ * g.alignment_;
  const uint64_t size = file->size();
  for (const TensorInfo& t : infos) {
    if (g.data_offset_ > size || t.offset > size - g.data_offset_ || t.nbytes > size - g.data_offset_ - t.offset) {
      fail(ErrorKind::Format,
           "{}: tensor '{}' ({} bytes at data offset {}, file offset {}) runs past the end of the file ({} bytes); "
           "the file is truncated or its header is wrong",
           name, t.name, t.nbytes, t.offset, g.data_offset_ + t.offset, size);
    }
  }

  std::vector<const TensorInfo*> by_offset;
  for (const TensorInfo& t : infos) {
    if (t.nbytes > 0) by_offset.push_back(&t);
  }
  std::sort(by_offset.begin(), by_offset.end(), [](const TensorInfo* a, const TensorInfo* b) {
    return a->offset != b->offset ? a->offset < b->offset : a->nbytes < b->nbytes;
  });
  for (size_t i = 1; i < by_offset.size(); ++i) {
    const TensorInfo& prev = *by_offset[i - 1];
    const TensorInfo& cur = *by_offset[i];
    if (cur.offset < prev.offset + prev.nbytes) {
      fail(ErrorKind::Format, "{}: tensors '{}' (data offset {}, {} bytes) and '{}' (data offset {}, {} bytes) overlap",
           name, prev.name, prev.offset, prev.nbytes, cur.name, cur.offset, cur.nbytes);
    }
  }

  g.ggml_types_.reserve(infos.size());
  for (TensorInfo& t : infos) {
    TensorRecord record;
    record.name = std::move(t.name);
    record.dtype = t.dtype;
    record.shape = t.shape;
    record.data = file->data() + g.data_offset_ + t.offset;
    record.nbytes = t.nbytes;
    record.file = file;
    g.tensors_.add(std::move(record));
    g.ggml_types_.push_back(t.ggml_type);
  }
  return g;
}

const GgufValue* GgufFile::find(const std::string& key) const {
  const auto it = kv_index_.find(key);
  return it == kv_index_.end() ? nullptr : &kvs_[it->second].second;
}

std::vector<std::string> GgufFile::keys() const {
  std::vector<std::string> out;
  out.reserve(kvs_.size());
  for (const auto& kv : kvs_) out.push_back(kv.first);
  return out;
}

void GgufFile::wrong_type(const std::string& key, const GgufValue& value, std::string_view wanted) const {
  fail(ErrorKind::Format, "{}: metadata key '{}' is {}, expected {}", path(), key, value.describe(), wanted);
}

const GgufValue& GgufFile::require(const std::string& key, std::string_view wanted) const {
  const GgufValue* v = find(key);
  if (v == nullptr) fail(ErrorKind::Format, "{}: metadata key '{}' ({}) is missing", path(), key, wanted);
  return *v;
}

namespace {
template <typename T>
std::optional<T> opt_from(const GgufFile& g, const std::string& key, T (GgufFile::*get)(const std::string&) const) {
  if (!g.has(key)) return std::nullopt;
  return (g.*get)(key);
}
}  // namespace

std::string GgufFile::get_string(const std::string& key) const {
  const GgufValue& v = require(key, "a string");
  if (v.type != GgufType::String) wrong_type(key, v, "a string");
  return std::string(v.string);
}

uint32_t GgufFile::get_u32(const std::string& key) const {
  const GgufValue& v = require(key, "an integer");
  const std::optional<uint64_t> u = v.as_uint64();
  if (!u || *u > std::numeric_limits<uint32_t>::max()) wrong_type(key, v, "an integer in [0, 2^32)");
  return static_cast<uint32_t>(*u);
}

int64_t GgufFile::get_int(const std::string& key) const {
  const GgufValue& v = require(key, "an integer");
  const std::optional<int64_t> i = v.as_int64();
  if (!i) wrong_type(key, v, "an integer that fits int64");
  return *i;
}

float GgufFile::get_f32(const std::string& key) const {
  const GgufValue& v = require(key, "a float");
  if (v.type != GgufType::F32 && v.type != GgufType::F64) wrong_type(key, v, "an f32 or f64");
  return static_cast<float>(v.number);
}

bool GgufFile::get_bool(const std::string& key) const {
  const GgufValue& v = require(key, "a bool");
  if (v.type != GgufType::Bool) wrong_type(key, v, "a bool");
  return v.boolean;
}

std::vector<std::string> GgufFile::get_string_array(const std::string& key) const {
  const GgufValue& v = require(key, "an array of strings");
  if (v.type != GgufType::Array || v.elem_type != GgufType::String) wrong_type(key, v, "an array of strings");
  return std::vector<std::string>(v.strings.begin(), v.strings.end());
}

std::vector<float> GgufFile::get_f32_array(const std::string& key) const {
  const GgufValue& v = require(key, "an array of floats");
  if (v.type != GgufType::Array || (v.elem_type != GgufType::F32 && v.elem_type != GgufType::F64)) {
    wrong_type(key, v, "an array of f32 or f64");
  }
  std::vector<float> out(static_cast<size_t>(v.count));
  if (v.elem_type == GgufType::F32) {
    if (!out.empty()) std::memcpy(out.data(), v.raw, out.size() * sizeof(float));
  } else {
    for (size_t i = 0; i < out.size(); ++i) out[i] = static_cast<float>(load<double>(v.raw + 8 * i));
  }
  return out;
}

std::vector<int32_t> GgufFile::get_i32_array(const std::string& key) const {
  const GgufValue& v = require(key, "an array of integers");
  if (v.type != GgufType::Array || !is_integer_type(v.elem_type)) wrong_type(key, v, "an array of integers");
  const size_t elem = fixed_size(v.elem_type);
  std::vector<int32_t> out(static_cast<size_t>(v.count));
  for (size_t i = 0; i < out.size(); ++i) {
    const uint64_t bits = load_integer_bits(v.elem_type, v.raw + elem * i);
    const std::optional<int64_t> x = integer_as_int64(v.elem_type, bits);
    if (!x || *x < std::numeric_limits<int32_t>::min() || *x > std::numeric_limits<int32_t>::max()) {
      fail(ErrorKind::Format, "{}: metadata key '{}' element {} is {} {}, which does not fit int32", path(), key, i,
           gguf_type_name(v.elem_type),
           is_signed_type(v.elem_type) ? std::to_string(static_cast<int64_t>(bits)) : std::to_string(bits));
    }
    out[i] = static_cast<int32_t>(*x);
  }
  return out;
}

std::optional<std::string> GgufFile::opt_string(const std::string& key) const {
  return opt_from(*this, key, &GgufFile::get_string);
}
std::optional<uint32_t> GgufFile::opt_u32(const std::string& key) const {
  return opt_from(*this, key, &GgufFile::get_u32);
}
std::optional<int64_t> GgufFile::opt_int(const std::string& key) const {
  return opt_from(*this, key, &GgufFile::get_int);
}
std::optional<float> GgufFile::opt_f32(const std::string& key) const {
  return opt_from(*this, key, &GgufFile::get_f32);
}
std::optional<bool> GgufFile::opt_bool(const std::string& key) const {
  return opt_from(*this, key, &GgufFile::get_bool);
}

}  // namespace ferry
