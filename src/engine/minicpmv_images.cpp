#include "engine/minicpmv_images.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "core/error.h"

namespace ferry {

namespace {

// Python's round() (half to even) under the default rounding mode, as the original's
// ensure_divide: max(round(length / patch) * patch, patch), in double.
double ensure_divide(double length, int patch) {
  return std::max(std::nearbyint(length / patch) * patch, static_cast<double>(patch));
}

struct SizeD {
  double w = 0, h = 0;
};

// The original's find_best_resize: when the image is over scale_resolution^2 pixels or may be
// upscaled, scale it to about scale_resolution^2 pixels keeping its aspect ratio, with Python's
// int() truncation (h' = int(S / sqrt(w / h)), w' = int(h' * w / h)); then each side to a multiple
// of the patch. `w`, `h` are doubles: the cells' sizes are true quotients (refine / grid).
SizeD find_best_resize(double w, double h, const MiniCpmvSliceConfig& c, bool allow_upscale) {
  const double s = c.scale_resolution;
  if (w * h > s * s || allow_upscale) {
    const double r = w / h;
    h = std::trunc(s / std::sqrt(r));
    w = std::trunc(h * r);
  }
  return {ensure_divide(w, c.patch), ensure_divide(h, c.patch)};
}

// A planned side as an int, refused when it is beyond what an image may be.
int planned_side(double v, const char* what, int width, int height) {
  if (!(v >= 1.0) || v > kMaxMiniCpmvSide) {
    fail(ErrorKind::Usage,
         "MiniCPM-V slicing of a {}x{} image would make the {} {} pixels on a side (the limit is 1..{}); the image is "
         "too elongated: crop or pad it closer to a square",
         width, height, what, v, kMaxMiniCpmvSide);
  }
  return static_cast<int>(v);
}

void check_pixels(int w, int h, const char* what, int width, int height) {
  const int64_t pixels = int64_t{w} * h;
  if (pixels > kMaxImagePixels) {
    fail(ErrorKind::Usage,
         "MiniCPM-V slicing of a {}x{} image would make the {} {}x{} = {} pixels, over the limit of {}; shrink the "
         "image first",
         width, height, what, w, h, pixels, kMaxImagePixels);
  }
}

void check_config(const MiniCpmvSliceConfig& c) {
  if (c.scale_resolution <= 0 || c.patch <= 0 || c.max_slice_nums <= 0 || c.scale_resolution > kMaxMiniCpmvSide ||
      c.patch > kMaxMiniCpmvSide) {
    fail(ErrorKind::Usage,
         "MiniCPM-V slice config: scale_resolution {}, patch_size {}, max_slice_nums {}: each must be positive (and "
         "the first two at most {}); check preprocessor_config.json",
         c.scale_resolution, c.patch, c.max_slice_nums, kMaxMiniCpmvSide);
  }
  for (size_t i = 0; i < 3; ++i) {
    if (!std::isfinite(c.mean[i]) || !std::isfinite(c.std[i]) || c.std[i] == 0.0f) {
      fail(ErrorKind::Usage,
           "MiniCPM-V slice config: norm_mean[{}] = {}, norm_std[{}] = {}: need finite values, std != 0", i, c.mean[i],
           i, c.std[i]);
    }
  }
}

void check_image(const RgbImage& image, const char* what) {
  if (image.width <= 0 || image.height <= 0 ||
      image.rgb.size() != static_cast<size_t>(image.width) * static_cast<size_t>(image.height) * 3) {
    fail(ErrorKind::Usage,
         "{}: the image is {}x{} with {} bytes of RGB (need a positive size and width*height*3 bytes)", what,
         image.width, image.height, image.rgb.size());
  }
}

RgbImage crop(const RgbImage& image, int x0, int y0, int w, int h) {
  RgbImage out{w, h, std::vector<uint8_t>(static_cast<size_t>(w) * static_cast<size_t>(h) * 3)};
  const size_t row = static_cast<size_t>(w) * 3;
  for (int y = 0; y < h; ++y) {
    const uint8_t* src = image.rgb.data() +
                         (static_cast<size_t>(y0 + y) * static_cast<size_t>(image.width) + static_cast<size_t>(x0)) * 3;
    std::copy(src, src + row, out.rgb.data() + static_cast<size_t>(y) * row);
  }
  return out;
}

// ATen's CPU arange in float32 (RangeFactories.cpp, RangeFactoriesKernel.cpp): n = ceil((end -
// start) / step) in double; the scalar element i is float32(start + step * i) computed in double
// (the accumulate type); the vectorised kernel (cpu_serial_kernel_vec runs it over 2 vectors at a
// time, so over the first 2W * floor(n / 2W) elements) builds each vector with
// Vectorized<float>::arange(base, step): base = float32(start + step * i0), lane j =
// float32(base + j * step) with base widened back to double. lanes == 0: the scalar path alone.
std::vector<float> torch_cpu_arange_f32(double start, double end, double step, int lanes) {
  const double size_d = std::ceil((end - start) / step);
  const auto n = static_cast<int64_t>(std::max(size_d, 0.0));
  std::vector<float> out(static_cast<size_t>(n));
  const int64_t vec_end = lanes > 0 ? n / (2 * lanes) * (2 * lanes) : 0;
  for (int64_t i0 = 0; i0 < vec_end; i0 += lanes) {
    const auto base = static_cast<float>(start + step * static_cast<double>(i0));
    for (int j = 0; j < lanes; ++j) {
      out[static_cast<size_t>(i0 + j)] = static_cast<float>(static_cast<double>(base) + j * step);
    }
  }
  for (int64_t i = vec_end; i < n; ++i)
    out[static_cast<size_t>(i)] = static_cast<float>(start + step * static_cast<double>(i));
  return out;
}

// torch.bucketize(x, boundaries, right=True) on the CPU (Bucketization.cpp cus_upper_bound): the
// number of boundaries <= x, by the same binary search (so the same answer even where float32
// rounding leaves the boundaries a ulp out of order).
int32_t bucketize_right(float x, const std::vector<float>& boundaries) {
  int64_t start = 0, end = static_cast<int64_t>(boundaries.size());
  while (start < end) {
    const int64_t mid = start + ((end - start) >> 1);
    if (!(boundaries[static_cast<size_t>(mid)] > x)) {
      start = mid + 1;
    } else {
      end = mid;
    }
  }
  return static_cast<int32_t>(start);
}

void check_grid_side(int64_t nb, const char* what) {
  if (nb < 1 || nb > kMaxPatchGridSide) {
    fail(ErrorKind::Usage, "NaViT position ids: {} of {} patches (need 1..{})", what, nb, kMaxPatchGridSide);
  }
}

void check_table_side(int64_t table_side) {
  if (table_side < 1 || table_side > kMaxPositionTableSide) {
    fail(ErrorKind::Usage,
         "NaViT position ids: a position table of side {} (need 1..{}; it is the vision image_size / patch_size)",
         table_side, kMaxPositionTableSide);
  }
}

}  // namespace

int64_t minicpmv_ensure_divide(double length, int multiple) {
  if (multiple <= 0 || !std::isfinite(length) || std::abs(length) > 1e15) {
    fail(ErrorKind::Usage, "ensure_divide({}, {}): need a finite length and a positive multiple", length, multiple);
  }
  return static_cast<int64_t>(ensure_divide(length, multiple));
}

MiniCpmvSlicePlan plan_minicpmv_slices(int width, int height, const MiniCpmvSliceConfig& c) {
  check_config(c);
  if (width <= 0 || height <= 0) {
    fail(ErrorKind::Usage, "MiniCPM-V slicing: the image is {}x{} pixels: it needs a positive width and height", width,
         height);
  }
  MiniCpmvSlicePlan plan;
  plan.width = width;
  plan.height = height;

  // slice_mode off: get_sliced_images returns the image itself, and reshape_by_patch's unfold
  // keeps the whole patches from the top-left corner (tgt_size = side // patch).
  if (!c.slice_mode) {
    if (width < c.patch || height < c.patch) {
      fail(ErrorKind::Usage,
           "MiniCPM-V slicing: a {}x{} image is smaller than one {}x{} patch; with slice_mode off the image is not "
           "resized, so it needs at least one patch on each side",
           width, height, c.patch, c.patch);
    }
    plan.source_w = width / c.patch * c.patch;
    plan.source_h = height / c.patch * c.patch;
    plan.source_cropped = true;
    check_pixels(plan.source_w, plan.source_h, "source image", width, height);
    return plan;
  }

  const double w = width, h = height;
  const double scale = c.scale_resolution;
  // get_sliced_grid.
  const double ratio = w * h / (scale * scale);
  const double multiple = std::min(std::ceil(ratio), static_cast<double>(c.max_slice_nums));
  if (multiple <= 1.0) {
    // Not sliced: one input, resized (up or down) to about scale_resolution^2 pixels.
    const SizeD s = find_best_resize(w, h, c, /*allow_upscale=*/true);
    plan.source_w = planned_side(s.w, "source image", width, height);
    plan.source_h = planned_side(s.h, "source image", width, height);
    check_pixels(plan.source_w, plan.source_h, "source image", width, height);
    return plan;
  }
  const auto m = static_cast<int>(multiple);
  const double log_ratio = std::log(w / h);
  double min_error = std::numeric_limits<double>::infinity();
  SliceGrid best{1, 1};
  for (int n : {m - 1, m, m + 1}) {
    if (n == 1 || n > c.max_slice_nums) continue;
    for (int cols = 1; cols <= n; ++cols) {
      if (n % cols != 0) continue;
      const int rows = n / cols;
      const double error = std::abs(log_ratio - std::log(static_cast<double>(cols) / static_cast<double>(rows)));
      if (error < min_error) {  // strictly less: the first candidate wins a tie
        best = {cols, rows};
        min_error = error;
      }
    }
  }
  plan.grid = best;

  // slice_image: the source image down to about scale_resolution^2 pixels; the refine image a grid
  // of cells, each about scale_resolution^2 pixels.
  const SizeD s = find_best_resize(w, h, c, /*allow_upscale=*/false);
  plan.source_w = planned_side(s.w, "source image", width, height);
  plan.source_h = planned_side(s.h, "source image", width, height);
  check_pixels(plan.source_w, plan.source_h, "source image", width, height);
  const double refine_w = ensure_divide(w, best.cols);
  const double refine_h = ensure_divide(h, best.rows);
  const SizeD cell = find_best_resize(refine_w / best.cols, refine_h / best.rows, c, /*allow_upscale=*/true);
  plan.cell_w = planned_side(cell.w, "slice", width, height);
  plan.cell_h = planned_side(cell.h, "slice", width, height);
  plan.refine_w = planned_side(cell.w * best.cols, "refine image", width, height);
  plan.refine_h = planned_side(cell.h * best.rows, "refine image", width, height);
  check_pixels(plan.refine_w, plan.refine_h, "refine image", width, height);
  return plan;
}

std::vector<RgbImage> slice_minicpmv_image(const RgbImage& image, const MiniCpmvSlicePlan& plan) {
  check_image(image, "MiniCPM-V slicing");
  if (image.width != plan.width || image.height != plan.height) {
    fail(ErrorKind::Usage, "MiniCPM-V slicing: the plan is for a {}x{} image, the image is {}x{}; plan this image",
         plan.width, plan.height, image.width, image.height);
  }
  if (plan.source_w <= 0 || plan.source_h <= 0 || plan.grid.cols < 0 || plan.grid.rows < 0 ||
      plan.grid.sliced() != (plan.grid.rows > 0) ||
      (plan.grid.sliced() && (plan.cell_w <= 0 || plan.cell_h <= 0 || plan.refine_w != plan.cell_w * plan.grid.cols ||
                              plan.refine_h != plan.cell_h * plan.grid.rows)) ||
      (plan.source_cropped && (plan.source_w > image.width || plan.source_h > image.height))) {
    fail(ErrorKind::Usage,
         "MiniCPM-V slicing: an inconsistent plan (grid {}x{}, source {}x{}, refine {}x{}, cell {}x{}); make it with "
         "plan_minicpmv_slices",
         plan.grid.cols, plan.grid.rows, plan.source_w, plan.source_h, plan.refine_w, plan.refine_h, plan.cell_w,
         plan.cell_h);
  }
  std::vector<RgbImage> out;
  out.reserve(static_cast<size_t>(plan.vision_inputs()));
  out.push_back(plan.source_cropped ? crop(image, 0, 0, plan.source_w, plan.source_h)
                                    : resize_bicubic(image, plan.source_w, plan.source_h));
  if (!plan.grid.sliced()) return out;
  const RgbImage refine = resize_bicubic(image, plan.refine_w, plan.refine_h);
  for (int r = 0; r < plan.grid.rows; ++r) {
    for (int col = 0; col < plan.grid.cols; ++col) {
      out.push_back(crop(refine, col * plan.cell_w, r * plan.cell_h, plan.cell_w, plan.cell_h));
    }
  }
  return out;
}

VisionInput minicpmv_patch_rows(const RgbImage& image, const MiniCpmvSliceConfig& c) {
  check_config(c);
  check_image(image, "MiniCPM-V patch rows");
  const int p = c.patch;
  if (image.width % p != 0 || image.height % p != 0) {
    fail(ErrorKind::Usage,
         "MiniCPM-V patch rows: a {}x{} vision input is not a whole number of {}x{} patches; cut it with "
         "slice_minicpmv_image",
         image.width, image.height, p, p);
  }
  VisionInput in;
  in.grid_h = image.height / p;
  in.grid_w = image.width / p;
  const size_t pp = static_cast<size_t>(p) * static_cast<size_t>(p);
  const size_t row_len = 3 * pp;
  in.patches.resize(static_cast<size_t>(in.grid_h * in.grid_w) * row_len);
  // The original: float32(x) / 255, then (x - mean) / std, all in float32.
  for (int64_t gy = 0; gy < in.grid_h; ++gy) {
    for (int64_t gx = 0; gx < in.grid_w; ++gx) {
      float* row = in.patches.data() + static_cast<size_t>(gy * in.grid_w + gx) * row_len;
      for (size_t ch = 0; ch < 3; ++ch) {
        for (int ky = 0; ky < p; ++ky) {
          const size_t y = static_cast<size_t>(gy * p + ky);
          const uint8_t* src =
              image.rgb.data() + (y * static_cast<size_t>(image.width) + static_cast<size_t>(gx * p)) * 3;
          float* dst = row + ch * pp + static_cast<size_t>(ky) * static_cast<size_t>(p);
          for (int kx = 0; kx < p; ++kx) {
            const float x = static_cast<float>(src[static_cast<size_t>(kx) * 3 + ch]) / 255.0f;
            dst[kx] = (x - c.mean[ch]) / c.std[ch];
          }
        }
      }
    }
  }
  return in;
}

std::vector<float> patch_rows_from_strip(std::span<const float> strip, int64_t n_patches, int patch) {
  if (n_patches <= 0 || patch <= 0 ||
      strip.size() != 3 * static_cast<size_t>(patch) * static_cast<size_t>(patch) * static_cast<size_t>(n_patches)) {
    fail(ErrorKind::Usage,
         "pixel_values strip of {} floats for {} patches of {}x{}: need [3, patch, n_patches * patch] = 3*p*p*n floats",
         strip.size(), n_patches, patch, patch);
  }
  const auto p = static_cast<size_t>(patch);
  const auto n = static_cast<size_t>(n_patches);
  const size_t strip_w = n * p;
  std::vector<float> rows(strip.size());
  for (size_t k = 0; k < n; ++k) {
    for (size_t ch = 0; ch < 3; ++ch) {
      for (size_t y = 0; y < p; ++y) {
        const float* src = strip.data() + (ch * p + y) * strip_w + k * p;
        std::copy(src, src + p, rows.data() + k * 3 * p * p + ch * p * p + y * p);
      }
    }
  }
  return rows;
}

std::vector<int32_t> navit_position_buckets(int64_t nb, int64_t table_side, int arange_lanes) {
  check_grid_side(nb, "a side");
  check_table_side(table_side);
  if (arange_lanes < 0 || arange_lanes > 64) {
    fail(ErrorKind::Usage, "NaViT position ids: {} arange lanes (need 0 for the scalar path, or a vector width)",
         arange_lanes);
  }
  // Python doubles: 1 / num_patches_per_side.
  const double inv_side = 1.0 / static_cast<double>(table_side);
  const std::vector<float> boundaries = torch_cpu_arange_f32(inv_side, 1.0, inv_side, arange_lanes);
  // 1 / nb_patches is a float32 tensor (reciprocal of an integer tensor), widened to double as
  // arange's step.
  const double step = static_cast<double>(1.0f / static_cast<float>(nb));
  const std::vector<float> coords = torch_cpu_arange_f32(0.0, 1.0 - 1e-6, step, arange_lanes);
  if (static_cast<int64_t>(coords.size()) != nb) {
    fail(ErrorKind::Internal, "NaViT position ids: arange(0, 1 - 1e-6, 1/{}) has {} elements, not {}", nb,
         coords.size(), nb);
  }
  std::vector<int32_t> buckets(coords.size());
  for (size_t i = 0; i < coords.size(); ++i) buckets[i] = bucketize_right(coords[i], boundaries);
  return buckets;
}

// Real table (N = 70): the 8-lane behaviour (navit_position_buckets' default) — what the goldens'
// reference environment (torch 1.13, AVX2) computes and what the DEFAULT and NEON kernels compute
// on every CPU; AVX-512 torch builds differ at nb 49, 58, 86, 98, 100.
std::vector<int32_t> bucketed_position_ids(int64_t grid_h, int64_t grid_w, int64_t table_side) {
  check_grid_side(grid_h, "a grid height");
  check_grid_side(grid_w, "a grid width");
  check_table_side(table_side);
  const std::vector<int32_t> bh = navit_position_buckets(grid_h, table_side);
  const std::vector<int32_t> bw = navit_position_buckets(grid_w, table_side);
  std::vector<int32_t> ids(static_cast<size_t>(grid_h * grid_w));
  const auto side = static_cast<int32_t>(table_side);
  for (size_t r = 0; r < bh.size(); ++r) {
    for (size_t col = 0; col < bw.size(); ++col) ids[r * bw.size() + col] = bh[r] * side + bw[col];
  }
  return ids;
}

std::string minicpmv_image_text(int image_index, SliceGrid grid, int query_num) {
  if (image_index < 0 || query_num <= 0 || grid.cols < 0 || grid.rows < 0 || grid.sliced() != (grid.rows > 0)) {
    fail(ErrorKind::Usage,
         "MiniCPM-V image placeholder text: image index {}, query_num {}, grid {}x{} (need index >= 0, query_num > 0, "
         "and a grid of positive cols and rows, or 0x0 when not sliced)",
         image_index, query_num, grid.cols, grid.rows);
  }
  std::string unks;
  unks.reserve(static_cast<size_t>(query_num) * 5);
  for (int i = 0; i < query_num; ++i) unks += "<unk>";
  std::string text = "<image_id>";
  text += std::to_string(image_index);
  text += "</image_id><image>";
  text += unks;
  text += "</image>";
  for (int r = 0; r < grid.rows; ++r) {
    if (r > 0) text += '\n';
    for (int col = 0; col < grid.cols; ++col) {
      text += "<slice>";
      text += unks;
      text += "</slice>";
    }
  }
  return text;
}

std::string expand_minicpmv_prompt(std::string_view prompt, std::span<const SliceGrid> grids, int query_num) {
  if (query_num <= 0) {
    fail(ErrorKind::Usage, "MiniCPM-V prompt: query_num {} (need > 0: the image_feature_size of the processor)",
         query_num);
  }
  const std::string_view tag = kMiniCpmvImagePlaceholder;
  size_t count = 0;
  for (size_t at = prompt.find(tag); at != std::string_view::npos; at = prompt.find(tag, at + tag.size())) ++count;
  if (count != grids.size()) {
    fail(ErrorKind::Usage,
         "the prompt has {} image placeholder(s) \"{}\" but {} image(s) were given; put one \"{}\" where each image "
         "goes, in order",
         count, tag, grids.size(), tag);
  }
  std::string out;
  size_t from = 0;
  for (size_t i = 0; i < grids.size(); ++i) {
    const size_t at = prompt.find(tag, from);
    out.append(prompt.substr(from, at - from));
    out += minicpmv_image_text(static_cast<int>(i), grids[i], query_num);
    from = at + tag.size();
  }
  out.append(prompt.substr(from));
  return out;
}

std::vector<ImageBound> minicpmv_image_bounds(std::span<const int32_t> ids, const MiniCpmvTokenIds& t, int query_num) {
  if (query_num <= 0 || t.image_start < 0 || t.image_end < 0 || t.slice_start < 0 || t.slice_end < 0 || t.unk < 0) {
    fail(ErrorKind::Usage,
         "MiniCPM-V image bounds: query_num {}, ids <image> {} </image> {} <slice> {} </slice> {} <unk> {} (need "
         "query_num > 0 and every id from the tokenizer)",
         query_num, t.image_start, t.image_end, t.slice_start, t.slice_end, t.unk);
  }
  std::vector<ImageBound> bounds;
  int64_t open = -1;  // index after the pending <image>/<slice>, -1 when none
  for (size_t i = 0; i < ids.size(); ++i) {
    const int32_t id = ids[i];
    const auto at = static_cast<int64_t>(i);
    if (id == t.image_start || id == t.slice_start) {
      if (open >= 0)
        fail(ErrorKind::Usage, "MiniCPM-V image bounds: an image/slice start at token {} inside the one opened at {}",
             at, open - 1);
      open = at + 1;
    } else if (id == t.image_end || id == t.slice_end) {
      if (open < 0)
        fail(ErrorKind::Usage, "MiniCPM-V image bounds: an image/slice end at token {} without its start", at);
      bounds.push_back({open, at});
      open = -1;
    }
  }
  if (open >= 0)
    fail(ErrorKind::Usage, "MiniCPM-V image bounds: the image/slice opened at token {} is never closed", open - 1);
  for (const ImageBound& b : bounds) {
    const bool all_unk =
        std::all_of(ids.begin() + b.start, ids.begin() + b.end, [&](int32_t id) { return id == t.unk; });
    if (b.end - b.start != query_num || !all_unk) {
      fail(
          ErrorKind::Usage,
          "MiniCPM-V image bounds: tokens [{}, {}) between an image/slice start and end are not {} <unk> placeholders; "
          "expand the prompt with expand_minicpmv_prompt and keep \"<image>\", \"<slice>\" out of the text",
          b.start, b.end, query_num);
    }
  }
  return bounds;
}

}  // namespace ferry
