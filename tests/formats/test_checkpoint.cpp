#include <gtest/gtest.h>

#include <cstring>

#include "format_test_util.h"
#include "formats/checkpoint.h"

using namespace ferry;
using namespace ferry::testing;

TEST(MappedFile, MapsBytesReadOnly) {
  TempDir dir("checkpoint");
  const std::string path = dir.write("abc.bin", {1, 2, 3, 250});
  auto file = MappedFile::open(path);
  ASSERT_EQ(file->size(), 4u);
  EXPECT_EQ(file->path(), path);
  EXPECT_EQ(file->data()[0], 1);
  EXPECT_EQ(file->data()[3], 250);
}

TEST(MappedFile, EmptyFileMapsWithSizeZero) {
  TempDir dir("checkpoint");
  auto file = MappedFile::open(dir.write("empty.bin", {}));
  EXPECT_EQ(file->size(), 0u);
}

TEST(MappedFile, MissingFileIsIoErrorNamingPathAndReason) {
  TempDir dir("checkpoint");
  const std::string path = dir.file("nope.safetensors");
  expect_error([&] { MappedFile::open(path); }, ErrorKind::Io, {path, "No such file"});
}

TEST(MappedFile, DirectoryIsIoError) {
  TempDir dir("checkpoint");
  expect_error([&] { MappedFile::open(dir.path().string()); }, ErrorKind::Io, {dir.path().string(), "directory"});
}

TEST(MappedFile, FromBytesOwnsACopy) {
  std::vector<uint8_t> bytes = {9, 8, 7};
  auto file = MappedFile::from_bytes("mem.bin", bytes);
  bytes[0] = 0;
  ASSERT_EQ(file->size(), 3u);
  EXPECT_EQ(file->data()[0], 9);
  EXPECT_EQ(file->path(), "mem.bin");
  EXPECT_EQ(MappedFile::from_bytes("none", {})->size(), 0u);
}

TEST(TensorRecord, ViewSeesTheBytesAndKeepsTheMappingAlive) {
  TempDir dir("checkpoint");
  Bytes b;
  b.zeros(16).f32(1.5f).f32(-2.0f).f32(3.25f).f32(0.0f).f32(7.0f).f32(8.0f);
  const std::string path = dir.write("w.bin", b.vec());
  Tensor t;
  {
    auto file = MappedFile::open(path);
    TensorRecord r;
    r.name = "w";
    r.dtype = DType::F32;
    r.shape = Shape{2, 3};
    r.data = file->data() + 16;
    r.nbytes = 24;
    r.file = file;
    t = r.view();
  }  // the record and our handle on the file are gone; the tensor still holds the mapping
  std::filesystem::remove(path);
  ASSERT_EQ(t.shape(), (Shape{2, 3}));
  EXPECT_EQ(t.dtype(), DType::F32);
  EXPECT_EQ(t.name(), "w");
  EXPECT_EQ(t.device(), nullptr);
  const float* v = t.data_as<const float>();
  EXPECT_EQ(v[0], 1.5f);
  EXPECT_EQ(v[1], -2.0f);
  EXPECT_EQ(v[5], 8.0f);
}

TEST(TensorSet, FindsByNameAndRefusesDuplicatesNamingBothFiles) {
  auto a = MappedFile::from_bytes("a.safetensors", std::vector<uint8_t>(8));
  auto b = MappedFile::from_bytes("b.safetensors", std::vector<uint8_t>(8));
  TensorSet set;
  TensorRecord r;
  r.name = "x";
  r.shape = Shape{2};
  r.nbytes = 8;
  r.data = a->data();
  r.file = a;
  set.add(r);
  EXPECT_EQ(set.size(), 1u);
  ASSERT_NE(set.find("x"), nullptr);
  EXPECT_EQ(set.find("x")->file->path(), "a.safetensors");
  EXPECT_EQ(set.find("y"), nullptr);

  TensorRecord dup = r;
  dup.file = b;
  expect_error([&] { set.add(dup); }, ErrorKind::Format, {"'x'", "a.safetensors", "b.safetensors"});
  expect_error([&] { set.add(r); }, ErrorKind::Format, {"'x'", "a.safetensors", "twice"});
  EXPECT_EQ(set.size(), 1u);
}

TEST(TensorSet, MetadataFirstValueWins) {
  TensorSet set;
  set.add_metadata("format", "pt");
  set.add_metadata("format", "tf");
  ASSERT_EQ(set.metadata().size(), 1u);
  EXPECT_EQ(set.metadata().at("format"), "pt");
}
