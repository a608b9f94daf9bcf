// Issue 14, item 8-9 habits: prompts from a file or standard input (beyond what a command line
// holds), a fresh seed when none is given (printed so the run can be repeated), the generated
// text and the stats line apart when both streams share a file, budgets above the machine's
// memory warned about, and make_tiny_model refusing sizes it cannot make.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <filesystem>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <regex>
#include <string>

#include "../engine/engine_fixture.h"
#include "cli_runner.h"
#include "common/golden_dir.h"

namespace ferry {
namespace {

using testing::run_ferry;

class CliInputs : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new testing::TempDir("cli_inputs");
    testing::make_model(dir_->str(), tiny::Arch::Llama, "hf", 5, DType::F32, 2);
  }
  static void TearDownTestSuite() { delete dir_; }
  static std::string model() { return dir_->str(); }
  static testing::TempDir* dir_;
};
testing::TempDir* CliInputs::dir_ = nullptr;

std::vector<int32_t> ids_of(const testing::CliRun& r, const char* key) {
  return nlohmann::json::parse(r.out)[key].get<std::vector<int32_t>>();
}

TEST_F(CliInputs, APromptFromAFileOrStandardInputIsThePromptText) {
  const std::string text = "Hello there, how are you today?";
  const std::string base = "generate -q --model " + model() + " --temperature 0 -n 4 --json ";
  const auto direct = run_ferry(base + "--prompt '" + text + "'");
  ASSERT_EQ(direct.exit_code, 0) << direct.err;
  testing::TempDir tmp("cli_prompt_file");
  const auto from_file = run_ferry(base + "--prompt-file " + tmp.write_text("p.txt", text));
  ASSERT_EQ(from_file.exit_code, 0) << from_file.err;
  EXPECT_EQ(ids_of(from_file, "prompt_ids"), ids_of(direct, "prompt_ids"));
  EXPECT_EQ(ids_of(from_file, "ids"), ids_of(direct, "ids"));
  const auto from_stdin = run_ferry(base + "--prompt-file -", text);
  ASSERT_EQ(from_stdin.exit_code, 0) << from_stdin.err;
  EXPECT_EQ(ids_of(from_stdin, "prompt_ids"), ids_of(direct, "prompt_ids"));

  // Far beyond a command line's ~128 KiB: 200 KiB of text through standard input.
  std::string big;
  while (big.size() < 200 * 1024) big += "the quick brown fox jumps over the lazy dog. ";
  const auto large = run_ferry("tokenize --tokenizer " + model() + " -", big);
  ASSERT_EQ(large.exit_code, 0) << large.err;
  EXPECT_GT(nlohmann::json::parse(large.out).size(), 20000u);
  const auto same = run_ferry("tokenize --tokenizer " + model() + " --file " + tmp.write_text("big.txt", big));
  EXPECT_EQ(same.out, large.out);

  const auto both = run_ferry(base + "--prompt x --prompt-file " + tmp.write_text("q.txt", "y"));
  EXPECT_EQ(both.exit_code, 1);
  EXPECT_NE(both.err.find("not both"), std::string::npos) << both.err;
  const auto empty = run_ferry(base + "--prompt-file " + tmp.write_text("empty.txt", ""));
  EXPECT_EQ(empty.exit_code, 1);
  EXPECT_NE(empty.err.find("the file is empty"), std::string::npos) << empty.err;
  const auto directory = run_ferry(base + "--prompt-file " + tmp.str());
  EXPECT_EQ(directory.exit_code, 1);
  EXPECT_NE(directory.err.find("is a directory"), std::string::npos) << directory.err;
}

TEST_F(CliInputs, WithoutASeedEachRunDrawsAFreshOneThatRepeatsTheRun) {
  const std::string base = "generate -q --model " + model() +
                           " --prompt 'Once upon' -n 12 --ignore-eos --temperature 1.5 "
                           "--json";
  const auto a = run_ferry(base);
  const auto b = run_ferry(base);
  ASSERT_EQ(a.exit_code, 0) << a.err;
  ASSERT_EQ(b.exit_code, 0) << b.err;
  const auto ja = nlohmann::json::parse(a.out);
  const auto jb = nlohmann::json::parse(b.out);
  EXPECT_NE(ja["seed"], jb["seed"]);
  const auto again = run_ferry(base + " --seed " + std::to_string(ja["seed"].get<uint64_t>()));
  ASSERT_EQ(again.exit_code, 0) << again.err;
  EXPECT_EQ(nlohmann::json::parse(again.out)["ids"], ja["ids"]);
  // --report prints it.
  const auto report = run_ferry("generate --model " + model() + " --prompt 'Once upon' -n 2 --report");
  ASSERT_EQ(report.exit_code, 0) << report.err;
  EXPECT_TRUE(std::regex_search(report.err, std::regex("seed: [0-9]+ \\(--seed [0-9]+ repeats this run\\)")))
      << report.err;
}

TEST_F(CliInputs, TheTextEndsItsLineBeforeTheStatsWhenBothStreamsShareAFile) {
  testing::TempDir tmp("cli_streams");
  const std::string log = tmp.str() + "/log.txt";
  const auto r = run_ferry("generate --model " + model() + " --prompt-ids 1,2,3 -n 3 --temperature 0 --ignore-eos" +
                           " > " + log + " 2>&1; cat " + log);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  // The tiny model has no text for these ids' continuation beyond bytes; what matters: the stats
  // line starts a line of its own.
  EXPECT_NE(r.out.find("\nprompt: "), std::string::npos) << r.out;
}

TEST_F(CliInputs, BudgetsAboveTheMachinesMemoryAreWarnedAbout) {
  const auto r = run_ferry("plan --model " + model() + " --devices cpu:0=1000GiB,cpu:1=1GiB");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("warning: the CPU budgets (cpu:0=1000.00 GiB + cpu:1=1.00 GiB) add up to 1001.00 GiB"),
            std::string::npos)
      << r.err;
  EXPECT_NE(r.err.find("more than this machine's"), std::string::npos) << r.err;
  const auto fine = run_ferry("plan --model " + model() + " --devices cpu:0=64MiB,cpu:1=64MiB");
  EXPECT_EQ(fine.err.find("warning"), std::string::npos) << fine.err;
}

// --add-bos prepends the declared BOS once, also when the tokenizer does not add one by itself
// (the tiny Llama's post-processor adds none: issue 14, item 5).
TEST_F(CliInputs, AddBosPrependsTheDeclaredBosOnce) {
  const std::string base = "generate -q --model " + model() + " --prompt 'Hi there' -n 1 --temperature 0 --json";
  const auto plain = run_ferry(base);
  const auto with = run_ferry(base + " --add-bos");
  ASSERT_EQ(plain.exit_code, 0) << plain.err;
  ASSERT_EQ(with.exit_code, 0) << with.err;
  std::vector<int32_t> want = ids_of(plain, "prompt_ids");
  ASSERT_FALSE(want.empty());
  const auto inspect = nlohmann::json::parse(run_ferry("inspect --json " + model()).out);
  const auto bos = inspect["bos_id"].get<int32_t>();
  ASSERT_GE(bos, 0);
  EXPECT_NE(want.front(), bos);
  want.insert(want.begin(), bos);
  EXPECT_EQ(ids_of(with, "prompt_ids"), want);
  // With --chat the template already starts with it: not doubled.
  const auto chat = run_ferry(base + " --add-bos --chat");
  ASSERT_EQ(chat.exit_code, 0) << chat.err;
  const auto chat_ids = ids_of(chat, "prompt_ids");
  ASSERT_GE(chat_ids.size(), 2u);
  EXPECT_EQ(chat_ids[0], bos);
  EXPECT_NE(chat_ids[1], bos);
}

// A checkpoint with NaN weights: generate and logits exit 1 naming the checkpoint and the tensor
// (issue 14, item 7), and logits writes nothing.
TEST_F(CliInputs, NonFiniteWeightsAreNamedAsTheCause) {
  testing::TempDir tmp("cli_nan");
  const std::string dir = tmp.str() + "/m";
  std::filesystem::create_directories(dir);
  for (const auto& f : std::filesystem::directory_iterator(model())) {
    std::filesystem::copy(f.path(), dir + "/" + f.path().filename().string());
  }
  // Poison model.norm.weight (f32) in place: its bytes sit at 8 + header + data_offsets[0].
  const std::string path = dir + "/model.safetensors";
  std::fstream file(path, std::ios::in | std::ios::out | std::ios::binary);
  uint64_t header_len = 0;
  file.read(reinterpret_cast<char*>(&header_len), 8);
  std::string header(header_len, '\0');
  file.read(header.data(), static_cast<std::streamsize>(header_len));
  const auto j = nlohmann::json::parse(header);
  const uint64_t begin = j.at("model.norm.weight").at("data_offsets").at(0).get<uint64_t>();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  file.seekp(static_cast<std::streamoff>(8 + header_len + begin));
  file.write(reinterpret_cast<const char*>(&nan), sizeof nan);
  file.close();

  const auto gen = run_ferry("generate -q --model " + dir + " --prompt-ids 1,2,3 -n 2 --temperature 0");
  EXPECT_EQ(gen.exit_code, 1) << gen.err;
  EXPECT_NE(gen.err.find("the logits are not finite"), std::string::npos) << gen.err;
  EXPECT_NE(gen.err.find(dir), std::string::npos) << gen.err;
  EXPECT_NE(gen.err.find("NaN or Inf weights, e.g. in model.norm.weight"), std::string::npos) << gen.err;
  const std::string out = tmp.str() + "/logits.f32";
  const auto logits = run_ferry("logits -q --model " + dir + " --prompt-ids 1,2,3 -o " + out);
  EXPECT_EQ(logits.exit_code, 1) << logits.err;
  EXPECT_NE(logits.err.find("model.norm.weight"), std::string::npos) << logits.err;
  EXPECT_FALSE(std::filesystem::exists(out));
}

// A checkpoint missing its last layer's post-attention norm (issue 14, item 7): the message names
// that tensor, not a layer count, and `inspect --tensors` still lists what is stored.
TEST_F(CliInputs, AMissingLastLayerNormIsNamedAndInspectListsTheStoredTensors) {
  testing::TempDir tmp("cli_missing_norm");
  const std::string dir = tmp.str() + "/m";
  std::filesystem::create_directories(dir);
  for (const auto& f : std::filesystem::directory_iterator(model())) {
    std::filesystem::copy(f.path(), dir + "/" + f.path().filename().string());
  }
  // Drop the tensor from the header; its bytes stay where they were, unreferenced.
  const std::string path = dir + "/model.safetensors";
  std::ifstream in(path, std::ios::binary);
  uint64_t header_len = 0;
  in.read(reinterpret_cast<char*>(&header_len), 8);
  std::string header(header_len, '\0');
  in.read(header.data(), static_cast<std::streamsize>(header_len));
  const std::string data((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  in.close();
  auto j = nlohmann::json::parse(header);
  const int last = nlohmann::json::parse(std::ifstream(model() + "/config.json"))["num_hidden_layers"].get<int>() - 1;
  const std::string dropped = "model.layers." + std::to_string(last) + ".post_attention_layernorm.weight";
  ASSERT_EQ(j.erase(dropped), 1u);
  std::string text = j.dump();
  text.append((8 - text.size() % 8) % 8, ' ');
  const uint64_t len = text.size();
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(&len), 8);
  out << text << data;
  out.close();

  const auto r = run_ferry("inspect " + dir);
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("1 missing tensor(s):\n    " + dropped), std::string::npos) << r.err;
  EXPECT_EQ(r.err.find("layers"), r.err.find("model.layers") + 6) << "no word of a layer count: " << r.err;
  const auto listed = run_ferry("inspect --tensors " + dir);
  EXPECT_EQ(listed.exit_code, 1);
  EXPECT_NE(listed.out.find("stored tensors (" + std::to_string(j.size() - j.count("__metadata__")) + ")"),
            std::string::npos)
      << listed.out;
  EXPECT_NE(listed.out.find("model.layers." + std::to_string(last) + ".input_layernorm.weight"), std::string::npos);
  EXPECT_EQ(listed.out.find(dropped), std::string::npos);
  EXPECT_NE(listed.err.find(dropped), std::string::npos) << listed.err;
}

// What a file holds reaches messages escaped (issue 14, item 7): a terminal escape in config.json's
// model_type prints as \x1b, never raw.
TEST_F(CliInputs, RawBytesFromFilesAreEscapedInMessages) {
  testing::TempDir tmp("cli_raw_bytes");
  const std::string dir = tmp.str() + "/m";
  std::filesystem::create_directories(dir);
  for (const auto& f : std::filesystem::directory_iterator(model())) {
    std::filesystem::copy(f.path(), dir + "/" + f.path().filename().string());
  }
  auto config = nlohmann::json::parse(std::ifstream(dir + "/config.json"));
  config["model_type"] = "\x1b[2Jllama\x07";
  std::ofstream(dir + "/config.json") << config.dump();
  const auto r = run_ferry("inspect " + dir);
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("'\\x1b[2Jllama\\x07' "), std::string::npos) << r.err;
  EXPECT_EQ(r.err.find('\x1b'), std::string::npos) << "a raw escape reached the terminal";
}

// Files that are not what they seem (issue 14, item 7): an image path that is a directory, a
// model whose weights file is a FIFO or a dangling link. Clear I/O errors, exit 1, no hang.
TEST_F(CliInputs, DirectoriesFifosAndDanglingLinksAreNamedForWhatTheyAre) {
  testing::TempDir tmp("cli_not_files");
  const auto image =
      run_ferry("generate -q --model " + testing::golden_dir() + "/minicpmv/minicpmv26_slice2x2_strong/model --image " +
                tmp.str() + " --chat --prompt hi -n 1");
  EXPECT_EQ(image.exit_code, 1) << image.err;
  EXPECT_NE(image.err.find("is a directory; give a PNG or JPEG file"), std::string::npos) << image.err;

  for (const std::string kind : {"fifo", "dangling"}) {
    SCOPED_TRACE(kind);
    const std::string dir = tmp.str() + "/" + kind;
    std::filesystem::create_directories(dir);
    std::filesystem::copy(model() + "/config.json", dir + "/config.json");
    const std::string weights = dir + "/model.safetensors";
    if (kind == "fifo") {
      ASSERT_EQ(::mkfifo(weights.c_str(), 0600), 0);
    } else {
      std::filesystem::create_symlink(tmp.str() + "/nowhere.safetensors", weights);
    }
    const auto r = run_ferry("inspect " + dir);
    EXPECT_EQ(r.exit_code, 1) << r.err;
    EXPECT_NE(r.err.find(kind == "fifo" ? "is a FIFO, not a regular file" : "which does not exist"), std::string::npos)
        << r.err;
    EXPECT_EQ(r.err.find("pass a .safetensors file directly"), std::string::npos) << r.err;
  }
  const std::string fifo_gguf = tmp.str() + "/model.gguf";
  ASSERT_EQ(::mkfifo(fifo_gguf.c_str(), 0600), 0);
  const auto gguf = run_ferry("inspect " + fifo_gguf);
  EXPECT_EQ(gguf.exit_code, 1) << gguf.err;
  EXPECT_NE(gguf.err.find("a FIFO, not a regular file"), std::string::npos) << gguf.err;
}

TEST(CliTools, MakeTinyModelRefusesSizesItCannotMake) {
  testing::TempDir tmp("tiny_refuse");
  // run_ferry runs "ferry ARGS"; "--version;" lets the shell run the tool after it.
  const auto r = run_ferry("--version >/dev/null; " + std::string(FERRY_BINARY_DIR) +
                           "/make_tiny_model --arch llama --out " + tmp.str() + " --vocab 100000000");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("test checkpoints are made in memory"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace ferry
