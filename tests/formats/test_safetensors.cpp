#include <gtest/gtest.h>

#include <cstring>

#include "core/half.h"
#include "format_test_util.h"
#include "formats/safetensors.h"

using namespace ferry;
using namespace ferry::testing;

namespace {

// Parses a file made of `header` and `data_bytes` of data, in memory under the name "t.safetensors".
TensorSet parse(const std::string& header, size_t data_bytes) {
  return read_safetensors_file(MappedFile::from_bytes("t.safetensors", safetensors_bytes(header, data_bytes)));
}

void expect_format_error(const std::string& header, size_t data_bytes, std::initializer_list<std::string_view> needles,
                         ErrorKind kind = ErrorKind::Format) {
  expect_error([&] { parse(header, data_bytes); }, kind, needles);
}

}  // namespace

TEST(Safetensors, ReadsTensorsDtypesShapesAndMetadata) {
  // a: f32 [2, 3] at [0, 24); b: f16 [4] at [24, 32); c: bf16 [1, 2] at [32, 36); s: f32 scalar at
  // [36, 40); e: an empty f32 [0, 5] at [40, 40).
  const std::string header = R"({"__metadata__":{"format":"pt","note":"x"},)"
                             R"("b":{"dtype":"F16","shape":[4],"data_offsets":[24,32]},)"
                             R"("a":{"dtype":"F32","shape":[2,3],"data_offsets":[0,24]},)"
                             R"("c":{"dtype":"BF16","shape":[1,2],"data_offsets":[32,36]},)"
                             R"("s":{"dtype":"F32","shape":[],"data_offsets":[36,40]},)"
                             R"("e":{"dtype":"F32","shape":[0,5],"data_offsets":[40,40]}})";
  const std::vector<uint8_t> bytes = safetensors_bytes(header, 40);
  TensorSet set = read_safetensors_file(MappedFile::from_bytes("t.safetensors", bytes));
  ASSERT_EQ(set.size(), 5u);
  EXPECT_EQ(set.metadata().at("format"), "pt");
  EXPECT_EQ(set.metadata().at("note"), "x");

  const size_t data_start = 8 + header.size();
  const TensorRecord* a = set.find("a");
  ASSERT_NE(a, nullptr);
  EXPECT_EQ(a->dtype, DType::F32);
  EXPECT_EQ(a->shape, (Shape{2, 3}));
  EXPECT_EQ(a->nbytes, 24u);
  EXPECT_EQ(a->data, a->file->data() + data_start);
  EXPECT_EQ(std::memcmp(a->data, bytes.data() + data_start, 24), 0);

  const TensorRecord* b = set.find("b");
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(b->dtype, DType::F16);
  EXPECT_EQ(b->shape, (Shape{4}));
  EXPECT_EQ(b->data, b->file->data() + data_start + 24);

  const TensorRecord* c = set.find("c");
  ASSERT_NE(c, nullptr);
  EXPECT_EQ(c->dtype, DType::BF16);
  EXPECT_EQ(c->shape, (Shape{1, 2}));
  EXPECT_EQ(c->nbytes, 4u);

  const TensorRecord* s = set.find("s");
  ASSERT_NE(s, nullptr);
  EXPECT_EQ(s->shape.rank, 0);
  EXPECT_EQ(s->nbytes, 4u);

  const TensorRecord* e = set.find("e");
  ASSERT_NE(e, nullptr);
  EXPECT_EQ(e->shape, (Shape{0, 5}));
  EXPECT_EQ(e->nbytes, 0u);

  const Tensor view = a->view();
  EXPECT_EQ(view.shape(), (Shape{2, 3}));
  EXPECT_EQ(std::memcmp(view.data(), bytes.data() + data_start, 24), 0);
}

TEST(Safetensors, ViewReadsFloatValuesFromADiskFile) {
  TempDir dir("safetensors");
  Bytes data;
  data.f32(0.5f).f32(-1.0f).f32(2.0f).f32(42.0f);
  const uint16_t h = f32_to_f16(3.5f);
  data.u8(static_cast<uint8_t>(h & 0xff)).u8(static_cast<uint8_t>(h >> 8));
  const std::string header =
      R"({"w":{"dtype":"F32","shape":[2,2],"data_offsets":[0,16]},"h":{"dtype":"F16","shape":[1],"data_offsets":[16,18]}})";
  Bytes file;
  file.u64(header.size()).raw(header).raw(data.vec());
  const std::string path = dir.write("model.safetensors", file.vec());

  TensorSet set = open_safetensors(path);
  const Tensor w = set.find("w")->view();
  EXPECT_EQ(w.data_as<const float>()[0], 0.5f);
  EXPECT_EQ(w.data_as<const float>()[3], 42.0f);
  const Tensor hv = set.find("h")->view();
  EXPECT_EQ(f16_to_f32(hv.data_as<const uint16_t>()[0]), 3.5f);
  EXPECT_EQ(set.find("w")->file->path(), path);
}

TEST(Safetensors, FileShorterThanTheLengthField) {
  expect_error(
      [] {
        read_safetensors_file(MappedFile::from_bytes("t.safetensors", {1, 2, 3}));
      },
      ErrorKind::Format, {"t.safetensors", "3 bytes"});
  TempDir dir("safetensors");
  const std::string path = dir.write("empty.safetensors", {});
  expect_error([&] { open_safetensors(path); }, ErrorKind::Format, {path, "0 bytes"});
}

TEST(Safetensors, HeaderLengthPastEndOfFile) {
  Bytes b;
  b.u64(1000).raw("{}");
  expect_error([&] { read_safetensors_file(MappedFile::from_bytes("t.safetensors", b.take())); }, ErrorKind::Format,
               {"t.safetensors", "header length 1000", "10 bytes"});
}

TEST(Safetensors, AbsurdHeaderLengthIsRefusedBeforeParsing) {
  Bytes b;
  b.u64(1ull << 40).raw("{}");
  expect_error([&] { read_safetensors_file(MappedFile::from_bytes("t.safetensors", b.take())); }, ErrorKind::Format,
               {"t.safetensors", "1099511627776"});
}

TEST(Safetensors, TruncatedFileCutInsideTheHeader) {
  const std::string header = R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})";
  std::vector<uint8_t> bytes = safetensors_bytes(header, 8);
  bytes.resize(8 + header.size() / 2);
  expect_error([&] { read_safetensors_file(MappedFile::from_bytes("t.safetensors", bytes)); }, ErrorKind::Format,
               {"t.safetensors", "runs past the end"});
}

TEST(Safetensors, InvalidJsonNamesFileAndPosition) {
  expect_format_error(R"({"a": {"dtype": "F32", )", 0, {"t.safetensors", "not valid JSON", "byte"});
  expect_format_error("\xff\xfe", 0, {"t.safetensors", "not valid JSON"});
  expect_format_error("{\"a\":{\"dtype\":\"F\xc3\"}}", 0, {"t.safetensors", "not valid JSON"});  // bad UTF-8
}

TEST(Safetensors, HeaderMustBeAnObject) {
  expect_format_error("[1, 2]", 0, {"t.safetensors", "an array", "expected a JSON object"});
  expect_format_error(R"("x")", 0, {"t.safetensors", "a string"});
}

TEST(Safetensors, DeepNestingIsRefused) {
  std::string header = R"({"a":)" + std::string(200, '[') + std::string(200, ']') + "}";
  expect_format_error(header, 0, {"t.safetensors", "nests deeper"});
  // Deep nesting that never closes must not take the parser down either.
  expect_format_error(std::string(100000, '['), 0, {"t.safetensors"});
}

TEST(Safetensors, DuplicateTensorNameInOneHeader) {
  expect_format_error(
      R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})",
      8, {"t.safetensors", "'a'", "twice"});
}

TEST(Safetensors, EntryMissingFields) {
  expect_format_error(R"({"w":{"shape":[1],"data_offsets":[0,4]}})", 4, {"t.safetensors", "'w'", "\"dtype\""});
  expect_format_error(R"({"w":{"dtype":"F32","data_offsets":[0,4]}})", 4, {"t.safetensors", "'w'", "\"shape\""});
  expect_format_error(R"({"w":{"dtype":"F32","shape":[1]}})", 4, {"t.safetensors", "'w'", "\"data_offsets\""});
  expect_format_error(R"({"w":[1,2]})", 4, {"t.safetensors", "'w'", "expected an object"});
}

TEST(Safetensors, UnknownDtypeIsFormatError) {
  expect_format_error(R"({"w":{"dtype":"F99","shape":[1],"data_offsets":[0,4]}})", 4,
                      {"t.safetensors", "'w'", "unknown dtype", "F99"});
  expect_format_error(R"({"w":{"dtype":"f32","shape":[1],"data_offsets":[0,4]}})", 4, {"'w'", "unknown dtype"});
  expect_format_error(R"({"w":{"dtype":7,"shape":[1],"data_offsets":[0,4]}})", 4, {"'w'", "dtype is an integer 7"});
}

TEST(Safetensors, KnownButUnsupportedDtypesAreUnsupported) {
  for (const char* dtype : {"I64", "F64", "U8", "BOOL", "I32", "F8_E4M3"}) {
    const std::string header =
        std::string(R"({"position_ids":{"dtype":")") + dtype + R"(","shape":[8],"data_offsets":[0,8]}})";
    expect_format_error(header, 8, {"t.safetensors", "'position_ids'", dtype}, ErrorKind::Unsupported);
  }
}

TEST(Safetensors, BadShapes) {
  expect_format_error(R"({"w":{"dtype":"F32","shape":[-2,3],"data_offsets":[0,24]}})", 24,
                      {"t.safetensors", "'w'", "-2", "non-negative"});
  expect_format_error(R"({"w":{"dtype":"F32","shape":[2.5],"data_offsets":[0,10]}})", 10, {"'w'", "2.5"});
  expect_format_error(R"({"w":{"dtype":"F32","shape":["2"],"data_offsets":[0,8]}})", 8, {"'w'", "a string"});
  expect_format_error(R"({"w":{"dtype":"F32","shape":4,"data_offsets":[0,16]}})", 16, {"'w'", "shape is"});
  expect_format_error(R"({"w":{"dtype":"F32","shape":[1,1,1,1,2],"data_offsets":[0,8]}})", 8,
                      {"t.safetensors", "'w'", "5 dimensions"}, ErrorKind::Unsupported);
  // Element counts overflowing 64 bits, or large enough to overflow byte strides even with a zero dimension.
  expect_format_error(R"({"w":{"dtype":"F32","shape":[4294967296,4294967296,16],"data_offsets":[0,8]}})", 8,
                      {"'w'", "more than 2^56"});
  expect_format_error(R"({"w":{"dtype":"F32","shape":[0,2147483648,2147483648],"data_offsets":[0,0]}})", 8,
                      {"'w'", "more than 2^56"});
  expect_format_error(R"({"w":{"dtype":"F32","shape":[18446744073709551615],"data_offsets":[0,8]}})", 8,
                      {"'w'", "more than 2^56"});
  // Large dimensions are fine when another one is zero and the rest stay small.
  EXPECT_EQ(
      parse(R"({"w":{"dtype":"F32","shape":[0,1099511627776],"data_offsets":[0,0]}})", 0).find("w")->view().shape(),
      (Shape{0, 1099511627776}));
}

TEST(Safetensors, BadDataOffsets) {
  expect_format_error(R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[0]}})", 4,
                      {"t.safetensors", "'w'", "expected [begin, end]"});
  expect_format_error(R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[0,4,8]}})", 8, {"'w'", "[begin, end]"});
  expect_format_error(R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[8,4]}})", 8,
                      {"'w'", "[8, 4]", "begin after end"});
  expect_format_error(R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[-4,0]}})", 8, {"'w'", "begin", "-4"});
  expect_format_error(R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[0,4.0]}})", 8, {"'w'", "end", "4.0"});
}

TEST(Safetensors, TensorOffsetsOutsideTheFile) {
  expect_format_error(R"({"w":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}})", 12,
                      {"t.safetensors", "'w'", "[0, 16]", "12 bytes"});
  expect_format_error(R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[18446744073709551612,18446744073709551615]}})",
                      12, {"'w'", "18446744073709551615"});
}

TEST(Safetensors, ShapeAndDtypeSizeMismatch) {
  expect_format_error(R"({"w":{"dtype":"F32","shape":[2,3],"data_offsets":[0,20]}})", 24,
                      {"t.safetensors", "'w'", "[2, 3]", "24 bytes", "20 bytes"});
  expect_format_error(R"({"w":{"dtype":"BF16","shape":[4],"data_offsets":[0,16]}})", 16, {"'w'", "8 bytes"});
}

TEST(Safetensors, OverlappingTensors) {
  expect_format_error(
      R"({"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]},"b":{"dtype":"F32","shape":[2],"data_offsets":[12,20]}})",
      20, {"t.safetensors", "'a'", "'b'", "overlap", "[0, 16]", "[12, 20]"});
  // The same bytes for two tensors is an overlap too; empty tensors overlap nothing.
  expect_format_error(
      R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"b":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})",
      4, {"overlap"});
  EXPECT_EQ(parse(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
                  R"("z":{"dtype":"F32","shape":[0],"data_offsets":[2,2]}})",
                  4)
                .size(),
            2u);
}

TEST(Safetensors, MetadataMustBeStrings) {
  expect_format_error(R"({"__metadata__":{"format":1}})", 0, {"t.safetensors", "__metadata__", "'format'"});
  expect_format_error(R"({"__metadata__":[]})", 0, {"__metadata__", "expected an object"});
}

TEST(Safetensors, ParseHeaderWithoutAFile) {
  const std::string header = R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})";
  const std::vector<uint8_t> bytes = safetensors_bytes(header, 10);
  const SafetensorsHeader h = parse_safetensors_header(bytes.data(), bytes.size(), "mem");
  EXPECT_EQ(h.data_start, 8 + header.size());
  EXPECT_EQ(h.data_size, 10u);
  ASSERT_EQ(h.tensors.size(), 1u);
  EXPECT_EQ(h.tensors[0].name, "a");
  EXPECT_EQ(h.tensors[0].begin, 0u);
  EXPECT_EQ(h.tensors[0].end, 8u);
}

// ---- directories and sharded checkpoints ----

namespace {

std::string tensor_json(const std::string& name, int64_t elements, uint64_t begin) {
  return "\"" + name + "\":{\"dtype\":\"F32\",\"shape\":[" + std::to_string(elements) + "],\"data_offsets\":[" +
         std::to_string(begin) + "," + std::to_string(begin + 4 * static_cast<uint64_t>(elements)) + "]}";
}

// A shard holding f32 vectors of 2 elements each, back to back.
std::vector<uint8_t> shard(const std::vector<std::string>& names) {
  std::string header = "{";
  for (size_t i = 0; i < names.size(); ++i) {
    if (i > 0) header += ",";
    header += tensor_json(names[i], 2, 8 * i);
  }
  header += "}";
  return safetensors_bytes(header, 8 * names.size());
}

std::string index_json(const std::vector<std::pair<std::string, std::string>>& map) {
  std::string s = R"({"metadata":{"total_size":32},"weight_map":{)";
  for (size_t i = 0; i < map.size(); ++i) {
    if (i > 0) s += ",";
    s += "\"" + map[i].first + "\":\"" + map[i].second + "\"";
  }
  return s + "}}";
}

}  // namespace

TEST(SafetensorsSharded, OpensEveryShardOnceFromDirOrIndex) {
  TempDir dir("safetensors");
  dir.write("model-00001-of-00002.safetensors", shard({"a", "b"}));
  dir.write("model-00002-of-00002.safetensors", shard({"c", "d"}));
  const std::string index =
      dir.write_text("model.safetensors.index.json", index_json({{"a", "model-00001-of-00002.safetensors"},
                                                                 {"b", "model-00001-of-00002.safetensors"},
                                                                 {"c", "model-00002-of-00002.safetensors"},
                                                                 {"d", "model-00002-of-00002.safetensors"}}));
  for (const std::string& path : {dir.path().string(), index}) {
    TensorSet set = open_safetensors(path);
    ASSERT_EQ(set.size(), 4u);
    EXPECT_EQ(set.find("a")->file, set.find("b")->file);  // one mapping per shard
    EXPECT_EQ(set.find("c")->file, set.find("d")->file);
    EXPECT_NE(set.find("a")->file, set.find("c")->file);
    EXPECT_EQ(set.find("c")->file->path(), dir.file("model-00002-of-00002.safetensors"));
    EXPECT_EQ(set.find("d")->shape, (Shape{2}));
  }
}

TEST(SafetensorsSharded, DuplicateTensorAcrossShardsNamesBothFiles) {
  TempDir dir("safetensors");
  dir.write("s1.safetensors", shard({"a", "b"}));
  dir.write("s2.safetensors", shard({"b", "c"}));
  dir.write_text("model.safetensors.index.json",
                 index_json({{"a", "s1.safetensors"}, {"b", "s1.safetensors"}, {"c", "s2.safetensors"}}));
  expect_error([&] { open_safetensors(dir.path().string()); }, ErrorKind::Format,
               {"'b'", dir.file("s1.safetensors"), dir.file("s2.safetensors")});
}

TEST(SafetensorsSharded, IndexPointingToMissingShard) {
  TempDir dir("safetensors");
  dir.write("s1.safetensors", shard({"a"}));
  dir.write_text("model.safetensors.index.json", index_json({{"a", "s1.safetensors"}, {"b", "s2.safetensors"}}));
  expect_error([&] { open_safetensors(dir.path().string()); }, ErrorKind::Io,
               {"model.safetensors.index.json", "s2.safetensors", "'b'", "missing"});
}

TEST(SafetensorsSharded, IndexNamingATensorTheShardLacks) {
  TempDir dir("safetensors");
  dir.write("s1.safetensors", shard({"a"}));
  dir.write_text("model.safetensors.index.json", index_json({{"a", "s1.safetensors"}, {"ghost", "s1.safetensors"}}));
  expect_error([&] { open_safetensors(dir.path().string()); }, ErrorKind::Format,
               {"model.safetensors.index.json", "'ghost'", "s1.safetensors"});
}

TEST(SafetensorsSharded, TensorInAnotherShardThanTheIndexSays) {
  TempDir dir("safetensors");
  dir.write("s1.safetensors", shard({"a", "b"}));
  dir.write("s2.safetensors", shard({"c"}));
  dir.write_text("model.safetensors.index.json",
                 index_json({{"a", "s1.safetensors"}, {"b", "s2.safetensors"}, {"c", "s2.safetensors"}}));
  expect_error([&] { open_safetensors(dir.path().string()); }, ErrorKind::Format,
               {"'b'", "s1.safetensors", "says it is in 's2.safetensors'"});
}

TEST(SafetensorsSharded, TensorMissingFromTheIndex) {
  TempDir dir("safetensors");
  dir.write("s1.safetensors", shard({"a", "extra"}));
  dir.write_text("model.safetensors.index.json", index_json({{"a", "s1.safetensors"}}));
  expect_error([&] { open_safetensors(dir.path().string()); }, ErrorKind::Format, {"'extra'", "not in the index"});
}

TEST(SafetensorsSharded, BadIndexFiles) {
  TempDir dir("safetensors");
  dir.write("s1.safetensors", shard({"a"}));
  const std::string index = dir.file("model.safetensors.index.json");
  dir.write_text("model.safetensors.index.json", R"({"weight_map": {"a": "s1.safetensors",}})");
  expect_error([&] { open_safetensors(index); }, ErrorKind::Format, {index, "not valid JSON"});
  dir.write_text("model.safetensors.index.json", R"({"metadata": {}})");
  expect_error([&] { open_safetensors(index); }, ErrorKind::Format, {index, "weight_map"});
  dir.write_text("model.safetensors.index.json", R"({"weight_map": {"a": 3}})");
  expect_error([&] { open_safetensors(index); }, ErrorKind::Format, {index, "'a'", "an integer 3"});
  dir.write_text("model.safetensors.index.json", R"({"weight_map": {"a": "../s1.safetensors"}})");
  expect_error([&] { open_safetensors(index); }, ErrorKind::Format, {index, "'a'", "../s1.safetensors"});
  dir.write_text("model.safetensors.index.json", R"({"weight_map": {"a": "/etc/passwd"}})");
  expect_error([&] { open_safetensors(index); }, ErrorKind::Format, {"/etc/passwd"});
}

TEST(SafetensorsDirectory, SingleFileAndEmptyDirectory) {
  TempDir dir("safetensors");
  expect_error([&] { open_safetensors(dir.path().string()); }, ErrorKind::Io,
               {dir.path().string(), "no model.safetensors"});
  dir.write("other.safetensors", shard({"x"}));
  expect_error([&] { open_safetensors(dir.path().string()); }, ErrorKind::Io, {"found: other.safetensors"});
  dir.write("model.safetensors", shard({"x", "y"}));
  TensorSet set = open_safetensors(dir.path().string());
  EXPECT_EQ(set.size(), 2u);
  EXPECT_EQ(set.find("y")->file->path(), dir.file("model.safetensors"));
  expect_error([&] { open_safetensors(dir.file("missing.safetensors")); }, ErrorKind::Io, {"missing.safetensors"});
}
