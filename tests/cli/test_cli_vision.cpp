// `ferry generate --image` and `ferry chat` with images: the GLM-4V golden prompt (ids with the
// image span) and the golden PNG through the real binary, on one device and split over three; the
// same prompt made by the chat template from a user message; and bad images' errors.
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <gtest/gtest.h>

#include <filesystem>
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

// The golden tiny GLM-4V with a tokenizer and chat template, so prompts can be given as text. Its
// vocabulary is GLM-4's shrunk: ids 0-255 are the bytes (byte-level BPE without merges), 284-295
// GLM-4's special tokens in their order (<|endoftext|> ... <|begin_of_image|>, <|end_of_image|>).
// The golden prompt then reads "[gMASK]<sop><|user|>\n<image span>What?<|assistant|>".
std::string chat_ready_glm4v(const testing::TempDir& dir) {
  const std::string golden = testing::golden_dir() + "/glm/glm4v_rope1_strong/model";
  for (const char* f : {"config.json", "model.safetensors"}) {
    std::filesystem::create_symlink(golden + "/" + f, dir.file(f));
  }
  // GPT-2's byte -> character map: printable Latin-1 maps to itself, the rest to U+0100 onwards.
  nlohmann::ordered_json vocab = nlohmann::ordered_json::object();
  int shifted = 0;
  for (int b = 0; b < 256; ++b) {
    const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
    const int cp = printable ? b : 256 + shifted++;
    std::string utf8;
    if (cp < 0x80) {
      utf8 += static_cast<char>(cp);
    } else {
      utf8 += static_cast<char>(0xC0 | (cp >> 6));
      utf8 += static_cast<char>(0x80 | (cp & 0x3F));
    }
    vocab[utf8] = b;
  }
  for (int id = 256; id < 284; ++id) vocab[fmt::format("<unused_{}>", id)] = id;
  const char* const specials[] = {"<|endoftext|>",
                                  "[MASK]",
                                  "[gMASK]",
                                  "[sMASK]",
                                  "<sop>",
                                  "<eop>",
                                  "<|system|>",
                                  "<|user|>",
                                  "<|assistant|>",
                                  "<|observation|>",
                                  "<|begin_of_image|>",
                                  "<|end_of_image|>"};
  nlohmann::ordered_json added = nlohmann::ordered_json::array();
  for (int i = 0; i < 12; ++i) {
    added.push_back({{"id", 284 + i},
                     {"content", specials[i]},
                     {"single_word", false},
                     {"lstrip", false},
                     {"rstrip", false},
                     {"normalized", false},
                     {"special", true}});
  }
  const nlohmann::ordered_json byte_level = {
      {"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true}, {"use_regex", true}};
  const nlohmann::ordered_json tokenizer = {{"version", "1.0"},
                                            {"added_tokens", added},
                                            {"normalizer", nullptr},
                                            {"pre_tokenizer", byte_level},
                                            {"post_processor", nullptr},
                                            {"decoder", byte_level},
                                            {"model",
                                             {{"type", "BPE"},
                                              {"byte_fallback", false},
                                              {"ignore_merges", false},
                                              {"vocab", vocab},
                                              {"merges", nlohmann::ordered_json::array()}}}};
  dir.write_text("tokenizer.json", tokenizer.dump());
  const nlohmann::ordered_json config = {
      {"eos_token", "<|endoftext|>"},
      {"chat_template",
       "[gMASK]<sop>{% for m in messages %}<|{{ m.role }}|>\n{{ m.content }}{% endfor %}"
       "{% if add_generation_prompt %}<|assistant|>{% endif %}"}};
  dir.write_text("tokenizer_config.json", config.dump());
  return dir.str();
}

nlohmann::json golden_expected() {
  std::ifstream in(testing::golden_dir() + "/glm/glm4v_rope1_strong/expected.json");
  return nlohmann::json::parse(in);
}

std::string chelsea() {
  return testing::golden_dir() + "/images/chelsea.png";
}

TEST(CliVision, GenerateChatWithImageBuildsTheGoldenPromptAndContinuesAsTheGolden) {
  testing::TempDir dir("cli_vision_chat");
  const std::string model = chat_ready_glm4v(dir);
  const auto expected = golden_expected();
  const auto greedy = expected["greedy_ids"].get<std::vector<int32_t>>();
  const auto r = testing::run_ferry("generate -q --model " + model + " --chat --prompt 'What?' --image " + chelsea() +
                                    " --temperature 0 --ignore-eos --max-tokens " + std::to_string(greedy.size()) +
                                    " --json --devices cpu:0,cpu:1");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["prompt_ids"].get<std::vector<int32_t>>(), expected["prompt_ids"].get<std::vector<int32_t>>());
  EXPECT_EQ(j["ids"].get<std::vector<int32_t>>(), greedy);
}

// `/image FILE` attaches a picture to the next message; the first reply is the golden continuation
// (the same text `generate` streams for the golden ids), a bad image is reported and the chat goes
// on, and a second image is refused as GLM-4V refuses it (one image per conversation).
TEST(CliVision, ChatTakesImagesForTheNextMessage) {
  testing::TempDir dir("cli_vision_chat");
  const std::string model = chat_ready_glm4v(dir);
  const auto expected = golden_expected();
  const auto prompt = expected["prompt_ids"].get<std::vector<int32_t>>();
  const std::string n = std::to_string(expected["greedy_ids"].size());
  const auto golden = testing::run_ferry("generate -q --model " + model + " --prompt-ids " + ids_csv(prompt) +
                                         " --image " + chelsea() + " --temperature 0 --ignore-eos --max-tokens " + n);
  ASSERT_EQ(golden.exit_code, 0) << golden.err;

  const std::string missing = dir.file("missing.png");
  const auto chat = testing::run_ferry(
      "chat --model " + model + " --temperature 0 --max-tokens " + n + " --devices cpu:0,cpu:1,cpu:2",
      "/image " + missing + "\n/image " + chelsea() + "\nWhat?\n/image " + chelsea() + "\nAnd now?\n");
  ASSERT_EQ(chat.exit_code, 0) << chat.err;
  ASSERT_GE(chat.out.size(), golden.out.size());
  EXPECT_EQ(chat.out.substr(0, golden.out.size()), golden.out);
  EXPECT_NE(chat.err.find("missing.png"), std::string::npos) << chat.err;
  EXPECT_NE(chat.err.find("1 image(s) per conversation"), std::string::npos) << chat.err;
  // --image gives the first message its picture: the same golden reply.
  const auto first = testing::run_ferry(
      "chat -q --model " + model + " --temperature 0 --max-tokens " + n + " --image " + chelsea(), "What?\n");
  ASSERT_EQ(first.exit_code, 0) << first.err;
  EXPECT_EQ(first.out, golden.out);
  // Two answered turns, the first evaluating the 13 golden ids. (The random-weight replies are not
  // valid UTF-8, so their text re-encodes differently: the second turn reuses the cache up to where
  // the ids first differ, the image's span included, and evaluates the rest.)
  EXPECT_NE(chat.err.find("[13 new prompt tokens"), std::string::npos) << chat.err;
  size_t turns = 0;
  for (size_t at = chat.err.find("new prompt tokens"); at != std::string::npos;
       at = chat.err.find("new prompt tokens", at + 1)) {
    ++turns;
  }
  EXPECT_EQ(turns, 2u) << chat.err;
}

TEST(CliVision, ImagesForAModelWithoutAVisionTowerAreRefused) {
  const auto r = testing::run_ferry("generate -q --model " + testing::golden_dir() +
                                    "/glm/chatglm_text_rope1/model --prompt-ids 1,2 --image " + chelsea());
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("no vision tower"), std::string::npos) << r.err;
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
