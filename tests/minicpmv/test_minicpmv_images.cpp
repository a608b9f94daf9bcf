// MiniCPM-V 2.6 preprocessing against the goldens of OpenBMB's original processor
// (../shared/golden/minicpmv): the slicing plan, Pillow's bicubic resize byte for byte, the patch
// rows, the bucketised NaViT position ids (also for the real 70x70 table, nb 1..100), the prompt
// expansion and its token ids and image bounds. Then the rules one by one: Python's rounding,
// the grid tie-break, slice_mode off, tiny and elongated images, and the errors.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "common/expect_error.h"
#include "core/error.h"
#include "engine/image.h"
#include "engine/minicpmv_images.h"
#include "minicpmv/minicpmv_case.h"
#include "text/tokenizer.h"
#include "text/tokenizer_loader.h"

namespace ferry {
namespace {

using testing::expect_error;
using testing::load_minicpmv_case;
using testing::MiniCpmvCase;
using testing::two_digits;

// ---------------------------------------------------------------------------------------------
// The golden cases.

class MiniCpmvGolden : public ::testing::TestWithParam<const char*> {
 protected:
  void SetUp() override { c_ = load_minicpmv_case(GetParam()); }
  MiniCpmvCase c_;

  RgbImage image(size_t i) const { return load_image(c_.image_path(i)); }
  MiniCpmvSlicePlan plan(size_t i) const {
    const RgbImage im = image(i);
    return plan_minicpmv_slices(im.width, im.height, c_.slice_config());
  }
  // The reference slice NN as an image (shape [h, w, 3]).
  RgbImage reference_slice(int i) const {
    const std::string key = "slice_" + two_digits(i) + "_rgb";
    const std::vector<int64_t> shape = c_.shape(key);
    return RgbImage{static_cast<int>(shape.at(1)), static_cast<int>(shape.at(0)), c_.u8(key)};
  }
};

TEST_P(MiniCpmvGolden, ConfigMatchesTheCase) {
  const MiniCpmvSliceConfig cfg = c_.slice_config();
  EXPECT_EQ(cfg.scale_resolution, c_.expected.at("preprocess").at("scale_resolution").get<int>());
  EXPECT_EQ(cfg.patch, c_.expected.at("preprocess").at("patch_size").get<int>());
  EXPECT_EQ(cfg.max_slice_nums, c_.expected.at("preprocess").at("max_slice_nums").get<int>());
  EXPECT_TRUE(cfg.slice_mode);
  EXPECT_EQ(c_.preprocessor.at("image_feature_size").get<int>(), c_.query_num());
  // The vision position table: vision image_size / patch.
  const nlohmann::json& v = c_.config.at("vision_config");
  EXPECT_EQ(v.at("image_size").get<int64_t>() / v.at("patch_size").get<int64_t>(), c_.position_table_side());
}

TEST_P(MiniCpmvGolden, SlicingPlan) {
  ASSERT_EQ(c_.n_images(), 1u);  // both cases hold one image; the plan sits on its first vision input
  const RgbImage im = image(0);
  const nlohmann::json& img = c_.expected.at("images").at(0);
  EXPECT_EQ(im.width, img.at("size_wh").at(0).get<int>());
  EXPECT_EQ(im.height, img.at("size_wh").at(1).get<int>());

  const MiniCpmvSlicePlan p = plan(0);
  const nlohmann::json& sp = c_.expected.at("slices").at(0).at("slicing_plan");
  EXPECT_EQ(p.width, sp.at("original_size_wh").at(0).get<int>());
  EXPECT_EQ(p.height, sp.at("original_size_wh").at(1).get<int>());
  const nlohmann::json& grid = sp.at("best_grid_cols_rows");
  if (grid.is_null()) {
    EXPECT_FALSE(p.grid.sliced());
    EXPECT_EQ(p.grid, SliceGrid{});
    EXPECT_FALSE(sp.contains("refine_size_wh"));
  } else {
    EXPECT_EQ(p.grid, (SliceGrid{grid.at(0).get<int>(), grid.at(1).get<int>()}));
    EXPECT_EQ(p.refine_w, sp.at("refine_size_wh").at(0).get<int>());
    EXPECT_EQ(p.refine_h, sp.at("refine_size_wh").at(1).get<int>());
    EXPECT_EQ(p.cell_w, sp.at("slice_size_wh").at(0).get<int>());
    EXPECT_EQ(p.cell_h, sp.at("slice_size_wh").at(1).get<int>());
  }
  EXPECT_EQ(p.source_w, sp.at("source_size_wh").at(0).get<int>());
  EXPECT_EQ(p.source_h, sp.at("source_size_wh").at(1).get<int>());
  EXPECT_FALSE(p.source_cropped);

  // Every vision input's size and tgt_size (rows, cols in patches), in order.
  ASSERT_EQ(p.vision_inputs(), c_.n_vision_inputs());
  const std::vector<int32_t> tgt = c_.i32("tgt_sizes");
  ASSERT_EQ(tgt.size(), static_cast<size_t>(2 * c_.n_vision_inputs()));
  const int patch = c_.slice_config().patch;
  for (int i = 0; i < c_.n_vision_inputs(); ++i) {
    const nlohmann::json& s = c_.expected.at("slices").at(static_cast<size_t>(i));
    const int w = i == 0 ? p.source_w : p.cell_w;
    const int h = i == 0 ? p.source_h : p.cell_h;
    EXPECT_EQ(w, s.at("size_wh").at(0).get<int>()) << "vision input " << i;
    EXPECT_EQ(h, s.at("size_wh").at(1).get<int>()) << "vision input " << i;
    EXPECT_EQ(h / patch, tgt[2 * static_cast<size_t>(i)]) << "vision input " << i;
    EXPECT_EQ(w / patch, tgt[2 * static_cast<size_t>(i) + 1]) << "vision input " << i;
    EXPECT_EQ(h / patch, s.at("tgt_size_hw").at(0).get<int>());
    EXPECT_EQ(w / patch, s.at("tgt_size_hw").at(1).get<int>());
  }
}

// load_image(png) -> plan -> slice: Pillow's BICUBIC resize (and the crops), byte for byte.
TEST_P(MiniCpmvGolden, SlicesEqualPillowByteForByte) {
  const RgbImage im = image(0);
  const std::vector<RgbImage> slices =
      slice_minicpmv_image(im, plan_minicpmv_slices(im.width, im.height, c_.slice_config()));
  ASSERT_EQ(static_cast<int>(slices.size()), c_.n_vision_inputs());
  for (int i = 0; i < c_.n_vision_inputs(); ++i) {
    const RgbImage ref = reference_slice(i);
    const RgbImage& got = slices[static_cast<size_t>(i)];
    ASSERT_EQ(got.width, ref.width) << "vision input " << i;
    ASSERT_EQ(got.height, ref.height) << "vision input " << i;
    ASSERT_EQ(got.rgb.size(), ref.rgb.size());
    size_t differing = 0;
    int max_diff = 0;
    for (size_t k = 0; k < ref.rgb.size(); ++k) {
      const int d = std::abs(int{got.rgb[k]} - int{ref.rgb[k]});
      differing += d != 0 ? 1 : 0;
      max_diff = std::max(max_diff, d);
    }
    EXPECT_EQ(differing, 0u) << "vision input " << i << ": " << differing << " of " << ref.rgb.size()
                             << " bytes differ from Pillow, max by " << max_diff;
  }
}

// The patch rows of the reference u8 slices equal the original's pixel_values, re-laid out.
TEST_P(MiniCpmvGolden, PatchRowsEqualPixelValues) {
  const MiniCpmvSliceConfig cfg = c_.slice_config();
  const std::vector<int32_t> tgt = c_.i32("tgt_sizes");
  for (int i = 0; i < c_.n_vision_inputs(); ++i) {
    const VisionInput in = minicpmv_patch_rows(reference_slice(i), cfg);
    EXPECT_EQ(in.grid_h, tgt[2 * static_cast<size_t>(i)]);
    EXPECT_EQ(in.grid_w, tgt[2 * static_cast<size_t>(i) + 1]);
    const std::string key = "pixel_values_" + two_digits(i);
    const std::vector<int64_t> shape = c_.shape(key);
    ASSERT_EQ(shape, (std::vector<int64_t>{3, cfg.patch, in.grid_h * in.grid_w * cfg.patch}));
    const std::vector<float> ref = patch_rows_from_strip(c_.f32(key), in.grid_h * in.grid_w, cfg.patch);
    ASSERT_EQ(in.patches.size(), ref.size());
    float max_diff = 0;
    for (size_t k = 0; k < ref.size(); ++k) max_diff = std::max(max_diff, std::abs(in.patches[k] - ref[k]));
    EXPECT_LE(max_diff, 1e-6f) << key;
    EXPECT_EQ(max_diff, 0.0f) << key << ": the original's float32 arithmetic is reproduced exactly";
  }
}

TEST_P(MiniCpmvGolden, BucketedPositionIds) {
  const std::vector<int32_t> tgt = c_.i32("tgt_sizes");
  for (int i = 0; i < c_.n_vision_inputs(); ++i) {
    const std::vector<int32_t> ids = bucketed_position_ids(
        tgt[2 * static_cast<size_t>(i)], tgt[2 * static_cast<size_t>(i) + 1], c_.position_table_side());
    EXPECT_EQ(ids, c_.i32("vision_pos_ids_" + two_digits(i))) << "vision input " << i;
  }
}

TEST_P(MiniCpmvGolden, PromptExpansionTokensAndImageBounds) {
  const int q = c_.query_num();
  std::vector<SliceGrid> grids;
  for (size_t i = 0; i < c_.n_images(); ++i) grids.push_back(plan(i).grid);
  const std::string expanded = expand_minicpmv_prompt(c_.text("prompt.txt"), grids, q);
  EXPECT_EQ(c_.text("prompt.txt"), c_.expected.at("prompt").get<std::string>());
  EXPECT_EQ(expanded, c_.text("prompt_expanded.txt"));
  EXPECT_EQ(expanded, c_.expected.at("prompt_expanded").get<std::string>());

  const Tokenizer tok = load_tokenizer(c_.model_dir());
  const std::vector<int32_t> ids = tok.encode(expanded, /*add_special=*/true);
  EXPECT_EQ(ids, c_.i32("input_ids"));
  EXPECT_EQ(ids, c_.expected.at("input_ids").get<std::vector<int32_t>>());

  const MiniCpmvTokenIds t{tok.find_token("<image>"), tok.find_token("</image>"), tok.find_token("<slice>"),
                           tok.find_token("</slice>"), tok.find_token("<unk>")};
  const std::vector<ImageBound> bounds = minicpmv_image_bounds(ids, t, q);
  const std::vector<int32_t> ref = c_.i32("image_bound");
  ASSERT_EQ(bounds.size() * 2, ref.size());
  ASSERT_EQ(static_cast<int>(bounds.size()), c_.n_vision_inputs());
  for (size_t i = 0; i < bounds.size(); ++i) {
    EXPECT_EQ(bounds[i].start, ref[2 * i]) << "vision input " << i;
    EXPECT_EQ(bounds[i].end, ref[2 * i + 1]) << "vision input " << i;
    EXPECT_EQ(bounds[i].end - bounds[i].start, q);
  }
}

INSTANTIATE_TEST_SUITE_P(Cases, MiniCpmvGolden, ::testing::ValuesIn(testing::kMiniCpmvCases),
                         [](const ::testing::TestParamInfo<const char*>& param_info) {
                           return std::string(param_info.param);
                         });

// ---------------------------------------------------------------------------------------------
// The real 70x70 table: every nb in 1..100 against what the original produced under each ATen
// CPU kernel (vision_pos_buckets_real_n70.json).

TEST(MiniCpmvPositions, RealTableN70AllKernels) {
  const nlohmann::json ref =
      testing::read_json_file(testing::minicpmv_golden_dir() + "/vision_pos_buckets_real_n70.json");
  ASSERT_EQ(ref.at("N").get<int64_t>(), 70);
  const nlohmann::json& table = ref.at("table");
  for (int64_t nb = 1; nb <= 100; ++nb) {
    const nlohmann::json& row = table.at(std::to_string(nb));
    const auto lane8 = row.at("torch_cpu_8lane").get<std::vector<int32_t>>();
    EXPECT_EQ(navit_position_buckets(nb, 70), lane8) << "nb " << nb << " (8 lanes, the default)";
    EXPECT_EQ(navit_position_buckets(nb, 70, 8), lane8) << "nb " << nb;
    EXPECT_EQ(navit_position_buckets(nb, 70, 16), row.at("torch_cpu_16lane_avx512").get<std::vector<int32_t>>())
        << "nb " << nb << " (16 lanes)";
    EXPECT_EQ(navit_position_buckets(nb, 70, 0), row.at("scalar_double_then_f32").get<std::vector<int32_t>>())
        << "nb " << nb << " (scalar)";
    // bucketed_position_ids takes the 8-lane column, along either side.
    std::vector<int32_t> along_w = bucketed_position_ids(1, nb, 70);
    EXPECT_EQ(along_w, lane8) << "nb " << nb;
    std::vector<int32_t> along_h = bucketed_position_ids(nb, 1, 70);
    for (int32_t& id : along_h) id /= 70;
    EXPECT_EQ(along_h, lane8) << "nb " << nb;
  }
  // The columns really differ where the JSON says (so the test above tells the kernels apart).
  for (const auto& nb : ref.at("differs").at("lane8_vs_lane16")) {
    const nlohmann::json& row = table.at(std::to_string(nb.get<int>()));
    EXPECT_NE(row.at("torch_cpu_8lane"), row.at("torch_cpu_16lane_avx512")) << "nb " << nb;
  }
}

TEST(MiniCpmvPositions, GridIdsAreRowBucketTimesSidePlusColumnBucket) {
  const std::vector<int32_t> ids = bucketed_position_ids(2, 3, 16);
  // rows: arange(0, 1, 1/2) = {0, .5} -> buckets {0, 8}; cols {0, 1/3, 2/3} -> {0, 5, 10}.
  EXPECT_EQ(ids, (std::vector<int32_t>{0, 5, 10, 128, 133, 138}));
  // More patches than table rows: several patches share a row.
  const std::vector<int32_t> b = navit_position_buckets(4, 2);
  EXPECT_EQ(b, (std::vector<int32_t>{0, 0, 1, 1}));
  // A 1x1 table: no boundaries, every patch on row 0.
  EXPECT_EQ(bucketed_position_ids(2, 2, 1), (std::vector<int32_t>{0, 0, 0, 0}));
}

TEST(MiniCpmvPositions, Errors) {
  expect_error([] { bucketed_position_ids(0, 3, 70); }, ErrorKind::Usage, {"grid height", "0"});
  expect_error([] { bucketed_position_ids(3, -1, 70); }, ErrorKind::Usage, {"grid width", "-1"});
  expect_error([] { bucketed_position_ids(3, kMaxPatchGridSide + 1, 70); }, ErrorKind::Usage, {"grid width"});
  expect_error([] { bucketed_position_ids(3, 3, 0); }, ErrorKind::Usage, {"position table", "image_size / patch_size"});
  expect_error([] { navit_position_buckets(3, 70, -1); }, ErrorKind::Usage, {"lanes"});
}

// ---------------------------------------------------------------------------------------------
// The rules, one by one.

MiniCpmvSliceConfig config(int scale_resolution, int max_slice_nums = 9) {
  MiniCpmvSliceConfig c;
  c.scale_resolution = scale_resolution;
  c.max_slice_nums = max_slice_nums;
  return c;
}

TEST(MiniCpmvSlicing, PythonRoundHalfToEven) {
  EXPECT_EQ(minicpmv_ensure_divide(91, 14), 84);    // 6.5 -> 6 (C's round: 7 -> 98)
  EXPECT_EQ(minicpmv_ensure_divide(105, 14), 112);  // 7.5 -> 8
  EXPECT_EQ(minicpmv_ensure_divide(241, 2), 240);   // 120.5 -> 120 (C's round: 121 -> 242)
  EXPECT_EQ(minicpmv_ensure_divide(243, 2), 244);   // 121.5 -> 122
  EXPECT_EQ(minicpmv_ensure_divide(3, 14), 14);     // never below one patch
  EXPECT_EQ(minicpmv_ensure_divide(120.5 * 14 + 0.001, 14), 121 * 14);

  // Through the plans: the unsliced 81x54 upscale hits 91 / 14 = 6.5 (height 84, not 98) ...
  MiniCpmvSlicePlan p = plan_minicpmv_slices(81, 54, config(112));
  EXPECT_EQ(p.source_w, 140);
  EXPECT_EQ(p.source_h, 84);
  // ... 241x162 hits it for the thumbnail and 241 / 2 = 120.5 for the refine width: rounding half
  // away from zero would give refine width 242 and then 140x84 cells instead of 140x98.
  p = plan_minicpmv_slices(241, 162, config(112));
  EXPECT_EQ(p.grid, (SliceGrid{2, 2}));
  EXPECT_EQ(p.source_w, 140);
  EXPECT_EQ(p.source_h, 84);
  EXPECT_EQ(p.cell_w, 140);
  EXPECT_EQ(p.cell_h, 98);
  // 7.5 -> 8 through a plan: a 50x50 image upscaled to 105x105 lands on 112x112.
  p = plan_minicpmv_slices(50, 50, config(105));
  EXPECT_EQ(p.source_w, 112);
  EXPECT_EQ(p.source_h, 112);
}

TEST(MiniCpmvSlicing, SquareImageTieBreakTakesTheFirstGrid) {
  // 150x150 at 112: ratio 1.79 -> multiple 2; [1, 2] and [2, 1] tie, the first wins: 1 col x 2 rows.
  const MiniCpmvSlicePlan p = plan_minicpmv_slices(150, 150, config(112));
  EXPECT_EQ(p.grid, (SliceGrid{1, 2}));
  EXPECT_EQ(p.vision_inputs(), 3);
  EXPECT_EQ(p.source_w, 112);
  EXPECT_EQ(p.source_h, 112);
  EXPECT_EQ(p.refine_w, 154);
  EXPECT_EQ(p.refine_h, 168);
  EXPECT_EQ(p.cell_w, 154);
  EXPECT_EQ(p.cell_h, 84);
  EXPECT_EQ(plan_minicpmv_slices(449, 449, MiniCpmvSliceConfig{}).grid, (SliceGrid{1, 2}));
}

// Plans of the real configuration (448, 9 slices), from the original's code run in Python.
TEST(MiniCpmvSlicing, RealConfigPlansMatchTheOriginal) {
  struct Row {
    int w, h;
    SliceGrid grid;
    int source_w, source_h, refine_w, refine_h, cell_w, cell_h;
  };
  const Row rows[] = {
      {1920, 1080, {4, 2}, 602, 336, 1680, 952, 420, 476},
      {1080, 1920, {2, 4}, 336, 602, 952, 1680, 476, 420},
      {4000, 3000, {3, 3}, 518, 392, 1554, 1176, 518, 392},
      {800, 600, {2, 2}, 518, 392, 1036, 784, 518, 392},
      {448, 448, {0, 0}, 448, 448, 0, 0, 0, 0},
      {449, 449, {1, 2}, 448, 448, 630, 644, 630, 322},
      {1, 1, {0, 0}, 448, 448, 0, 0, 0, 0},
      {3, 1, {0, 0}, 770, 252, 0, 0, 0, 0},
      {640, 480, {2, 1}, 518, 392, 728, 546, 364, 546},
      {1344, 1344, {3, 3}, 448, 448, 1344, 1344, 448, 448},
      {2000, 500, {4, 1}, 896, 224, 1792, 448, 448, 448},
      {10000, 100, {6, 1}, 4396, 42, 10920, 112, 1820, 112},
      {333, 777, {1, 2}, 294, 686, 420, 952, 420, 476},
      {1000, 1001, {2, 2}, 448, 448, 896, 896, 448, 448},
  };
  for (const Row& r : rows) {
    const MiniCpmvSlicePlan p = plan_minicpmv_slices(r.w, r.h, MiniCpmvSliceConfig{});
    const std::string at = std::to_string(r.w) + "x" + std::to_string(r.h);
    EXPECT_EQ(p.grid, r.grid) << at;
    EXPECT_EQ(p.source_w, r.source_w) << at;
    EXPECT_EQ(p.source_h, r.source_h) << at;
    EXPECT_EQ(p.refine_w, r.refine_w) << at;
    EXPECT_EQ(p.refine_h, r.refine_h) << at;
    EXPECT_EQ(p.cell_w, r.cell_w) << at;
    EXPECT_EQ(p.cell_h, r.cell_h) << at;
  }
}

TEST(MiniCpmvSlicing, MaxSliceNumsCapsTheCandidates) {
  // 4000x3000 at 448: multiple 9, candidates 8 and 9 (10 > 9): 3x3.
  EXPECT_EQ(plan_minicpmv_slices(4000, 3000, MiniCpmvSliceConfig{}).grid, (SliceGrid{3, 3}));
  // max_slice_nums 2: multiple 2, candidates 2 only (1 and 3 dropped): a wide image gets 2x1.
  EXPECT_EQ(plan_minicpmv_slices(4000, 3000, config(448, 2)).grid, (SliceGrid{2, 1}));
  // max_slice_nums 1: never sliced, resized to about 448^2.
  const MiniCpmvSlicePlan p = plan_minicpmv_slices(4000, 3000, config(448, 1));
  EXPECT_FALSE(p.grid.sliced());
  EXPECT_EQ(p.vision_inputs(), 1);
  EXPECT_EQ(p.source_w, 518);
  EXPECT_EQ(p.source_h, 392);
}

TEST(MiniCpmvSlicing, SlicesAreCutRowByRowFromTheRefineImage) {
  RgbImage im{300, 200, std::vector<uint8_t>(300 * 200 * 3)};
  for (size_t k = 0; k < im.rgb.size(); ++k) im.rgb[k] = static_cast<uint8_t>((k * 7919) % 251);
  const MiniCpmvSlicePlan p = plan_minicpmv_slices(im.width, im.height, config(112));
  ASSERT_TRUE(p.grid.sliced());
  const std::vector<RgbImage> out = slice_minicpmv_image(im, p);
  ASSERT_EQ(static_cast<int>(out.size()), p.vision_inputs());
  EXPECT_EQ(out[0].rgb, resize_bicubic(im, p.source_w, p.source_h).rgb);
  const RgbImage refine = resize_bicubic(im, p.refine_w, p.refine_h);
  for (int r = 0; r < p.grid.rows; ++r) {
    for (int c = 0; c < p.grid.cols; ++c) {
      const RgbImage& cell = out[static_cast<size_t>(1 + r * p.grid.cols + c)];
      ASSERT_EQ(cell.width, p.cell_w);
      ASSERT_EQ(cell.height, p.cell_h);
      for (int y = 0; y < p.cell_h; y += 7) {
        for (int x = 0; x < p.cell_w; x += 5) {
          const size_t src = (static_cast<size_t>(r * p.cell_h + y) * static_cast<size_t>(p.refine_w) +
                              static_cast<size_t>(c * p.cell_w + x)) *
                             3;
          const size_t dst = (static_cast<size_t>(y) * static_cast<size_t>(p.cell_w) + static_cast<size_t>(x)) * 3;
          ASSERT_EQ(cell.rgb[dst + 1], refine.rgb[src + 1]) << "cell " << r << "," << c;
        }
      }
    }
  }
}

TEST(MiniCpmvSlicing, SliceModeOffTakesTheImageAsItIs) {
  MiniCpmvSliceConfig c = config(112);
  c.slice_mode = false;
  // Large enough to be sliced with slice_mode on; off, the original returns the image itself and
  // its patch unfold drops the partial patches at the right and bottom.
  RgbImage im{300, 200, std::vector<uint8_t>(300 * 200 * 3)};
  for (size_t k = 0; k < im.rgb.size(); ++k) im.rgb[k] = static_cast<uint8_t>(k % 253);
  const MiniCpmvSlicePlan p = plan_minicpmv_slices(im.width, im.height, c);
  EXPECT_FALSE(p.grid.sliced());
  EXPECT_TRUE(p.source_cropped);
  EXPECT_EQ(p.vision_inputs(), 1);
  EXPECT_EQ(p.source_w, 294);
  EXPECT_EQ(p.source_h, 196);
  const std::vector<RgbImage> out = slice_minicpmv_image(im, p);
  ASSERT_EQ(out.size(), 1u);
  ASSERT_EQ(out[0].width, 294);
  ASSERT_EQ(out[0].height, 196);
  for (int y = 0; y < 196; ++y) {
    for (int x = 0; x < 294 * 3; ++x) {
      ASSERT_EQ(out[0].rgb[static_cast<size_t>(y * 294 * 3 + x)], im.rgb[static_cast<size_t>(y * 300 * 3 + x)]);
    }
  }
  // No slice placeholders either.
  const std::vector<SliceGrid> grids{p.grid};
  EXPECT_EQ(expand_minicpmv_prompt("(<image>./</image>)", grids, 1), "<image_id>0</image_id><image><unk></image>");
  // Under one patch: refused.
  expect_error([&] { plan_minicpmv_slices(13, 100, c); }, ErrorKind::Usage, {"13x100", "slice_mode off"});
}

TEST(MiniCpmvSlicing, TinyImagesAreUpscaled) {
  const MiniCpmvSlicePlan p = plan_minicpmv_slices(1, 1, MiniCpmvSliceConfig{});
  EXPECT_FALSE(p.grid.sliced());
  EXPECT_EQ(p.source_w, 448);
  EXPECT_EQ(p.source_h, 448);
  const RgbImage im{1, 1, {10, 200, 30}};
  const std::vector<RgbImage> out = slice_minicpmv_image(im, p);
  ASSERT_EQ(out.size(), 1u);
  ASSERT_EQ(out[0].width, 448);
  ASSERT_EQ(out[0].height, 448);
  for (size_t k = 0; k < out[0].rgb.size(); k += 3) {
    ASSERT_EQ(out[0].rgb[k], 10);
    ASSERT_EQ(out[0].rgb[k + 1], 200);
    ASSERT_EQ(out[0].rgb[k + 2], 30);
  }
  const VisionInput in = minicpmv_patch_rows(out[0], MiniCpmvSliceConfig{});
  EXPECT_EQ(in.grid_h, 32);
  EXPECT_EQ(in.grid_w, 32);
  EXPECT_EQ(in.patches.size(), 32u * 32u * 3u * 14u * 14u);
}

TEST(MiniCpmvSlicing, ElongatedImages) {
  // 1x10000: a 14x44800 strip (int() truncation: w' = int(44800 * 1e-4) = 4 -> one patch).
  const MiniCpmvSlicePlan p = plan_minicpmv_slices(1, 10000, MiniCpmvSliceConfig{});
  EXPECT_FALSE(p.grid.sliced());
  EXPECT_EQ(p.source_w, 14);
  EXPECT_EQ(p.source_h, 44800);
  // 1x100000 would need a 141666-pixel side: refused.
  expect_error([] { plan_minicpmv_slices(1, 100000, MiniCpmvSliceConfig{}); }, ErrorKind::Usage,
               {"1x100000", "too elongated"});
}

TEST(MiniCpmvSlicing, Errors) {
  expect_error([] { plan_minicpmv_slices(0, 10, MiniCpmvSliceConfig{}); }, ErrorKind::Usage, {"0x10"});
  expect_error([] { plan_minicpmv_slices(10, -3, MiniCpmvSliceConfig{}); }, ErrorKind::Usage, {"10x-3"});
  expect_error([] { plan_minicpmv_slices(10, 10, config(0)); }, ErrorKind::Usage, {"scale_resolution 0"});
  expect_error([] { plan_minicpmv_slices(10, 10, config(448, 0)); }, ErrorKind::Usage, {"max_slice_nums 0"});
  MiniCpmvSliceConfig bad_std;
  bad_std.std[1] = 0.0f;
  expect_error([&] { plan_minicpmv_slices(10, 10, bad_std); }, ErrorKind::Usage, {"norm_std[1]"});

  const RgbImage im{20, 10, std::vector<uint8_t>(20 * 10 * 3)};
  const MiniCpmvSlicePlan other = plan_minicpmv_slices(30, 10, MiniCpmvSliceConfig{});
  expect_error([&] { slice_minicpmv_image(im, other); }, ErrorKind::Usage, {"30x10", "20x10"});
  expect_error([&] { slice_minicpmv_image(RgbImage{20, 10, {}}, other); }, ErrorKind::Usage, {"20x10"});
  expect_error([&] { minicpmv_patch_rows(im, MiniCpmvSliceConfig{}); }, ErrorKind::Usage, {"20x10", "14x14"});
  expect_error([] { patch_rows_from_strip(std::vector<float>(10), 1, 14); }, ErrorKind::Usage, {"10 floats"});
}

// ---------------------------------------------------------------------------------------------
// Patch rows.

TEST(MiniCpmvPatchRows, LayoutAndNormalisation) {
  // 2x1 patches of 2x2: pixel (x, y) channel c = 10 * x + 100 * y + c.
  const int p = 2;
  RgbImage im{4, 2, std::vector<uint8_t>(4 * 2 * 3)};
  for (int y = 0; y < 2; ++y)
    for (int x = 0; x < 4; ++x)
      for (int c = 0; c < 3; ++c)
        im.rgb[static_cast<size_t>((y * 4 + x) * 3 + c)] = static_cast<uint8_t>(10 * x + 100 * y + c);
  MiniCpmvSliceConfig cfg;
  cfg.patch = p;
  cfg.mean = {0.25f, 0.5f, 0.75f};
  cfg.std = {0.5f, 0.25f, 2.0f};
  const VisionInput in = minicpmv_patch_rows(im, cfg);
  ASSERT_EQ(in.grid_h, 1);
  ASSERT_EQ(in.grid_w, 2);
  ASSERT_EQ(in.patches.size(), 2u * 3u * 4u);
  for (int k = 0; k < 2; ++k) {
    for (int c = 0; c < 3; ++c) {
      for (int ky = 0; ky < p; ++ky) {
        for (int kx = 0; kx < p; ++kx) {
          const auto u8 = static_cast<float>(10 * (k * p + kx) + 100 * ky + c);
          const float want = (u8 / 255.0f - cfg.mean[static_cast<size_t>(c)]) / cfg.std[static_cast<size_t>(c)];
          EXPECT_EQ(in.patches[static_cast<size_t>(k * 12 + c * 4 + ky * 2 + kx)], want) << k << c << ky << kx;
        }
      }
    }
  }
  // The same rows from the reference strip layout [3, p, n * p].
  std::vector<float> strip(3 * 2 * 4);
  for (int c = 0; c < 3; ++c)
    for (int y = 0; y < 2; ++y)
      for (int x = 0; x < 4; ++x)
        strip[static_cast<size_t>((c * 2 + y) * 4 + x)] =
            (static_cast<float>(10 * x + 100 * y + c) / 255.0f - cfg.mean[static_cast<size_t>(c)]) /
            cfg.std[static_cast<size_t>(c)];
  EXPECT_EQ(patch_rows_from_strip(strip, 2, p), in.patches);
}

// ---------------------------------------------------------------------------------------------
// Prompt text.

TEST(MiniCpmvPrompt, ImageTextLayout) {
  EXPECT_EQ(minicpmv_image_text(0, SliceGrid{}, 2), "<image_id>0</image_id><image><unk><unk></image>");
  EXPECT_EQ(minicpmv_image_text(12, SliceGrid{3, 2}, 1),
            "<image_id>12</image_id><image><unk></image>"
            "<slice><unk></slice><slice><unk></slice><slice><unk></slice>\n"
            "<slice><unk></slice><slice><unk></slice><slice><unk></slice>");
  EXPECT_EQ(minicpmv_image_text(1, SliceGrid{1, 2}, 1),
            "<image_id>1</image_id><image><unk></image><slice><unk></slice>\n<slice><unk></slice>");
  expect_error([] { minicpmv_image_text(0, SliceGrid{}, 0); }, ErrorKind::Usage, {"query_num 0"});
  expect_error([] { minicpmv_image_text(0, SliceGrid{2, 0}, 4); }, ErrorKind::Usage, {"grid 2x0"});
}

TEST(MiniCpmvPrompt, SeveralImagesAreNumberedInOrder) {
  const std::vector<SliceGrid> grids{SliceGrid{}, SliceGrid{2, 1}};
  EXPECT_EQ(expand_minicpmv_prompt("a(<image>./</image>)\n(<image>./</image>)b", grids, 1),
            "a<image_id>0</image_id><image><unk></image>\n"
            "<image_id>1</image_id><image><unk></image><slice><unk></slice><slice><unk></slice>b");
  EXPECT_EQ(expand_minicpmv_prompt("no image", {}, 4), "no image");
}

TEST(MiniCpmvPrompt, PlaceholderCountErrors) {
  const std::vector<SliceGrid> one{SliceGrid{}};
  const std::vector<SliceGrid> two{SliceGrid{}, SliceGrid{2, 2}};
  expect_error([&] { expand_minicpmv_prompt("(<image>./</image>)(<image>./</image>) hi", one, 4); }, ErrorKind::Usage,
               {"2 image placeholder", "1 image", "(<image>./</image>)"});
  expect_error([&] { expand_minicpmv_prompt("hi", one, 4); }, ErrorKind::Usage,
               {"0 image placeholder", "1 image", "(<image>./</image>)"});
  expect_error([&] { expand_minicpmv_prompt("(<image>./</image>)", two, 4); }, ErrorKind::Usage,
               {"1 image placeholder", "2 image"});
  // A near miss is not a placeholder.
  expect_error([&] { expand_minicpmv_prompt("(<image>/</image>)", one, 4); }, ErrorKind::Usage,
               {"0 image placeholder"});
  expect_error([&] { expand_minicpmv_prompt("(<image>./</image>)", one, 0); }, ErrorKind::Usage, {"query_num 0"});
}

TEST(MiniCpmvPrompt, ImageBoundsRefuseBrokenMarkers) {
  const MiniCpmvTokenIds t{1, 2, 3, 4, 9};
  EXPECT_EQ(minicpmv_image_bounds(std::vector<int32_t>{7, 1, 9, 9, 2, 3, 9, 9, 4, 8}, t, 2),
            (std::vector<ImageBound>{{2, 4}, {6, 8}}));
  expect_error([&] { minicpmv_image_bounds(std::vector<int32_t>{1, 9, 9}, t, 2); }, ErrorKind::Usage, {"never closed"});
  expect_error(
      [&] {
        minicpmv_image_bounds(std::vector<int32_t>{9, 2}, t, 2);
      },
      ErrorKind::Usage, {"without its start"});
  expect_error(
      [&] {
        minicpmv_image_bounds(std::vector<int32_t>{1, 9, 2}, t, 2);
      },
      ErrorKind::Usage, {"[1, 2)", "2 <unk>"});
  expect_error([&] { minicpmv_image_bounds(std::vector<int32_t>{1, 9, 7, 2}, t, 2); }, ErrorKind::Usage, {"[1, 3)"});
}

}  // namespace
}  // namespace ferry
