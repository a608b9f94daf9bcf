#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "core/half.h"
#include "format_test_util.h"
#include "formats/gguf.h"

using namespace ferry;
using namespace ferry::testing;

namespace {

Bytes header(uint64_t n_tensors, uint64_t n_kv, uint32_t version = 3) {
  Bytes b;
  b.raw("GGUF").u32(version).u64(n_tensors).u64(n_kv);
  return b;
}

void kv_u32(Bytes& b, const std::string& key, uint32_t v) {
  b.str(key).u32(kU32).u32(v);
}
void kv_str(Bytes& b, const std::string& key, const std::string& v) {
  b.str(key).u32(kString).str(v);
}

void tensor_info(Bytes& b, const std::string& name, const std::vector<uint64_t>& ne, uint32_t type, uint64_t offset) {
  b.str(name).u32(static_cast<uint32_t>(ne.size()));
  for (uint64_t d : ne) b.u64(d);
  b.u32(type).u64(offset);
}

GgufFile parse(const std::vector<uint8_t>& bytes) {
  return GgufFile::parse(MappedFile::from_bytes("t.gguf", bytes));
}

void expect_gguf_error(const std::vector<uint8_t>& bytes, ErrorKind kind,
                       std::initializer_list<std::string_view> needles) {
  expect_error([&] { parse(bytes); }, kind, needles);
}

// One f32 tensor "w" of ne [4] (16 bytes) at data offset 0, with a name KV: the base most error
// tests modify.
std::vector<uint8_t> one_tensor_file(uint32_t type = 0, std::vector<uint64_t> ne = {4}, uint64_t offset = 0,
                                     size_t data_bytes = 16) {
  Bytes b = header(1, 1);
  kv_str(b, "general.name", "t");
  tensor_info(b, "w", ne, type, offset);
  b.pad_to(32).zeros(data_bytes);
  return b.take();
}

}  // namespace

// A file with every metadata value type and five tensors of every supported type.
class GgufValid : public ::testing::Test {
 protected:
  void SetUp() override {
    Bytes b = header(5, 19);
    kv_str(b, "general.architecture", "llama");
    b.str("k.u8").u32(kU8).u8(200);
    b.str("k.i8").u32(kI8).u8(0xfd);  // -3
    b.str("k.u16").u32(kU16).u8(0x34).u8(0x12);
    b.str("k.i16").u32(kI16).u8(0xfe).u8(0xff);  // -2
    kv_u32(b, "llama.context_length", 2048);
    b.str("k.i32").u32(kI32).i32(-5);
    b.str("k.f32").u32(kF32).f32(1.5f);
    b.str("k.bool").u32(kBool).u8(1);
    b.str("k.u64").u32(kU64).u64(1ull << 40);
    b.str("k.i64").u32(kI64).u64(static_cast<uint64_t>(-(int64_t{1} << 40)));
    b.str("k.f64").u32(kF64).f64(0.25);
    b.str("tokenizer.ggml.tokens").u32(kArray).u32(kString).u64(3).str("a").str("bc").str("");
    b.str("tokenizer.ggml.scores").u32(kArray).u32(kF32).u64(3).f32(1.0f).f32(-2.0f).f32(0.5f);
    b.str("tokenizer.ggml.token_type").u32(kArray).u32(kI32).u64(2).i32(-1).i32(7);
    b.str("k.u8s").u32(kArray).u32(kU8).u64(2).u8(1).u8(255);
    b.str("k.nested").u32(kArray).u32(kArray).u64(2);
    b.u32(kU32).u64(2).u32(1).u32(2);
    b.u32(kString).u64(1).str("deep");
    b.str("k.bools").u32(kArray).u32(kBool).u64(2).u8(0).u8(1);
    b.str("k.big").u32(kArray).u32(kU64).u64(1).u64(1ull << 33);

    tensor_info(b, "w", {4, 2}, 0, 0);        // f32 -> shape [2, 4], 32 bytes
    tensor_info(b, "q", {32, 2}, 8, 32);      // q8_0 -> [2, 32], 68 bytes
    tensor_info(b, "h", {3}, 1, 128);         // f16, 6 bytes
    tensor_info(b, "b", {2, 1, 1}, 30, 160);  // bf16 -> [1, 1, 2], 4 bytes
    tensor_info(b, "z", {32}, 2, 192);        // q4_0, 18 bytes
    end_of_infos_ = b.size();
    b.pad_to(32);
    data_offset_ = b.size();
    for (int i = 0; i < 8; ++i) b.f32(static_cast<float>(i) * 0.5f);  // w
    for (size_t i = 0; i < 96; ++i) b.u8(static_cast<uint8_t>(i));    // q (68) + padding
    const uint16_t h0 = f32_to_f16(-1.25f);
    b.u8(static_cast<uint8_t>(h0 & 0xff)).u8(static_cast<uint8_t>(h0 >> 8)).zeros(30);  // h + padding
    b.zeros(32);                                                                        // b + padding
    b.zeros(18);                                                                        // z
    bytes_ = b.take();
  }

  std::vector<uint8_t> bytes_;
  size_t end_of_infos_ = 0;
  size_t data_offset_ = 0;
};

TEST_F(GgufValid, ReadsHeaderAndTensors) {
  const GgufFile g = parse(bytes_);
  EXPECT_EQ(g.version(), 3u);
  EXPECT_EQ(g.alignment(), 32u);
  EXPECT_EQ(g.data_offset(), data_offset_);
  EXPECT_EQ(g.data_offset() % 32, 0u);
  EXPECT_GE(g.data_offset(), end_of_infos_);

  const TensorSet& set = g.tensors();
  ASSERT_EQ(set.size(), 5u);
  EXPECT_EQ(set.all()[0].name, "w");  // file order
  EXPECT_EQ(set.all()[4].name, "z");
  EXPECT_EQ(g.ggml_types(), (std::vector<uint32_t>{0, 8, 1, 30, 2}));

  const TensorRecord* w = set.find("w");
  ASSERT_NE(w, nullptr);
  EXPECT_EQ(w->dtype, DType::F32);
  EXPECT_EQ(w->shape, (Shape{2, 4}));  // ne [4, 2] reversed to outermost-first
  EXPECT_EQ(w->nbytes, 32u);
  EXPECT_EQ(w->data, w->file->data() + data_offset_);
  const Tensor wt = w->view();
  EXPECT_EQ(wt.data_as<const float>()[0], 0.0f);
  EXPECT_EQ(wt.data_as<const float>()[7], 3.5f);

  const TensorRecord* q = set.find("q");
  EXPECT_EQ(q->dtype, DType::Q8_0);
  EXPECT_EQ(q->shape, (Shape{2, 32}));
  EXPECT_EQ(q->nbytes, 68u);
  EXPECT_EQ(q->data, q->file->data() + data_offset_ + 32);
  EXPECT_EQ(q->data[5], 5);

  const TensorRecord* h = set.find("h");
  EXPECT_EQ(h->dtype, DType::F16);
  EXPECT_EQ(h->shape, (Shape{3}));
  uint16_t hb;
  std::memcpy(&hb, h->data, 2);
  EXPECT_EQ(f16_to_f32(hb), -1.25f);

  EXPECT_EQ(set.find("b")->dtype, DType::BF16);
  EXPECT_EQ(set.find("b")->shape, (Shape{1, 1, 2}));
  EXPECT_EQ(set.find("z")->dtype, DType::Q4_0);
  EXPECT_EQ(set.find("z")->nbytes, 18u);
}

TEST_F(GgufValid, TypedGetters) {
  const GgufFile g = parse(bytes_);
  EXPECT_EQ(g.keys().size(), 19u);
  EXPECT_EQ(g.keys()[0], "general.architecture");
  EXPECT_EQ(g.keys()[18], "k.big");
  EXPECT_TRUE(g.has("k.f64"));
  EXPECT_FALSE(g.has("k.none"));

  EXPECT_EQ(g.get_string("general.architecture"), "llama");
  EXPECT_EQ(g.get_u32("llama.context_length"), 2048u);
  EXPECT_EQ(g.get_u32("k.u8"), 200u);
  EXPECT_EQ(g.get_u32("k.u16"), 0x1234u);
  EXPECT_EQ(g.get_int("k.i8"), -3);
  EXPECT_EQ(g.get_int("k.i16"), -2);
  EXPECT_EQ(g.get_int("k.i32"), -5);
  EXPECT_EQ(g.get_int("k.u64"), int64_t{1} << 40);
  EXPECT_EQ(g.get_int("k.i64"), -(int64_t{1} << 40));
  EXPECT_EQ(g.get_f32("k.f32"), 1.5f);
  EXPECT_EQ(g.get_f32("k.f64"), 0.25f);
  EXPECT_TRUE(g.get_bool("k.bool"));
  EXPECT_EQ(g.get_string_array("tokenizer.ggml.tokens"), (std::vector<std::string>{"a", "bc", ""}));
  EXPECT_EQ(g.get_f32_array("tokenizer.ggml.scores"), (std::vector<float>{1.0f, -2.0f, 0.5f}));
  EXPECT_EQ(g.get_i32_array("tokenizer.ggml.token_type"), (std::vector<int32_t>{-1, 7}));
  EXPECT_EQ(g.get_i32_array("k.u8s"), (std::vector<int32_t>{1, 255}));

  const GgufValue* nested = g.find("k.nested");
  ASSERT_NE(nested, nullptr);
  EXPECT_EQ(nested->type, GgufType::Array);
  EXPECT_EQ(nested->elem_type, GgufType::Array);
  ASSERT_EQ(nested->arrays.size(), 2u);
  EXPECT_EQ(nested->arrays[0].elem_type, GgufType::U32);
  EXPECT_EQ(nested->arrays[0].count, 2u);
  ASSERT_EQ(nested->arrays[1].strings.size(), 1u);
  EXPECT_EQ(nested->arrays[1].strings[0], "deep");
  EXPECT_EQ(g.find("k.bools")->count, 2u);

  EXPECT_EQ(g.opt_u32("llama.context_length"), 2048u);
  EXPECT_EQ(g.opt_u32("nope"), std::nullopt);
  EXPECT_EQ(g.opt_string("nope"), std::nullopt);
  EXPECT_EQ(g.opt_f32("k.f32"), 1.5f);
  EXPECT_EQ(g.opt_bool("k.bool"), true);
  EXPECT_EQ(g.opt_int("k.i32"), -5);
}

TEST_F(GgufValid, GetterErrorsNameFileKeyAndActualType) {
  const GgufFile g = parse(bytes_);
  expect_error([&] { g.get_string("general.missing"); }, ErrorKind::Format, {"t.gguf", "'general.missing'", "missing"});
  expect_error([&] { g.get_u32("general.architecture"); }, ErrorKind::Format,
               {"t.gguf", "'general.architecture'", "string \"llama\""});
  expect_error([&] { g.get_u32("k.i32"); }, ErrorKind::Format, {"'k.i32'", "i32 -5"});
  expect_error([&] { g.get_u32("k.u64"); }, ErrorKind::Format, {"'k.u64'", "u64 1099511627776"});
  expect_error([&] { g.get_f32("k.u8"); }, ErrorKind::Format, {"'k.u8'", "u8 200"});
  expect_error([&] { g.get_bool("k.u8"); }, ErrorKind::Format, {"'k.u8'"});
  expect_error([&] { g.get_string("k.f32"); }, ErrorKind::Format, {"'k.f32'", "f32 1.5"});
  expect_error([&] { g.get_string_array("tokenizer.ggml.scores"); }, ErrorKind::Format,
               {"'tokenizer.ggml.scores'", "array of 3 f32"});
  expect_error([&] { g.get_f32_array("tokenizer.ggml.tokens"); }, ErrorKind::Format, {"array of 3 string"});
  expect_error([&] { g.get_i32_array("tokenizer.ggml.scores"); }, ErrorKind::Format, {"array of 3 f32"});
  expect_error([&] { g.get_i32_array("k.big"); }, ErrorKind::Format, {"'k.big'", "8589934592", "int32"});
  expect_error([&] { g.opt_u32("general.architecture"); }, ErrorKind::Format, {"'general.architecture'"});
}

TEST(Gguf, Version2IsRead) {
  Bytes b = header(0, 1, 2);
  kv_u32(b, "x", 1);
  EXPECT_EQ(parse(b.take()).version(), 2u);
}

TEST(Gguf, FromDiskFile) {
  TempDir dir("gguf");
  const std::string path = dir.write("m.gguf", one_tensor_file());
  const GgufFile g = GgufFile::open(path);
  EXPECT_EQ(g.path(), path);
  EXPECT_EQ(g.tensors().find("w")->file->path(), path);
  expect_error([&] { GgufFile::open(dir.file("none.gguf")); }, ErrorKind::Io, {"none.gguf"});
}

TEST(Gguf, BadMagic) {
  std::vector<uint8_t> bytes = one_tensor_file();
  std::memcpy(bytes.data(), "GGML", 4);
  expect_gguf_error(bytes, ErrorKind::Format, {"t.gguf", "not a GGUF file", "47474d4c"});
  expect_gguf_error({}, ErrorKind::Format, {"t.gguf", "empty"});
  expect_gguf_error({'G', 'G'}, ErrorKind::Format, {"t.gguf", "not a GGUF file"});
}

TEST(Gguf, UnsupportedVersions) {
  Bytes v1 = header(0, 0, 1);
  expect_gguf_error(v1.take(), ErrorKind::Unsupported, {"t.gguf", "version 1"});
  Bytes v4 = header(0, 0, 4);
  expect_gguf_error(v4.take(), ErrorKind::Unsupported, {"t.gguf", "version 4"});
  Bytes big_endian = header(0, 0, 0x03000000);
  expect_gguf_error(big_endian.take(), ErrorKind::Unsupported, {"t.gguf", "big-endian"});
}

TEST(Gguf, TruncatedHeaderAndMetadata) {
  Bytes b = header(0, 2);
  b.vec();
  std::vector<uint8_t> base = b.take();
  // Header itself cut short.
  expect_gguf_error(std::vector<uint8_t>(base.begin(), base.begin() + 10), ErrorKind::Format,
                    {"t.gguf", "truncated", "tensor count"});
  // Metadata promised but absent: the count cannot fit in zero bytes.
  expect_gguf_error(base, ErrorKind::Format, {"t.gguf", "metadata count", "2"});

  // A KV cut in the middle of its value.
  Bytes c = header(0, 2);
  kv_str(c, "general.architecture", "llama");
  c.str("llama.context_length").u32(kU32).u8(0).u8(8);
  expect_gguf_error(c.take(), ErrorKind::Format, {"t.gguf", "truncated", "'llama.context_length'"});

  // Every prefix of a valid file fails cleanly.
  const std::vector<uint8_t> full = one_tensor_file();
  for (size_t n = 0; n + 1 < full.size(); ++n) {
    EXPECT_THROW(parse(std::vector<uint8_t>(full.begin(), full.begin() + static_cast<ptrdiff_t>(n))), Error) << n;
  }
}

TEST(Gguf, LyingCountsFailBeforeAllocating) {
  const uint64_t huge = 1ull << 60;
  {
    Bytes b = header(0, 1);
    b.str("tokenizer.ggml.tokens").u32(kArray).u32(kString).u64(huge).str("a");
    expect_gguf_error(b.take(), ErrorKind::Format, {"t.gguf", "'tokenizer.ggml.tokens'", "1152921504606846976"});
  }
  {
    Bytes b = header(0, 1);
    b.str("tokenizer.ggml.scores").u32(kArray).u32(kF32).u64(huge).f32(1.0f);
    expect_gguf_error(b.take(), ErrorKind::Format, {"'tokenizer.ggml.scores'", "1152921504606846976"});
  }
  {
    Bytes b = header(0, 1);
    b.str("k").u32(kArray).u32(kArray).u64(huge);
    expect_gguf_error(b.take(), ErrorKind::Format, {"'k'", "1152921504606846976"});
  }
  {
    Bytes b = header(0, 1);
    b.str("general.name").u32(kString).u64(huge).raw("abc");
    expect_gguf_error(b.take(), ErrorKind::Format, {"'general.name'", "1152921504606846976"});
  }
  {
    Bytes b = header(0, 1);
    b.u64(huge).raw("general.name");
    expect_gguf_error(b.take(), ErrorKind::Format, {"t.gguf", "key length", "1152921504606846976"});
  }
  {
    Bytes b = header(0, huge);
    expect_gguf_error(b.take(), ErrorKind::Format, {"metadata count", "1152921504606846976"});
  }
  {
    Bytes b = header(huge, 0);
    expect_gguf_error(b.take(), ErrorKind::Format, {"tensor count", "1152921504606846976"});
  }
  {
    Bytes b = header(1, 0);
    b.u64(huge).raw("w").zeros(64);
    expect_gguf_error(b.take(), ErrorKind::Format, {"tensor #0", "1152921504606846976"});
  }
}

TEST(Gguf, BadValueTypes) {
  Bytes b = header(0, 1);
  b.str("k").u32(13).u32(0);
  expect_gguf_error(b.take(), ErrorKind::Format, {"'k'", "13", "not a GGUF value type"});
  Bytes c = header(0, 1);
  c.str("k").u32(kArray).u32(99).u64(0);
  expect_gguf_error(c.take(), ErrorKind::Format, {"'k'", "array element type", "99"});
  Bytes d = header(0, 1);
  d.str("k").u32(kBool).u8(2);
  expect_gguf_error(d.take(), ErrorKind::Format, {"'k'", "bool", "2"});
}

TEST(Gguf, DeeplyNestedArraysAreRefused) {
  Bytes b = header(0, 1);
  b.str("k").u32(kArray);
  for (int i = 0; i < 100; ++i) b.u32(kArray).u64(1);
  b.u32(kU8).u64(0);
  expect_gguf_error(b.take(), ErrorKind::Format, {"'k'", "nest deeper"});
}

TEST(Gguf, DuplicateKeysAndTensors) {
  Bytes b = header(0, 2);
  kv_u32(b, "x", 1);
  kv_u32(b, "x", 2);
  expect_gguf_error(b.take(), ErrorKind::Format, {"t.gguf", "'x'", "twice"});

  Bytes c = header(2, 0);
  tensor_info(c, "w", {4}, 0, 0);
  tensor_info(c, "w", {4}, 0, 32);
  c.pad_to(32).zeros(64);
  expect_gguf_error(c.take(), ErrorKind::Format, {"t.gguf", "'w'", "twice"});
}

TEST(Gguf, TensorOffsetOutsideTheFile) {
  expect_gguf_error(one_tensor_file(0, {4}, 0, 12), ErrorKind::Format, {"t.gguf", "'w'", "16 bytes", "past the end"});
  expect_gguf_error(one_tensor_file(0, {4}, 1ull << 62, 16), ErrorKind::Format, {"'w'", "4611686018427387904"});
  expect_gguf_error(one_tensor_file(0, {4}, 0xFFFFFFFFFFFFFFE0ull, 16), ErrorKind::Format, {"'w'", "past the end"});
}

TEST(Gguf, MisalignedOffset) {
  expect_gguf_error(one_tensor_file(0, {4}, 4, 32), ErrorKind::Format, {"t.gguf", "'w'", "offset 4", "alignment 32"});
}

TEST(Gguf, CustomAlignment) {
  Bytes b = header(2, 1);
  kv_u32(b, "general.alignment", 64);
  tensor_info(b, "a", {4}, 0, 0);
  tensor_info(b, "b", {4}, 0, 64);
  b.pad_to(64).zeros(80);
  const GgufFile g = parse(b.take());
  EXPECT_EQ(g.alignment(), 64u);
  EXPECT_EQ(g.data_offset() % 64, 0u);
  EXPECT_EQ(g.tensors().find("b")->data, g.tensors().find("a")->data + 64);

  Bytes c = header(1, 1);
  kv_u32(c, "general.alignment", 48);
  tensor_info(c, "a", {4}, 0, 0);
  c.pad_to(48).zeros(16);
  expect_gguf_error(c.take(), ErrorKind::Format, {"general.alignment", "48", "power of two"});

  Bytes d = header(0, 1);
  kv_str(d, "general.alignment", "32");
  expect_gguf_error(d.take(), ErrorKind::Format, {"general.alignment", "string"});

  // Offset 32 is aligned to the default but not to 64.
  Bytes e = header(1, 1);
  kv_u32(e, "general.alignment", 64);
  tensor_info(e, "a", {4}, 0, 32);
  e.pad_to(64).zeros(64);
  expect_gguf_error(e.take(), ErrorKind::Format, {"'a'", "offset 32", "alignment 64"});
}

TEST(Gguf, UnsupportedAndUnknownTypes) {
  expect_gguf_error(one_tensor_file(16, {256}, 0, 66), ErrorKind::Unsupported, {"t.gguf", "'w'", "iq2_xxs", "16"});
  expect_gguf_error(one_tensor_file(9, {32}, 0, 36), ErrorKind::Unsupported, {"'w'", "q8_1"});
  expect_gguf_error(one_tensor_file(28, {2}, 0, 16), ErrorKind::Unsupported, {"'w'", "f64"});
  expect_gguf_error(one_tensor_file(26, {4}, 0, 16), ErrorKind::Unsupported, {"'w'", "i32"});
  expect_gguf_error(one_tensor_file(99, {4}, 0, 16), ErrorKind::Format, {"t.gguf", "'w'", "99", "not a ggml type"});
}

TEST(Gguf, TooManyDimensions) {
  expect_gguf_error(one_tensor_file(0, {1, 1, 1, 1, 4}, 0, 16), ErrorKind::Format, {"t.gguf", "'w'", "n_dims 5"});
  Bytes b = header(1, 0);
  b.str("w").u32(0xFFFFFFFFu).zeros(64);
  expect_gguf_error(b.take(), ErrorKind::Format, {"'w'", "n_dims 4294967295"});
}

TEST(Gguf, QuantizedRowsMustFillBlocks) {
  expect_gguf_error(one_tensor_file(8, {16, 2}, 0, 68), ErrorKind::Format, {"'w'", "q8_0", "16", "block size 32"});
  expect_gguf_error(one_tensor_file(14, {128, 2}, 0, 210), ErrorKind::Format, {"'w'", "q6_k", "128", "block size 256"});
}

TEST(Gguf, EveryGgufWeightTypeLoadsWithItsBlockBytes) {
  // llama.cpp's type ids, names, and the bytes of a [2, one block] tensor of each.
  const struct {
    uint32_t id;
    DType dtype;
    const char* name;
    uint64_t block;
    uint64_t bytes;
  } types[] = {{2, DType::Q4_0, "q4_0", 32, 18},      {3, DType::Q4_1, "q4_1", 32, 20},
               {6, DType::Q5_0, "q5_0", 32, 22},      {7, DType::Q5_1, "q5_1", 32, 24},
               {8, DType::Q8_0, "q8_0", 32, 34},      {10, DType::Q2_K, "q2_k", 256, 84},
               {11, DType::Q3_K, "q3_k", 256, 110},   {12, DType::Q4_K, "q4_k", 256, 144},
               {13, DType::Q5_K, "q5_k", 256, 176},   {14, DType::Q6_K, "q6_k", 256, 210},
               {20, DType::IQ4_NL, "iq4_nl", 32, 18}, {23, DType::IQ4_XS, "iq4_xs", 256, 136}};
  for (const auto& t : types) {
    EXPECT_EQ(dtype_from_ggml_type(t.id), t.dtype) << t.name;
    EXPECT_EQ(ggml_type_name(t.id), t.name);
    EXPECT_EQ(dtype_name(t.dtype), t.name);
    const GgufFile g = parse(one_tensor_file(t.id, {t.block, 2}, 0, 2 * t.bytes));
    const TensorRecord* w = g.tensors().find("w");
    ASSERT_NE(w, nullptr) << t.name;
    EXPECT_EQ(w->dtype, t.dtype) << t.name;
    EXPECT_EQ(w->shape, (Shape{2, static_cast<int64_t>(t.block)})) << t.name;
    EXPECT_EQ(w->nbytes, 2 * t.bytes) << t.name;
  }
}

TEST(Gguf, HugeDimensionsOverflow) {
  expect_gguf_error(one_tensor_file(0, {1ull << 32, 1ull << 32, 16}, 0, 16), ErrorKind::Format,
                    {"'w'", "more than 2^56"});
  expect_gguf_error(one_tensor_file(0, {1ull << 63}, 0, 16), ErrorKind::Format, {"'w'", "more than 2^56"});
  // A zero dimension does not excuse the others: strides of the empty tensor would overflow.
  expect_gguf_error(one_tensor_file(0, {1ull << 31, 1ull << 31, 0}, 0, 16), ErrorKind::Format,
                    {"'w'", "more than 2^56"});
  expect_gguf_error(one_tensor_file(0, {1ull << 61}, 0, 16), ErrorKind::Format, {"'w'"});
}

TEST(Gguf, OverlappingTensors) {
  Bytes b = header(2, 0);
  tensor_info(b, "a", {16}, 0, 0);  // [0, 64)
  tensor_info(b, "b", {4}, 0, 32);  // [32, 48)
  b.pad_to(32).zeros(64);
  expect_gguf_error(b.take(), ErrorKind::Format, {"t.gguf", "'a'", "'b'", "overlap"});

  // Empty tensors overlap nothing.
  Bytes c = header(2, 0);
  tensor_info(c, "a", {16}, 0, 0);
  tensor_info(c, "e", {0}, 0, 32);
  c.pad_to(32).zeros(64);
  EXPECT_EQ(parse(c.take()).tensors().size(), 2u);
}

TEST(Gguf, NoTensorsNeedsNoDataSection) {
  Bytes b = header(0, 1);
  kv_str(b, "general.architecture", "llama");  // ends unaligned: fine without tensors
  const GgufFile g = parse(b.take());
  EXPECT_EQ(g.tensors().size(), 0u);
  EXPECT_EQ(g.get_string("general.architecture"), "llama");
}

TEST(Gguf, TypeNameTable) {
  EXPECT_EQ(ggml_type_name(0), "f32");
  EXPECT_EQ(ggml_type_name(8), "q8_0");
  EXPECT_EQ(ggml_type_name(12), "q4_k");
  EXPECT_EQ(ggml_type_name(30), "bf16");
  EXPECT_EQ(ggml_type_name(35), "tq2_0");
  EXPECT_EQ(ggml_type_name(1000), std::nullopt);
  EXPECT_EQ(dtype_from_ggml_type(2), DType::Q4_0);
  EXPECT_EQ(dtype_from_ggml_type(12), DType::Q4_K);
  EXPECT_EQ(dtype_from_ggml_type(16), std::nullopt);  // iq2_xxs: not loaded
}
