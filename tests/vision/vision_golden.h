// The GLM-4V golden cases (../shared/golden/glm/glm4v_*): reference tensors read raw, the model
// loaded on one device, and a greedy run through ferry's vision + splice path.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "backends/cpu/cpu_device.h"
#include "common/golden_dir.h"
#include "core/device.h"
#include "engine/checkpoint.h"
#include "engine/image_processor.h"
#include "engine/image_prompt.h"
#include "engine/session.h"
#include "engine/weight_loader.h"
#include "models/vision.h"

namespace ferry::testing {

inline const char* const kVisionCases[] = {"glm4v_rope1", "glm4v_rope1_strong", "glm4v_rope500_strong"};

inline std::string vision_case_dir(const std::string& name) {
  return golden_dir() + "/glm/" + name;
}

template <typename T>
std::vector<T> read_raw(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  EXPECT_TRUE(in.good()) << "cannot open " << path;
  std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::vector<T> out(bytes.size() / sizeof(T));
  std::copy(bytes.begin(), bytes.begin() + static_cast<std::ptrdiff_t>(out.size() * sizeof(T)),
            reinterpret_cast<char*>(out.data()));
  return out;
}

inline nlohmann::json read_expected(const std::string& dir) {
  std::ifstream in(dir + "/expected.json");
  return nlohmann::json::parse(in);
}

inline float max_abs_diff(const std::vector<float>& a, const std::vector<float>& b) {
  EXPECT_EQ(a.size(), b.size());
  float d = 0;
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i) d = std::max(d, std::abs(a[i] - b[i]));
  return d;
}

// One image's pixel values [3, size, size] (CHW) as the tower's inputs.
inline VisionBatch pixel_batch(const std::vector<float>& values, const VisionConfig& v) {
  VisionBatch b;
  b.grids = {VisionGrid{v.image_size / v.patch, v.image_size / v.patch}};
  b.patches = chw_patch_rows(values, 3, v.image_size, v.image_size, v.patch);
  b.positions = learned_positions(v, b.grids);
  return b;
}

struct VisionRun {
  std::vector<float> image_embeds;              // [text_tokens, hidden]
  std::vector<int32_t> tokens;                  // greedy continuation
  std::vector<std::vector<float>> step_logits;  // logits of every greedy step
};

// `steps` greedy tokens after the prompt's logits, into r.
inline void continue_greedy(Session& s, std::vector<float> logits, int steps, VisionRun& r) {
  for (int i = 0; i < steps; ++i) {
    r.step_logits.push_back(logits);
    const auto next = static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
    r.tokens.push_back(next);
    if (i + 1 < steps) logits = s.eval(std::vector<int32_t>{next});
  }
}

// The golden prompt with one image, then `steps` greedy tokens.
inline VisionRun run_greedy(Session& s, const ModelConfig& config, const std::vector<int32_t>& prompt,
                            const VisionBatch& pixels, int steps) {
  VisionRun r;
  r.image_embeds = s.encode_images(pixels);
  const ImagePrompt p = expand_image_prompt(config.vision, prompt, 1);
  continue_greedy(s, s.eval_with_images(p.tokens, p.positions, p.image_row, r.image_embeds), steps, r);
  return r;
}

// The same as the CLI runs it: the embeddings stay on the projector's device and are attached to
// the session, whose next eval expands the prompt's image span into them.
inline VisionRun run_greedy_on_device(Session& s, const std::vector<int32_t>& prompt, const VisionBatch& pixels,
                                      int steps) {
  VisionRun r;
  Tensor embeds = s.encode_images_on_device(pixels);
  EXPECT_NE(embeds.device(), nullptr) << "the image embeddings came back to host";
  r.image_embeds.assign(embeds.data_as<float>(), embeds.data_as<float>() + embeds.shape().numel());
  s.attach_images(std::move(embeds), 1);
  continue_greedy(s, s.eval(prompt), steps, r);
  return r;
}

// A golden model on one device.
struct VisionModel {
  Checkpoint ckpt;
  cpu::CpuDevice device;
  Placement placement;
  WeightStore weights;
  explicit VisionModel(const std::string& dir)
      : ckpt(open_checkpoint(dir + "/model")), device(DeviceId{DeviceType::Cpu, 0}, Allocator::kUnlimited, 2) {
    placement = Placement::single(device);
    load_weights(ckpt, placement, weights);
  }
};

}  // namespace ferry::testing
