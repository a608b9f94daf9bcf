// Images for GLM-4V: PNG/JPEG decoding (stb_image), the original preprocessing's resize (Pillow's
// antialiased bicubic, reproduced in its 8-bit fixed-point arithmetic) and CLIP normalisation.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace ferry {

struct RgbImage {
  int width = 0;
  int height = 0;
  std::vector<uint8_t> rgb;  // height x width x 3, row-major (HWC)
};

// Images larger than this many pixels are refused before decoding (a small file can claim a huge
// image: a decompression bomb).
inline constexpr int64_t kMaxImagePixels = int64_t{1} << 26;  // 64 Mpixel (8192 x 8192)

// Decodes a PNG or JPEG file to 8-bit RGB (grey is replicated, alpha dropped). Throws Error(Io)
// when the file cannot be read, Error(Format) naming the file for an empty, truncated, zero-sized
// or undecodable image, and for one over max_pixels before any pixel is decoded.
RgbImage load_image(const std::string& path, int64_t max_pixels = kMaxImagePixels);
RgbImage decode_image(std::span<const uint8_t> bytes, const std::string& what, int64_t max_pixels = kMaxImagePixels);

// Pillow's Image.resize(size, BICUBIC) (a = -0.5, support widened by the shrink factor, 22-bit
// fixed-point weights, horizontal pass first, each pass rounded and clipped to 8 bits), which is
// what torchvision's Resize does to a PIL image. The aspect ratio is not kept.
RgbImage resize_bicubic(const RgbImage& image, int width, int height);

// ToTensor (x / 255) then Normalize with CLIP's mean and std, in f32: [3, height, width] (CHW).
std::vector<float> clip_normalize(const RgbImage& image);

// load_image -> resize_bicubic to size x size -> clip_normalize: GLM-4V's pixel values.
std::vector<float> preprocess_image(const std::string& path, int size, int64_t max_pixels = kMaxImagePixels);

}  // namespace ferry
