// The MiniCPM-V 2.6 golden cases (../shared/golden/minicpmv/<case>): expected.json, the raw
// little-endian reference tensors it lists (shape- and dtype-checked on reading), the prompt
// files, the input image(s) and the model directory's processor settings.
#pragma once

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "common/golden_dir.h"
#include "engine/minicpmv_images.h"
#include "engine/session.h"

namespace ferry::testing {

inline const char* const kMiniCpmvCases[] = {"minicpmv26_slice2x2_strong", "minicpmv26_noslice_h256_strong"};

inline std::string minicpmv_golden_dir() {
  return golden_dir() + "/minicpmv";
}

// The whole file's bytes; fails the calling test when it cannot be read.
inline std::string read_file_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  EXPECT_TRUE(in.good()) << "cannot open " << path;
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

inline nlohmann::json read_json_file(const std::string& path) {
  const std::string text = read_file_bytes(path);
  nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  EXPECT_FALSE(j.is_discarded()) << "not JSON: " << path;
  return j;
}

// Two digits: the NN of slice_NN_rgb, pixel_values_NN, vision_pos_ids_NN, vision_out_NN.
inline std::string two_digits(int i) {
  return fmt::format("{:02d}", i);
}

struct MiniCpmvCase {
  std::string name;
  std::string dir;
  nlohmann::json expected;      // expected.json
  nlohmann::json preprocessor;  // model/preprocessor_config.json
  nlohmann::json config;        // model/config.json

  std::string path(const std::string& file) const { return dir + "/" + file; }
  std::string model_dir() const { return dir + "/" + expected.value("model_dir", std::string("model")); }
  std::string text(const std::string& file) const { return read_file_bytes(path(file)); }

  int n_vision_inputs() const { return expected.at("n_vision_inputs").get<int>(); }
  int query_num() const { return expected.at("query_num").get<int>(); }
  int64_t position_table_side() const { return expected.at("vision_position_table_side").get<int64_t>(); }
  size_t n_images() const { return expected.at("images").size(); }
  std::string image_path(size_t i) const { return path(expected.at("images").at(i).at("file").get<std::string>()); }

  // preprocessor_config.json as the processor reads it.
  MiniCpmvSliceConfig slice_config() const {
    MiniCpmvSliceConfig c;
    c.scale_resolution = preprocessor.at("scale_resolution").get<int>();
    c.patch = preprocessor.at("patch_size").get<int>();
    c.max_slice_nums = preprocessor.at("max_slice_nums").get<int>();
    c.slice_mode = preprocessor.value("slice_mode", true);
    for (size_t i = 0; i < 3; ++i) {
      c.mean[i] = preprocessor.at("norm_mean").at(i).get<float>();
      c.std[i] = preprocessor.at("norm_std").at(i).get<float>();
    }
    return c;
  }

  // The raw tensor `key` of expected.json's "files" (e.g. "pixel_values_00"), checked against the
  // dtype it lists ("float32-le", "int32-le", "uint8") and the element count of its shape.
  template <typename T>
  std::vector<T> tensor(const std::string& key, const char* dtype) const {
    const nlohmann::json& f = expected.at("files").at(key);
    EXPECT_EQ(f.at("dtype").get<std::string>(), dtype) << key;
    size_t numel = 1;
    for (const auto& d : f.at("shape")) numel *= d.get<size_t>();
    const std::string bytes = read_file_bytes(path(f.at("file").get<std::string>()));
    EXPECT_EQ(bytes.size(), numel * sizeof(T)) << key << ": " << f.at("file") << " size vs shape " << f.at("shape");
    std::vector<T> out(bytes.size() / sizeof(T));
    std::memcpy(out.data(), bytes.data(), out.size() * sizeof(T));  // little-endian host assumed
    return out;
  }
  std::vector<float> f32(const std::string& key) const { return tensor<float>(key, "float32-le"); }
  std::vector<int32_t> i32(const std::string& key) const { return tensor<int32_t>(key, "int32-le"); }
  std::vector<uint8_t> u8(const std::string& key) const { return tensor<uint8_t>(key, "uint8"); }
  std::vector<int64_t> shape(const std::string& key) const {
    return expected.at("files").at(key).at("shape").get<std::vector<int64_t>>();
  }
};

// Vision inputs [first, first + count) of the case as the tower takes them, from the reference
// processor's output (pixel_values_NN, vision_pos_ids_NN, tgt_sizes); count -1: to the last.
inline VisionBatch reference_vision_batch(const MiniCpmvCase& c, int first = 0, int count = -1) {
  const std::vector<int32_t> tgt = c.i32("tgt_sizes");
  const int patch = c.preprocessor.at("patch_size").get<int>();
  const int last = count < 0 ? c.n_vision_inputs() : first + count;
  VisionBatch b;
  for (int i = first; i < last; ++i) {
    const VisionGrid grid{tgt[static_cast<size_t>(2 * i)], tgt[static_cast<size_t>(2 * i + 1)]};
    const std::vector<float> rows =
        patch_rows_from_strip(c.f32("pixel_values_" + two_digits(i)), grid.patches(), patch);
    const std::vector<int32_t> pos = c.i32("vision_pos_ids_" + two_digits(i));
    b.grids.push_back(grid);
    b.patches.insert(b.patches.end(), rows.begin(), rows.end());
    b.positions.insert(b.positions.end(), pos.begin(), pos.end());
  }
  return b;
}

inline MiniCpmvCase load_minicpmv_case(const std::string& name) {
  MiniCpmvCase c;
  c.name = name;
  c.dir = minicpmv_golden_dir() + "/" + name;
  c.expected = read_json_file(c.path("expected.json"));
  c.preprocessor = read_json_file(c.model_dir() + "/preprocessor_config.json");
  c.config = read_json_file(c.model_dir() + "/config.json");
  return c;
}

}  // namespace ferry::testing
