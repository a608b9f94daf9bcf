// MiniCPM-V through the real binary: `generate --image ... --chat` builds the golden prompt with
// the checkpoint's chat template and continues as the original; the text used verbatim with the
// (<image>./</image>) placeholder; `chat` with /image; `plan --config minicpm-v-2_6`; and the
// errors of images and placeholders that do not match.
#include <gtest/gtest.h>

#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cli_runner.h"
#include "common/golden_dir.h"

namespace ferry {
namespace {

struct Case {
  std::string dir;
  nlohmann::json expected;
  std::string model() const { return dir + "/model"; }
  std::string image() const { return dir + "/" + expected["images"][0]["file"].get<std::string>(); }
  std::vector<int32_t> greedy() const { return expected["greedy_ids"].get<std::vector<int32_t>>(); }
  std::string n() const { return std::to_string(greedy().size()); }
};

Case load(const std::string& name) {
  Case c;
  c.dir = testing::golden_dir() + "/minicpmv/" + name;
  std::ifstream in(c.dir + "/expected.json");
  c.expected = nlohmann::json::parse(in);
  return c;
}

std::vector<int32_t> json_ids(const testing::CliRun& r, const char* key = "ids") {
  return nlohmann::json::parse(r.out)[key].get<std::vector<int32_t>>();
}

TEST(CliMiniCpmv, GenerateChatWithImageGivesTheGoldenPromptAndTokensOnOneAndThreeDevices) {
  for (const char* name : {"minicpmv26_slice2x2_strong", "minicpmv26_noslice_h256_strong"}) {
    const Case c = load(name);
    for (const std::string devices : {"cpu:0", "cpu:0,cpu:1,cpu:2"}) {
      SCOPED_TRACE(std::string(name) + " on " + devices);
      const auto r = testing::run_ferry("generate -q --model " + c.model() + " --devices " + devices + " --image " +
                                        c.image() + " --chat --prompt '" + c.expected["question"].get<std::string>() +
                                        "' --temperature 0 --ignore-eos --max-tokens " + c.n() + " --json");
      ASSERT_EQ(r.exit_code, 0) << r.err;
      EXPECT_EQ(json_ids(r, "prompt_ids"), c.expected["input_ids"].get<std::vector<int32_t>>());
      EXPECT_EQ(json_ids(r), c.greedy());
    }
  }
}

TEST(CliMiniCpmv, APromptUsedVerbatimTakesTheImagesAtItsPlaceholders) {
  const Case c = load("minicpmv26_slice2x2_strong");
  // prompt.txt is the chat template's output: the same ids as --chat. ($(cat) drops its final
  // newline; the quoted newline after it puts it back.)
  std::ifstream in(c.dir + "/prompt.txt");
  const std::string prompt((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  testing::TempDir tmp("cli_minicpmv");
  const auto r = testing::run_ferry("generate -q --model " + c.model() + " --image " + c.image() +
                                    " --prompt \"$(cat " + tmp.write_text("prompt.txt", prompt) +
                                    ")\n\" --temperature 0 --ignore-eos --max-tokens " + c.n() + " --json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(json_ids(r, "prompt_ids"), c.expected["input_ids"].get<std::vector<int32_t>>());
  EXPECT_EQ(json_ids(r), c.greedy());
}

TEST(CliMiniCpmv, ChatTakesAnImageForTheNextMessage) {
  const Case c = load("minicpmv26_noslice_h256_strong");
  const auto golden = testing::run_ferry("generate -q --model " + c.model() + " --image " + c.image() +
                                         " --chat --prompt '" + c.expected["question"].get<std::string>() +
                                         "' --temperature 0 --ignore-eos --max-tokens " + c.n());
  ASSERT_EQ(golden.exit_code, 0) << golden.err;
  const auto chat = testing::run_ferry(
      "chat --model " + c.model() + " --temperature 0 --max-tokens " + c.n() + " --devices cpu:0,cpu:1",
      "/image " + c.image() + "\n" + c.expected["question"].get<std::string>() + "\n");
  ASSERT_EQ(chat.exit_code, 0) << chat.err;
  EXPECT_EQ(chat.out, golden.out);
  EXPECT_NE(chat.err.find(std::to_string(c.expected["input_ids"].size()) + " new prompt tokens"), std::string::npos)
      << chat.err;
}

TEST(CliMiniCpmv, ImagesAndPlaceholdersThatDoNotMatchAreClearErrors) {
  const Case c = load("minicpmv26_slice2x2_strong");
  const std::string base = "generate -q --model " + c.model() + " -n 2 ";
  const auto none = testing::run_ferry(base + "--image " + c.image() + " --prompt 'no placeholder'");
  EXPECT_EQ(none.exit_code, 1);
  EXPECT_NE(none.err.find("0 image placeholder(s) but 1 image(s)"), std::string::npos) << none.err;
  EXPECT_NE(none.err.find("(<image>./</image>)"), std::string::npos) << none.err;
  const auto unpictured = testing::run_ferry(base + "--prompt 'look: (<image>./</image>)'");
  EXPECT_EQ(unpictured.exit_code, 1);
  EXPECT_NE(unpictured.err.find("no image was given"), std::string::npos) << unpictured.err;
  const auto two = testing::run_ferry(base + "--image " + c.image() + " --image " + c.image() +
                                      " --prompt '(<image>./</image>) and (<image>./</image>)'");
  EXPECT_EQ(two.exit_code, 1);
  EXPECT_NE(two.err.find("at most 1 per prompt (raise it with --max-images)"), std::string::npos) << two.err;
  const auto allowed = testing::run_ferry(base + "--max-images 2 --image " + c.image() + " --image " + c.image() +
                                          " --prompt '(<image>./</image>) and (<image>./</image>)' --json");
  EXPECT_EQ(allowed.exit_code, 0) << allowed.err;
  const auto text_model = testing::run_ferry("generate -q --model " + testing::golden_dir() +
                                             "/glm/chatglm_text_rope1/model --prompt-ids 1,2 --max-images 2");
  EXPECT_EQ(text_model.exit_code, 1);
  EXPECT_NE(text_model.err.find("no vision tower"), std::string::npos) << text_model.err;
}

TEST(CliMiniCpmv, InspectDescribesTheTowerResamplerAndSlicing) {
  const Case c = load("minicpmv26_slice2x2_strong");
  const auto r = testing::run_ferry("inspect " + c.model());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("vision        minicpmv: SigLIP tower of 2 layers, hidden 96, 4 heads, ffn 192, 14px patches; "
                       "resampler of 16 queries; images at about 112px, sliced into up to 9 cells"),
            std::string::npos)
      << r.out;
  const auto j = testing::run_ferry("inspect --json " + c.model());
  ASSERT_EQ(j.exit_code, 0) << j.err;
  const auto v = nlohmann::json::parse(j.out)["vision"];
  EXPECT_EQ(v["family"], "minicpmv");
  EXPECT_EQ(v["query_num"], 16);
}

TEST(CliMiniCpmv, ThePresetFitsTwelveGibCardsInBf16WithTheTowerWhole) {
  const auto r =
      testing::run_ferry("plan --config minicpm-v-2_6 --devices cuda:0=12GiB,cuda:1=12GiB --max-context 8192 --json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto plan = nlohmann::json::parse(r.out);
  int tower_devices = 0;
  for (const auto& d : plan["devices"]) {
    for (const auto& m : d["modules"]) tower_devices += m.get<std::string>() == "vision" ? 1 : 0;
  }
  EXPECT_EQ(tower_devices, 1) << r.out;
  const auto small =
      testing::run_ferry("plan --config minicpm-v-2_6 --devices cuda:0=8GiB,cuda:1=8GiB --max-context 8192");
  EXPECT_EQ(small.exit_code, 1);
  EXPECT_NE(small.err.find("what would fit"), std::string::npos) << small.err;
}

}  // namespace
}  // namespace ferry
