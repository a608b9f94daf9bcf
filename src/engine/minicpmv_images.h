// MiniCPM-V 2.6's image preprocessing, as pure functions reproducing OpenBMB's original
// MiniCPMVImageProcessor / MiniCPMVProcessor and the NaViT position ids of its SigLIP tower
// (../shared/golden/minicpmv/README.md states the rules; the goldens there check them):
//
//   plan_minicpmv_slices      the slicing plan: grid, source (thumbnail) size, refine image and cell size
//   slice_minicpmv_image      the vision inputs: the source image, then the cells row by row (Pillow's bicubic)
//   minicpmv_patch_rows       one vision input as the patch embedding takes it ([n, 3*p*p], normalised f32)
//   bucketed_position_ids     the bucketised position-embedding rows of a patch grid (torch's float32 semantics)
//   expand_minicpmv_prompt    "(<image>./</image>)" -> <image_id>, <image>/<slice> spans of <unk> placeholders
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "engine/image.h"

namespace ferry {

// preprocessor_config.json (scale_resolution, patch_size, max_slice_nums, slice_mode, norm_mean,
// norm_std); config.json's slice_config repeats the first three.
struct MiniCpmvSliceConfig {
  int scale_resolution = 448;
  int patch = 14;
  int max_slice_nums = 9;
  bool slice_mode = true;
  std::array<float, 3> mean{0.5f, 0.5f, 0.5f};
  std::array<float, 3> std{0.5f, 0.5f, 0.5f};
};

// [cols, rows] of cells; {0, 0} when the image is not sliced.
struct SliceGrid {
  int cols = 0;
  int rows = 0;
  bool sliced() const { return cols > 0; }
  bool operator==(const SliceGrid&) const = default;
};

struct MiniCpmvSlicePlan {
  int width = 0, height = 0;  // the image the plan is for
  SliceGrid grid;             // {0,0} when the image is not sliced
  // Vision input 0, the whole image: resized to source_w x source_h, or (slice_mode off, where the
  // original takes the image as it is) cut to whole patches from the top-left corner, unresized.
  int source_w = 0, source_h = 0;
  bool source_cropped = false;     // slice_mode off: crop, no resize
  int refine_w = 0, refine_h = 0;  // the image the cells are cut from (sliced only): cell x grid
  int cell_w = 0, cell_h = 0;      // each cell (sliced only)

  // Vision inputs: 1 + cols * rows.
  int vision_inputs() const { return 1 + grid.cols * grid.rows; }
};

// The original's rounding helpers, exposed for tests and callers that need the same arithmetic:
// ensure_divide(length, m) = max(round(length / m) * m, m) with Python's round (half to even:
// 6.5 -> 6, 7.5 -> 8, 120.5 -> 120), in double.
int64_t minicpmv_ensure_divide(double length, int multiple);

// Largest side, in pixels, of any image a plan may ask for (a very elongated image is resized to a
// long thin strip of about scale_resolution^2 pixels).
inline constexpr int kMaxMiniCpmvSide = 1 << 16;

// The original's slicing of a width x height image (get_sliced_grid, find_best_resize,
// get_refine_size): Python's round-half-to-even and int() truncation, computed in double.
// Error(Usage) for a non-positive size, a config with a non-positive resolution, patch or
// max_slice_nums, an image too small for slice_mode off (under one patch), and a plan that would
// resize to over kMaxMiniCpmvSide pixels on a side or kMaxImagePixels in all.
MiniCpmvSlicePlan plan_minicpmv_slices(int width, int height, const MiniCpmvSliceConfig& c);

// The vision inputs of one image in the original's order: the source image, then the cells row by
// row, left to right. Source and refine image are both resized from `image` (Pillow's BICUBIC).
// Error(Usage) when `image` is not the size the plan was made for.
std::vector<RgbImage> slice_minicpmv_image(const RgbImage& image, const MiniCpmvSlicePlan& plan);

// One vision input as the tower takes it: patch rows [grid_h * grid_w, 3 * p * p], patches
// row-major over the grid, columns ordered (channel, ky, kx) like a conv weight [out, 3, p, p],
// values (x / 255 - mean) / std in f32 (bit-exact with the original's float32 numpy).
struct VisionInput {
  int64_t grid_h = 0, grid_w = 0;  // tgt_size (rows, cols) in patches
  std::vector<float> patches;
};
// Error(Usage) when a side is not a positive multiple of the patch.
VisionInput minicpmv_patch_rows(const RgbImage& image, const MiniCpmvSliceConfig& c);

// The same rows from a reference pixel_values strip [3, p, n * p] (the original's reshape_by_patch
// layout: patch k in columns k*p .. k*p+p-1). Error(Usage) when the strip's size is not 3*p*p*n.
std::vector<float> patch_rows_from_strip(std::span<const float> strip, int64_t n_patches, int patch);

// NaViT's bucketised position ids for a grid_h x grid_w patch grid over a table_side x table_side
// position table: id(r, c) = bucket(grid_h)[r] * table_side + bucket(grid_w)[c]. Error(Usage) for
// sides outside 1..kMaxPatchGridSide or a table outside 1..kMaxPositionTableSide.
inline constexpr int64_t kMaxPatchGridSide = 1 << 15;
inline constexpr int64_t kMaxPositionTableSide = 1 << 12;
std::vector<int32_t> bucketed_position_ids(int64_t grid_h, int64_t grid_w, int64_t table_side);

// The 1-D buckets behind it for `nb` patches along one side:
//   boundaries = torch.arange(1/N, 1.0, 1/N); coords = torch.arange(0, 1 - 1e-6, 1/nb) (float32,
//   1/nb itself a float32); bucket = torch.bucketize(coords, boundaries, right=True),
// with ATen's CPU arange reproduced exactly: element i = float32(start + i*step) in double, except
// that its vectorised kernel, which fills the first 2W*floor(n/2W) elements, rounds each W-lane
// group's base start + i0*step to float32 first and adds (i - i0)*step to that.
// `arange_lanes` is W: 8 (the default) = the DEFAULT, AVX2 and NEON kernels, i.e. the reference
// environment's torch 1.13 on AVX2, which is what produced the goldens and what torch 1.13 runs
// on any x86 CPU unless told ATEN_CPU_CAPABILITY=avx512; 16 = the AVX-512 kernel (newer torch
// builds on AVX-512 CPUs). For the real table (N = 70) the two differ at nb 49, 58, 86, 98, 100
// (../shared/golden/minicpmv/vision_pos_buckets_real_n70.json); for arrays under 2W elements
// (every tiny golden) both are the scalar path.
std::vector<int32_t> navit_position_buckets(int64_t nb, int64_t table_side, int arange_lanes = 8);

// The text the processor puts in place of the i-th "(<image>./</image>)":
// "<image_id>i</image_id><image>" + "<unk>" x Q + "</image>" and, if sliced, the grid rows joined
// by "\n", each row cols x ("<slice>" + "<unk>" x Q + "</slice>") (use_image_id on, as in 2.6).
std::string minicpmv_image_text(int image_index, SliceGrid grid, int query_num);

inline constexpr std::string_view kMiniCpmvImagePlaceholder = "(<image>./</image>)";

// Replaces the placeholders of `prompt` in order by minicpmv_image_text (image i gets grids[i]).
// Error(Usage) when the number of placeholders differs from grids.size() (saying both counts and
// what the placeholder looks like), or for a non-positive query_num.
std::string expand_minicpmv_prompt(std::string_view prompt, std::span<const SliceGrid> grids, int query_num);

// The ids of the expanded prompt's image markers (tokenizer: "<image>", "</image>", "<slice>",
// "</slice>", "<unk>").
struct MiniCpmvTokenIds {
  int32_t image_start = -1, image_end = -1, slice_start = -1, slice_end = -1, unk = -1;
};
// One vision input's rows of the prompt, [start, end): the rows its Q embeddings replace.
struct ImageBound {
  int64_t start = 0, end = 0;
  bool operator==(const ImageBound&) const = default;
};
// The original's image_bound: start = index of each <image>/<slice> + 1, end = index of each
// </image>/</slice>, in order (one per vision input). Error(Usage) when the markers do not pair up
// or a range is not exactly query_num <unk> ids (e.g. a prompt that writes "<image>" as text).
std::vector<ImageBound> minicpmv_image_bounds(std::span<const int32_t> ids, const MiniCpmvTokenIds& t, int query_num);

}  // namespace ferry
