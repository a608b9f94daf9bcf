// `ferry generate --image`: the GLM-4V golden prompt (ids with the image span) and the golden PNG
// through the real binary, on one device and split over three; and a bad image's error.
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cli_runner.h"
#include "common/golden_dir.h"

namespace ferry {
namespace {

std::string ids_csv(const std::vector<int32_t>& ids) {
  return fmt::format("{}", fmt::join(ids, ","));
}

TEST(CliVision, GenerateWithImageReproducesTheGreedyIdsOnOneAndThreeDevices) {
  const std::string dir = testing::golden_dir() + "/glm/glm4v_rope1_strong";
  std::ifstream in(dir + "/expected.json");
  const auto expected = nlohmann::json::parse(in);
  const auto prompt = expected["prompt_ids"].get<std::vector<int32_t>>();
  const auto greedy = expected["greedy_ids"].get<std::vector<int32_t>>();
  for (const std::string devices : {"cpu:0", "cpu:0,cpu:1,cpu:2"}) {
    SCOPED_TRACE(devices);
    const auto r = testing::run_ferry("generate -q --model " + dir + "/model --devices " + devices + " --prompt-ids " +
                                      ids_csv(prompt) + " --image " + testing::golden_dir() +
                                      "/images/chelsea.png --temperature 0 --ignore-eos --max-tokens " +
                                      std::to_string(greedy.size()) + " --json");
    ASSERT_EQ(r.exit_code, 0) << r.err;
    const auto j = nlohmann::json::parse(r.out);
    EXPECT_EQ(j["ids"].get<std::vector<int32_t>>(), greedy);
  }
}

TEST(CliVision, AnUnreadableImageIsAClearErrorBeforeLoading) {
  const std::string dir = testing::golden_dir() + "/glm/glm4v_rope1";
  testing::TempDir tmp("cli_vision");
  const std::string bad = tmp.str() + "/photo.jpg";
  std::ofstream(bad) << "not really a jpeg";
  const auto r = testing::run_ferry("generate -q --model " + dir + "/model --prompt-ids 294,284,295 --image " + bad);
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("photo.jpg"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("not a PNG or JPEG"), std::string::npos) << r.err;
  const auto missing = testing::run_ferry("generate -q --model " + dir + "/model --prompt-ids 294,284,295 --image " +
                                          tmp.str() + "/none.png");
  EXPECT_NE(missing.exit_code, 0);
  EXPECT_NE(missing.err.find("none.png"), std::string::npos) << missing.err;
}

}  // namespace
}  // namespace ferry
