// The safetensors and GGUF writers: files they write parse with the project's readers and hold the
// given bytes; rewriting a golden file reproduces it byte for byte; bad input is a typed error.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "core/error.h"
#include "formats/gguf.h"
#include "formats/gguf_writer.h"
#include "formats/safetensors.h"
#include "formats/safetensors_writer.h"
#include "tools/test_support.h"

using namespace ferry;
namespace fs = std::filesystem;

namespace {

std::vector<uint8_t> pattern(size_t n, uint8_t salt) {
  std::vector<uint8_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<uint8_t>(i * 31 + salt);
  return v;
}

uint64_t read_u64_le(const std::vector<uint8_t>& b, size_t at) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | b[at + static_cast<size_t>(i)];
  return v;
}

}  // namespace

TEST(SafetensorsWriter, WritesWhatTheReaderReads) {
  test::TempDir dir("st_basic");
  const std::vector<uint8_t> a = pattern(3 * 5 * 4, 1);      // f32 [3, 5]
  const std::vector<uint8_t> b = pattern(7 * 2, 2);          // f16 [7]
  const std::vector<uint8_t> c = pattern(2 * 2 * 3 * 2, 3);  // bf16 [2, 2, 3]
  std::vector<WriteTensor> tensors(3);
  tensors[0] = {"a.weight", DType::F32, Shape{3, 5}, a.data(), {}, {}};
  tensors[1] = {"b.bias", DType::F16, Shape{7}, nullptr, b, {}};
  tensors[2] = {"c", DType::BF16, Shape{2, 2, 3}, nullptr, {}, [&](uint8_t* out, size_t n) {
                  ASSERT_EQ(n, c.size());
                  std::memcpy(out, c.data(), n);
                }};
  const std::string path = dir.file("model.safetensors");
  write_safetensors(path, tensors, {{"format", "pt"}});

  // The raw layout: u64 header length, JSON padded with spaces, data 8-byte aligned and in order.
  const std::vector<uint8_t> raw = test::read_file(path);
  const uint64_t header_len = read_u64_le(raw, 0);
  EXPECT_EQ((8 + header_len) % 8, 0u);
  const std::string header(raw.begin() + 8, raw.begin() + 8 + static_cast<long>(header_len));
  const size_t last_brace = header.rfind('}');
  EXPECT_EQ(header.find_first_not_of(' ', last_brace + 1), std::string::npos);
  const nlohmann::json j = nlohmann::json::parse(header);
  EXPECT_EQ(j["__metadata__"]["format"], "pt");
  EXPECT_EQ(j["a.weight"]["dtype"], "F32");
  EXPECT_EQ(j["b.bias"]["dtype"], "F16");
  EXPECT_EQ(j["c"]["dtype"], "BF16");
  EXPECT_EQ(j["c"]["shape"], nlohmann::json::array({2, 2, 3}));
  EXPECT_EQ(j["a.weight"]["data_offsets"], nlohmann::json::array({0, 60}));
  EXPECT_EQ(j["b.bias"]["data_offsets"], nlohmann::json::array({60, 74}));
  EXPECT_EQ(raw.size(), 8 + header_len + a.size() + b.size() + c.size());

  const TensorSet set = open_safetensors(path);
  ASSERT_EQ(set.all().size(), 3u);
  const std::vector<std::pair<const char*, const std::vector<uint8_t>*>> expect = {
      {"a.weight", &a}, {"b.bias", &b}, {"c", &c}};
  for (const auto& [name, bytes] : expect) {
    const TensorRecord* r = set.find(name);
    ASSERT_NE(r, nullptr) << name;
    ASSERT_EQ(r->nbytes, bytes->size()) << name;
    EXPECT_EQ(std::memcmp(r->data, bytes->data(), bytes->size()), 0) << name;
  }
  EXPECT_EQ(set.find("c")->shape, (Shape{2, 2, 3}));
  EXPECT_EQ(set.find("b.bias")->dtype, DType::F16);
}

TEST(SafetensorsWriter, WritesI32TensorsAndNoMetadataWhenNoneIsGiven) {
  // ferry's reader loads float weights only, so the I32 entry is checked in the raw header.
  test::TempDir dir("st_i32");
  const std::vector<uint8_t> ids = pattern(4 * 4, 4);
  write_safetensors(dir.file("ids.safetensors"), {{"ids", DType::I32, Shape{4}, ids.data(), {}, {}}});
  const std::vector<uint8_t> raw = test::read_file(dir.file("ids.safetensors"));
  const uint64_t header_len = read_u64_le(raw, 0);
  const nlohmann::json j =
      nlohmann::json::parse(std::string(raw.begin() + 8, raw.begin() + 8 + static_cast<long>(header_len)));
  EXPECT_FALSE(j.contains("__metadata__"));
  EXPECT_EQ(j["ids"]["dtype"], "I32");
  EXPECT_EQ(j["ids"]["data_offsets"], nlohmann::json::array({0, 16}));
  ASSERT_EQ(raw.size(), 8 + header_len + 16);
  EXPECT_TRUE(std::equal(ids.begin(), ids.end(), raw.begin() + 8 + static_cast<long>(header_len)));
}

TEST(SafetensorsWriter, RewritingAGoldenFileReproducesItByteForByte) {
  // The golden safetensors were written by Python in tensor order with {"format": "pt"} metadata:
  // the same tensors in the same order must give the same bytes.
  const std::string golden = test::golden_dir() + "/text/llama/hf/model.safetensors";
  const TensorSet set = open_safetensors(golden);
  const std::vector<uint8_t> original = test::read_file(golden);
  const nlohmann::ordered_json header = nlohmann::ordered_json::parse(
      std::string(original.begin() + 8, original.begin() + 8 + static_cast<long>(read_u64_le(original, 0))));
  std::vector<WriteTensor> tensors;
  for (const auto& [name, entry] : header.items()) {
    if (name == "__metadata__") continue;
    const TensorRecord* r = set.find(name);
    ASSERT_NE(r, nullptr);
    tensors.push_back({r->name, r->dtype, r->shape, r->data, {}, {}});
  }
  test::TempDir dir("st_golden");
  write_safetensors(dir.file("copy.safetensors"), tensors, {{"format", "pt"}});
  EXPECT_TRUE(test::read_file(dir.file("copy.safetensors")) == original);
}

TEST(SafetensorsWriter, ShardsWithAnIndexThatTheReaderFollows) {
  test::TempDir dir("st_shards");
  std::vector<std::vector<uint8_t>> data;
  std::vector<WriteTensor> tensors;
  for (int i = 0; i < 7; ++i) data.push_back(pattern(static_cast<size_t>(16 * (i + 1) * 4), static_cast<uint8_t>(i)));
  for (int i = 0; i < 7; ++i) {
    tensors.push_back(
        {"t" + std::to_string(i), DType::F32, Shape{16, i + 1}, data[static_cast<size_t>(i)].data(), {}, {}});
  }
  const std::vector<std::string> files = write_safetensors_sharded(dir.str(), tensors, 3);
  ASSERT_EQ(files.size(), 3u);
  EXPECT_EQ(files[0], "model-00001-of-00003.safetensors");
  EXPECT_EQ(files[2], "model-00003-of-00003.safetensors");
  const nlohmann::json index = nlohmann::json::parse(test::read_text(dir.file("model.safetensors.index.json")));
  uint64_t total = 0;
  for (const auto& d : data) total += d.size();
  EXPECT_EQ(index["metadata"]["total_size"], total);
  ASSERT_EQ(index["weight_map"].size(), 7u);
  std::set<std::string> used;
  for (const auto& [name, file] : index["weight_map"].items()) used.insert(file.get<std::string>());
  EXPECT_EQ(used.size(), 3u);  // every shard holds something

  const TensorSet set = open_safetensors(dir.str());
  ASSERT_EQ(set.all().size(), 7u);
  for (int i = 0; i < 7; ++i) {
    const TensorRecord* r = set.find("t" + std::to_string(i));
    ASSERT_NE(r, nullptr);
    EXPECT_EQ(std::memcmp(r->data, data[static_cast<size_t>(i)].data(), r->nbytes), 0);
    EXPECT_EQ(fs::path(r->file->path()).filename().string(), index["weight_map"]["t" + std::to_string(i)]);
  }
  EXPECT_THROW(write_safetensors_sharded(dir.str(), tensors, 8), Error);
  EXPECT_THROW(write_safetensors_sharded(dir.str(), tensors, 0), Error);
}

TEST(SafetensorsWriter, RefusesBadInputWithTypedErrors) {
  test::TempDir dir("st_errors");
  const std::vector<uint8_t> bytes = pattern(64 * 34 / 32, 0);
  auto kind_of = [](const auto& fn) {
    try {
      fn();
    } catch (const Error& e) {
      return e.kind();
    }
    return ErrorKind::Internal;  // nothing thrown
  };
  const std::string path = dir.file("x.safetensors");
  std::vector<uint8_t> f32(16);
  EXPECT_EQ(kind_of([&] {
              write_safetensors(path, {{"q", DType::Q8_0, Shape{2, 32}, bytes.data(), {}, {}}});
            }),
            ErrorKind::Unsupported);
  EXPECT_EQ(kind_of([&] {
              write_safetensors(path, {{"a", DType::F32, Shape{4}, f32.data(), {}, {}},
                                       {"a", DType::F32, Shape{4}, f32.data(), {}, {}}});
            }),
            ErrorKind::Usage);
  EXPECT_EQ(kind_of([&] {
              write_safetensors(path, {{"a", DType::F32, Shape{5}, nullptr, f32, {}}});
            }),
            ErrorKind::Usage);  // 16 bytes for 5 floats
  EXPECT_EQ(kind_of([&] {
              write_safetensors(path, {{"a", DType::F32, Shape{4}, nullptr, {}, {}}});
            }),
            ErrorKind::Usage);     // no bytes at all
  EXPECT_FALSE(fs::exists(path));  // nothing half-written is left behind

  const std::string missing = dir.file("no/such/dir/x.safetensors");
  try {
    write_safetensors(missing, {{"a", DType::F32, Shape{4}, f32.data(), {}, {}}});
    FAIL() << "writing into a missing directory must throw";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::Io);
    EXPECT_NE(std::string(e.what()).find(missing), std::string::npos) << e.what();
  }
}

TEST(GgufWriter, WritesWhatTheReaderReads) {
  test::TempDir dir("gguf_basic");
  GgufWriter w;
  w.set_string("general.architecture", "llama");
  w.set_u32("llama.block_count", 7);
  w.set_i32("test.negative", -5);
  w.set_u64("test.big", 1ull << 40);
  w.set_f32("llama.rope.freq_base", 10000.5f);
  w.set_bool("test.flag", true);
  w.set_string_array("tokenizer.ggml.tokens", {"a", "", "Ġthe"});
  w.set_f32_array("test.floats", {1.5f, -2.0f});
  w.set_i32_array("tokenizer.ggml.token_type", {1, 3, 5});
  w.set_u32("llama.block_count", 2);  // replaces the value, keeps the position

  const std::vector<uint8_t> m = pattern(3 * 5 * 4, 9);       // f32 [3, 5]
  const std::vector<uint8_t> q = pattern(4 * 2 * 34, 10);     // q8_0 [4, 64]
  const std::vector<uint8_t> h = pattern(2 * 3 * 4 * 2, 11);  // f16 [2, 3, 4]
  w.add_tensor("m.weight", DType::F32, Shape{3, 5}, m);
  w.add_tensor("q.weight", DType::Q8_0, Shape{4, 64}, q);
  w.add_tensor(WriteTensor{"h", DType::F16, Shape{2, 3, 4}, nullptr, {}, [&](uint8_t* out, size_t n) {
                             ASSERT_EQ(n, h.size());
                             std::memcpy(out, h.data(), n);
                           }});
  const std::string path = dir.file("x.gguf");
  w.write(path);

  const GgufFile f = GgufFile::open(path);
  EXPECT_EQ(f.version(), 3u);
  EXPECT_EQ(f.alignment(), 32u);
  EXPECT_EQ(f.data_offset() % 32, 0u);
  EXPECT_FALSE(f.has("general.alignment"));  // 32 is GGUF's default, as llama.cpp's files leave it out
  const std::vector<std::string> keys = f.keys();
  ASSERT_EQ(keys.size(), 9u);
  EXPECT_EQ(keys[0], "general.architecture");
  EXPECT_EQ(keys[1], "llama.block_count");
  EXPECT_EQ(f.get_string("general.architecture"), "llama");
  EXPECT_EQ(f.get_u32("llama.block_count"), 2u);
  EXPECT_EQ(f.find("llama.block_count")->type, GgufType::U32);
  EXPECT_EQ(f.get_int("test.negative"), -5);
  EXPECT_EQ(f.find("test.negative")->type, GgufType::I32);
  EXPECT_EQ(f.find("test.big")->type, GgufType::U64);
  EXPECT_EQ(f.get_int("test.big"), int64_t{1} << 40);
  EXPECT_EQ(f.get_f32("llama.rope.freq_base"), 10000.5f);
  EXPECT_TRUE(f.get_bool("test.flag"));
  EXPECT_EQ(f.get_string_array("tokenizer.ggml.tokens"), (std::vector<std::string>{"a", "", "Ġthe"}));
  EXPECT_EQ(f.get_f32_array("test.floats"), (std::vector<float>{1.5f, -2.0f}));
  EXPECT_EQ(f.get_i32_array("tokenizer.ggml.token_type"), (std::vector<int32_t>{1, 3, 5}));
  EXPECT_EQ(f.find("tokenizer.ggml.token_type")->elem_type, GgufType::I32);

  ASSERT_EQ(f.tensors().all().size(), 3u);
  const std::vector<std::tuple<const char*, DType, Shape, const std::vector<uint8_t>*>> expect = {
      {"m.weight", DType::F32, Shape{3, 5}, &m},
      {"q.weight", DType::Q8_0, Shape{4, 64}, &q},
      {"h", DType::F16, Shape{2, 3, 4}, &h}};
  for (const auto& [name, dtype, shape, bytes] : expect) {
    const TensorRecord* r = f.tensors().find(name);
    ASSERT_NE(r, nullptr) << name;
    EXPECT_EQ(r->dtype, dtype) << name;
    EXPECT_EQ(r->shape, shape) << name;
    EXPECT_EQ((r->data - r->file->data() - f.data_offset()) % 32, 0) << name;
    ASSERT_EQ(r->nbytes, bytes->size());
    EXPECT_EQ(std::memcmp(r->data, bytes->data(), bytes->size()), 0) << name;
  }
  EXPECT_EQ(f.ggml_types(), (std::vector<uint32_t>{0, 8, 1}));

  // ne is written innermost-first: the raw tensor info of "m.weight" holds ne = [5, 3].
  const std::vector<uint8_t> raw = test::read_file(path);
  const std::string needle = "m.weight";
  const auto it = std::search(raw.begin(), raw.end(), needle.begin(), needle.end());
  ASSERT_NE(it, raw.end());
  const size_t at = static_cast<size_t>(it - raw.begin()) + needle.size();
  EXPECT_EQ(raw[at], 2);  // n_dims (u32)
  EXPECT_EQ(read_u64_le(raw, at + 4), 5u);
  EXPECT_EQ(read_u64_le(raw, at + 12), 3u);
}

TEST(GgufWriter, CustomAlignmentIsWrittenAndHonoured) {
  test::TempDir dir("gguf_align");
  GgufWriter w;
  w.set_alignment(64);
  w.set_string("general.architecture", "llama");
  w.add_tensor("a", DType::F32, Shape{3}, pattern(12, 1));
  w.add_tensor("b", DType::F32, Shape{5}, pattern(20, 2));
  w.write(dir.file("x.gguf"));
  const GgufFile f = GgufFile::open(dir.file("x.gguf"));
  EXPECT_EQ(f.get_u32("general.alignment"), 64u);
  EXPECT_EQ(f.alignment(), 64u);
  EXPECT_EQ(f.data_offset() % 64, 0u);
  const TensorRecord* b = f.tensors().find("b");
  ASSERT_NE(b, nullptr);
  EXPECT_EQ((b->data - b->file->data()) % 64, 0);
  EXPECT_THROW(w.set_alignment(24), Error);
}

TEST(GgufWriter, RewritingAGoldenFileReproducesItByteForByte) {
  // Written by llama.cpp's gguf-py: same keys, types, tensors and order must give the same bytes.
  for (const char* name : {"llama", "llama_q8_0", "chatglm"}) {
    const std::string golden = test::golden_dir() + "/text/" + name + "/model.gguf";
    const GgufFile g = GgufFile::open(golden);
    GgufWriter w;
    for (const std::string& key : g.keys()) {
      const GgufValue& v = *g.find(key);
      switch (v.type) {
        case GgufType::String:
          w.set_string(key, std::string(v.string));
          break;
        case GgufType::U32:
          w.set_u32(key, g.get_u32(key));
          break;
        case GgufType::F32:
          w.set_f32(key, g.get_f32(key));
          break;
        case GgufType::Bool:
          w.set_bool(key, g.get_bool(key));
          break;
        case GgufType::Array:
          if (v.elem_type == GgufType::String) {
            w.set_string_array(key, g.get_string_array(key));
          } else if (v.elem_type == GgufType::F32) {
            w.set_f32_array(key, g.get_f32_array(key));
          } else {
            ASSERT_EQ(v.elem_type, GgufType::I32) << key;
            w.set_i32_array(key, g.get_i32_array(key));
          }
          break;
        default:
          FAIL() << name << ": unexpected type for " << key;
      }
    }
    for (const TensorRecord& r : g.tensors().all()) {
      w.add_tensor(WriteTensor{r.name, r.dtype, r.shape, r.data, {}, {}});
    }
    test::TempDir dir("gguf_golden");
    w.write(dir.file("copy.gguf"));
    EXPECT_TRUE(test::read_file(dir.file("copy.gguf")) == test::read_file(golden)) << name;
  }
}

TEST(GgufWriter, RefusesBadInputWithTypedErrors) {
  GgufWriter w;
  EXPECT_THROW(w.add_tensor(std::string(64, 'x'), DType::F32, Shape{1}, pattern(4, 0)), Error);  // name too long
  EXPECT_NO_THROW(w.add_tensor(std::string(63, 'x'), DType::F32, Shape{1}, pattern(4, 0)));
  EXPECT_THROW(w.add_tensor(std::string(63, 'x'), DType::F32, Shape{1}, pattern(4, 0)), Error);  // duplicate
  EXPECT_THROW(w.add_tensor("scalar", DType::F32, Shape{}, pattern(4, 0)), Error);               // rank 0
  EXPECT_THROW(w.add_tensor("short", DType::F32, Shape{2}, pattern(4, 0)), Error);               // 4 bytes for 2 floats
  EXPECT_THROW(w.add_tensor("rows", DType::Q8_0, Shape{2, 48}, pattern(3 * 34, 0)), Error);  // rows not whole blocks
  try {
    w.write("/nonexistent-dir/x.gguf");
    FAIL() << "writing into a missing directory must throw";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::Io);
    EXPECT_NE(std::string(e.what()).find("/nonexistent-dir/x.gguf"), std::string::npos);
  }
}
