#include "engine/image.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>

#include "core/error.h"

#if defined(__GNUC__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wconversion"
#pragma GCC diagnostic ignored "-Wsign-conversion"
#pragma GCC diagnostic ignored "-Wshadow"
#pragma GCC diagnostic ignored "-Wdouble-promotion"
#pragma GCC diagnostic ignored "-Wimplicit-fallthrough"
#pragma GCC diagnostic ignored "-Wunused-function"
#pragma GCC diagnostic ignored "-Wmissing-field-initializers"
#pragma GCC diagnostic ignored "-Wpedantic"
#pragma GCC diagnostic ignored "-Wcast-qual"
#pragma GCC diagnostic ignored "-Wold-style-cast"
#pragma GCC diagnostic ignored "-Wuseless-cast"
#endif
#define STB_IMAGE_IMPLEMENTATION
#define STB_IMAGE_STATIC
#define STBI_ONLY_PNG
#define STBI_ONLY_JPEG
#define STBI_NO_STDIO
#define STBI_FAILURE_USERMSG
#include <stb/stb_image.h>
#if defined(__GNUC__)
#pragma GCC diagnostic pop
#endif

namespace ferry {

namespace {

bool is_png(std::span<const uint8_t> b) {
  static constexpr uint8_t kSig[] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
  return b.size() >= sizeof(kSig) && std::equal(std::begin(kSig), std::end(kSig), b.begin());
}
bool is_jpeg(std::span<const uint8_t> b) {
  return b.size() >= 3 && b[0] == 0xff && b[1] == 0xd8 && b[2] == 0xff;
}

// stb_image decodes a JPEG cut short without complaint (it pads the missing data), so a JPEG must
// end with its end-of-image marker (trailing padding bytes allowed).
bool jpeg_complete(std::span<const uint8_t> b) {
  size_t end = b.size();
  while (end > 2 && (b[end - 1] == 0x00 || b[end - 1] == 0x0a || b[end - 1] == 0x0d || b[end - 1] == 0x20)) --end;
  return end >= 4 && b[end - 2] == 0xff && b[end - 1] == 0xd9;
}

int as_int(size_t n, const std::string& what) {
  if (n > static_cast<size_t>(INT32_MAX)) fail(ErrorKind::Format, "{}: the file is too large to be an image", what);
  return static_cast<int>(n);
}

// Zero-sized images and decompression bombs, from the header's dimensions alone.
void check_size(uint32_t w, uint32_t h, const std::string& what, int64_t max_pixels) {
  if (w == 0 || h == 0) fail(ErrorKind::Format, "{}: the image is {}x{} pixels: it has no pixels", what, w, h);
  const uint64_t pixels = uint64_t{w} * h;
  if (pixels > static_cast<uint64_t>(max_pixels)) {
    fail(ErrorKind::Format,
         "{}: the image claims {}x{} = {} pixels, over the limit of {} (a decompression bomb or a huge image); "
         "shrink it before use",
         what, w, h, pixels, max_pixels);
  }
}

}  // namespace

RgbImage decode_image(std::span<const uint8_t> bytes, const std::string& what, int64_t max_pixels) {
  if (bytes.empty()) fail(ErrorKind::Format, "{}: the file is empty, not a PNG or JPEG image", what);
  const bool png = is_png(bytes);
  if (!png && !is_jpeg(bytes)) {
    fail(ErrorKind::Format, "{}: not a PNG or JPEG image (unrecognised signature); convert it to PNG or JPEG", what);
  }
  const int size = as_int(bytes.size(), what);
  // A PNG states its size in the IHDR chunk right after the signature: checked here, before
  // stb_image, whose own refusals ("corrupt", "too large") would not say why.
  if (png && bytes.size() >= 24) {
    const auto be32 = [&](size_t at) {
      return uint32_t{bytes[at]} << 24 | uint32_t{bytes[at + 1]} << 16 | uint32_t{bytes[at + 2]} << 8 | bytes[at + 3];
    };
    check_size(be32(16), be32(20), what, max_pixels);
  }
  int w = 0, h = 0, channels = 0;
  // Dimensions from the header alone, before any pixel is decoded.
  if (stbi_info_from_memory(bytes.data(), size, &w, &h, &channels) == 0) {
    fail(ErrorKind::Format, "{}: unreadable {} header ({}); the file is damaged or truncated", what,
         png ? "PNG" : "JPEG", stbi_failure_reason());
  }
  check_size(static_cast<uint32_t>(std::max(w, 0)), static_cast<uint32_t>(std::max(h, 0)), what, max_pixels);
  if (!png && !jpeg_complete(bytes)) {
    fail(ErrorKind::Format, "{}: the JPEG data is truncated (no end-of-image marker); the file was cut short", what);
  }
  int dw = 0, dh = 0;
  stbi_uc* pixels = stbi_load_from_memory(bytes.data(), size, &dw, &dh, &channels, 3);
  if (pixels == nullptr) {
    fail(ErrorKind::Format, "{}: cannot decode the {} image ({}); the file is damaged or truncated", what,
         png ? "PNG" : "JPEG", stbi_failure_reason());
  }
  RgbImage image;
  image.width = dw;
  image.height = dh;
  image.rgb.assign(pixels, pixels + static_cast<size_t>(dw) * static_cast<size_t>(dh) * 3);
  stbi_image_free(pixels);
  return image;
}

RgbImage load_image(const std::string& path, int64_t max_pixels) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) {
    fail(ErrorKind::Io, "image '{}' is a directory; give a PNG or JPEG file", path);
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) fail(ErrorKind::Io, "cannot open image '{}': {}", path, std::strerror(errno));
  std::vector<uint8_t> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (in.bad()) fail(ErrorKind::Io, "cannot read image '{}'", path);
  return decode_image(bytes, path, max_pixels);
}

namespace {

constexpr int kPrecisionBits = 32 - 8 - 2;  // Pillow's 8-bit resampling precision

double bicubic(double x) {
  constexpr double a = -0.5;
  x = std::abs(x);
  if (x < 1.0) return ((a + 2.0) * x - (a + 3.0)) * x * x + 1.0;
  if (x < 2.0) return (((x - 5.0) * x + 8.0) * x - 4.0) * a;
  return 0.0;
}

// Per output pixel: the first input pixel, the count, and fixed-point weights (Pillow's
// precompute_coeffs + normalize_coeffs_8bpc).
struct Coefficients {
  int ksize = 0;
  std::vector<int> first, count;
  std::vector<int32_t> weights;  // out_size x ksize
};

Coefficients coefficients(int in_size, int out_size) {
  const double scale = static_cast<double>(in_size) / out_size;
  const double filter_scale = std::max(scale, 1.0);
  const double support = 2.0 * filter_scale;
  Coefficients c;
  c.ksize = static_cast<int>(std::ceil(support)) * 2 + 1;
  c.first.resize(static_cast<size_t>(out_size));
  c.count.resize(static_cast<size_t>(out_size));
  c.weights.assign(static_cast<size_t>(out_size) * static_cast<size_t>(c.ksize), 0);
  std::vector<double> k(static_cast<size_t>(c.ksize));
  for (int o = 0; o < out_size; ++o) {
    const double center = (o + 0.5) * scale;
    const int xmin = std::max(static_cast<int>(center - support + 0.5), 0);
    const int xmax = std::min(static_cast<int>(center + support + 0.5), in_size) - xmin;
    double total = 0.0;
    for (int x = 0; x < xmax; ++x) {
      k[static_cast<size_t>(x)] = bicubic((x + xmin - center + 0.5) / filter_scale);
      total += k[static_cast<size_t>(x)];
    }
    for (int x = 0; x < xmax; ++x) {
      const double w = total != 0.0 ? k[static_cast<size_t>(x)] / total : k[static_cast<size_t>(x)];
      const double fixed = w * (1 << kPrecisionBits);
      c.weights[static_cast<size_t>(o) * static_cast<size_t>(c.ksize) + static_cast<size_t>(x)] =
          static_cast<int32_t>(w < 0 ? fixed - 0.5 : fixed + 0.5);
    }
    c.first[static_cast<size_t>(o)] = xmin;
    c.count[static_cast<size_t>(o)] = xmax;
  }
  return c;
}

uint8_t clip8(int64_t acc) {
  return static_cast<uint8_t>(std::clamp<int64_t>(acc >> kPrecisionBits, 0, 255));
}

}  // namespace

RgbImage resize_bicubic(const RgbImage& image, int width, int height) {
  if (image.width <= 0 || image.height <= 0 || width <= 0 || height <= 0) {
    fail(ErrorKind::Usage, "cannot resize a {}x{} image to {}x{}", image.width, image.height, width, height);
  }
  const Coefficients horiz = coefficients(image.width, width);
  const Coefficients vert = coefficients(image.height, height);
  // Horizontal pass over the rows the vertical pass reads.
  const int row0 = vert.first.front();
  const int row1 = vert.first.back() + vert.count.back();
  const int rows = row1 - row0;
  const bool need_horizontal = width != image.width;
  const bool need_vertical = height != image.height;
  std::vector<uint8_t> tmp;
  int tmp_row0 = 0;
  if (need_horizontal) {
    tmp_row0 = need_vertical ? row0 : 0;
    const int n_rows = need_vertical ? rows : image.height;
    tmp.resize(static_cast<size_t>(n_rows) * static_cast<size_t>(width) * 3);
    for (int y = 0; y < n_rows; ++y) {
      const uint8_t* in = image.rgb.data() + static_cast<size_t>(y + tmp_row0) * static_cast<size_t>(image.width) * 3;
      uint8_t* out = tmp.data() + static_cast<size_t>(y) * static_cast<size_t>(width) * 3;
      for (int x = 0; x < width; ++x) {
        const int32_t* k = horiz.weights.data() + static_cast<size_t>(x) * static_cast<size_t>(horiz.ksize);
        const int first = horiz.first[static_cast<size_t>(x)];
        for (int ch = 0; ch < 3; ++ch) {
          int64_t acc = int64_t{1} << (kPrecisionBits - 1);
          for (int i = 0; i < horiz.count[static_cast<size_t>(x)]; ++i)
            acc += static_cast<int64_t>(in[static_cast<size_t>(first + i) * 3 + static_cast<size_t>(ch)]) * k[i];
          out[static_cast<size_t>(x) * 3 + static_cast<size_t>(ch)] = clip8(acc);
        }
      }
    }
  } else {
    tmp = image.rgb;
  }
  if (!need_vertical) return RgbImage{width, height, std::move(tmp)};
  RgbImage result{width, height, std::vector<uint8_t>(static_cast<size_t>(width) * static_cast<size_t>(height) * 3)};
  const size_t stride = static_cast<size_t>(width) * 3;
  for (int y = 0; y < height; ++y) {
    const int32_t* k = vert.weights.data() + static_cast<size_t>(y) * static_cast<size_t>(vert.ksize);
    const int first = vert.first[static_cast<size_t>(y)] - tmp_row0;
    for (size_t i = 0; i < stride; ++i) {
      int64_t acc = int64_t{1} << (kPrecisionBits - 1);
      for (int j = 0; j < vert.count[static_cast<size_t>(y)]; ++j)
        acc += static_cast<int64_t>(tmp[static_cast<size_t>(first + j) * stride + i]) * k[j];
      result.rgb[static_cast<size_t>(y) * stride + i] = clip8(acc);
    }
  }
  return result;
}

std::vector<float> clip_normalize(const RgbImage& image) {
  static constexpr float kMean[3] = {0.48145466f, 0.4578275f, 0.40821073f};
  static constexpr float kStd[3] = {0.26862954f, 0.26130258f, 0.27577711f};
  const size_t plane = static_cast<size_t>(image.width) * static_cast<size_t>(image.height);
  std::vector<float> out(plane * 3);
  for (size_t p = 0; p < plane; ++p) {
    for (size_t c = 0; c < 3; ++c) {
      const float x = static_cast<float>(image.rgb[p * 3 + c]) / 255.0f;
      out[c * plane + p] = (x - kMean[c]) / kStd[c];
    }
  }
  return out;
}

std::vector<float> preprocess_image(const std::string& path, int size, int64_t max_pixels) {
  return clip_normalize(resize_bicubic(load_image(path, max_pixels), size, size));
}

}  // namespace ferry
