// Malformed image inputs, each a typed error naming the file and the problem: missing, empty, not
// an image, truncated PNG, truncated JPEG, zero-sized, and a decompression bomb refused from its
// header before any pixel is decoded. Also: a JPEG round trip, and the prompt's image spans.
#include <gtest/gtest.h>

#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#if defined(__GNUC__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wconversion"
#pragma GCC diagnostic ignored "-Wsign-conversion"
#pragma GCC diagnostic ignored "-Wshadow"
#pragma GCC diagnostic ignored "-Wmissing-field-initializers"
#pragma GCC diagnostic ignored "-Wunused-function"
#pragma GCC diagnostic ignored "-Wimplicit-fallthrough"
#endif
#define STB_IMAGE_WRITE_IMPLEMENTATION
#define STB_IMAGE_WRITE_STATIC
#define STBI_WRITE_NO_STDIO
#include <stb/stb_image_write.h>
#if defined(__GNUC__)
#pragma GCC diagnostic pop
#endif

#include "common/golden_dir.h"
#include "common/temp_dir.h"
#include "core/error.h"
#include "engine/image.h"
#include "engine/image_prompt.h"

namespace ferry {
namespace {

std::vector<uint8_t> file_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::vector<uint8_t>((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

std::vector<uint8_t> chelsea_png() {
  return file_bytes(testing::golden_dir() + "/images/chelsea.png");
}

// A small gradient encoded as JPEG by stb_image_write.
std::vector<uint8_t> small_jpeg() {
  const int w = 32, h = 24;
  std::vector<uint8_t> rgb(static_cast<size_t>(w * h * 3));
  for (size_t i = 0; i < rgb.size(); ++i) rgb[i] = static_cast<uint8_t>(i * 7 % 256);
  std::vector<uint8_t> out;
  stbi_write_jpg_to_func(
      [](void* ctx, void* data, int size) {
        auto* o = static_cast<std::vector<uint8_t>*>(ctx);
        o->insert(o->end(), static_cast<uint8_t*>(data), static_cast<uint8_t*>(data) + size);
      },
      &out, w, h, 3, rgb.data(), 90);
  return out;
}

// Runs `f`, expecting Error(kind) whose message holds every one of `parts`.
template <typename F>
void expect_error(F&& f, ErrorKind kind, const std::vector<std::string>& parts) {
  try {
    f();
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), kind) << e.what();
    for (const auto& p : parts) EXPECT_NE(std::string(e.what()).find(p), std::string::npos) << e.what();
  }
}

TEST(ImageErrors, MissingFileIsAnIoError) {
  expect_error([] { load_image("/nonexistent/photo.png"); }, ErrorKind::Io, {"/nonexistent/photo.png"});
}

TEST(ImageErrors, EmptyFile) {
  testing::TempDir dir("img");
  const std::string path = dir.str() + "/empty.png";
  std::ofstream(path).close();
  expect_error([&] { load_image(path); }, ErrorKind::Format, {"empty.png", "empty"});
}

TEST(ImageErrors, NotAnImage) {
  const std::string text = "hello, this is not a picture";
  expect_error(
      [&] {
        decode_image({reinterpret_cast<const uint8_t*>(text.data()), text.size()}, "notes.txt");
      },
      ErrorKind::Format, {"notes.txt", "not a PNG or JPEG"});
}

TEST(ImageErrors, TruncatedPng) {
  auto png = chelsea_png();
  ASSERT_GT(png.size(), 1000u);
  png.resize(png.size() / 2);
  expect_error([&] { decode_image(png, "half.png"); }, ErrorKind::Format, {"half.png", "truncated"});
}

TEST(ImageErrors, TruncatedJpegButTheWholeOneDecodes) {
  const auto jpeg = small_jpeg();
  const RgbImage whole = decode_image(jpeg, "small.jpg");
  EXPECT_EQ(whole.width, 32);
  EXPECT_EQ(whole.height, 24);
  EXPECT_EQ(whole.rgb.size(), 32u * 24u * 3u);
  const std::vector<uint8_t> cut(jpeg.begin(), jpeg.begin() + static_cast<std::ptrdiff_t>(jpeg.size() * 2 / 3));
  expect_error([&] { decode_image(cut, "cut.jpg"); }, ErrorKind::Format, {"cut.jpg", "truncated"});
}

TEST(ImageErrors, ZeroSizedPng) {
  auto png = chelsea_png();
  for (size_t i = 16; i < 20; ++i) png[i] = 0;  // IHDR width = 0
  expect_error([&] { decode_image(png, "zero.png"); }, ErrorKind::Format, {"zero.png", "no pixels"});
}

TEST(ImageErrors, DecompressionBombIsRefusedFromItsHeader) {
  auto png = chelsea_png();
  // IHDR claims 60000 x 60000 (3.6 Gpixel); the data is the small image's, never decoded.
  for (size_t at : {size_t{16}, size_t{20}}) {
    png[at] = 0, png[at + 1] = 0, png[at + 2] = 0xea, png[at + 3] = 0x60;
  }
  expect_error([&] { decode_image(png, "bomb.png"); }, ErrorKind::Format, {"bomb.png", "60000x60000", "limit"});
  // A lower limit refuses even the real image.
  expect_error([&] { decode_image(chelsea_png(), "chelsea.png", 1000); }, ErrorKind::Format, {"451x300"});
}

TEST(ImagePrompt, ExpandsEachSpanAndRefusesMismatches) {
  VisionConfig v;
  v.n_layer = 1;
  v.patch = 14;
  v.image_size = 56;  // 2x2 downsampled patches + boi + eoi = 6 rows
  v.boi_id = 294;
  v.eoi_id = 295;
  v.max_images = 2;
  const std::vector<int32_t> ids = {1, 294, 284, 295, 7};
  const ImagePrompt p = expand_image_prompt(v, ids, 1, 10);
  EXPECT_EQ(p.positions, (std::vector<int32_t>{10, 11, 12, 12, 12, 12, 13, 14}));
  EXPECT_EQ(p.image_row, (std::vector<int32_t>{-1, 0, 1, 2, 3, 4, 5, -1}));
  EXPECT_EQ(p.next_position, 15);
  const std::vector<int32_t> two = {294, 284, 295, 294, 284, 295};
  const ImagePrompt p2 = expand_image_prompt(v, two, 2);
  EXPECT_EQ(p2.image_row.back(), 11);
  expect_error([&] { expand_image_prompt(v, ids, 2); }, ErrorKind::Usage, {"2 image(s) given"});
  expect_error([&] { expand_image_prompt(v, two, 1); }, ErrorKind::Usage, {"more image spans"});
  expect_error(
      [&] {
        expand_image_prompt(v, std::vector<int32_t>{294, 284, 284, 295}, 1);
      },
      ErrorKind::Usage, {"placeholder"});
  expect_error([&] { expand_image_prompt(v, std::vector<int32_t>{5, 295}, 1); }, ErrorKind::Usage, {"end-of-image"});
}

}  // namespace
}  // namespace ferry
