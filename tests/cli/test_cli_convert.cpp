// `ferry convert IN OUT.gguf [--dtype T]`: what it prints, that the file it writes runs and
// tokenizes like its source from the other commands, and a clear refusal (non-zero exit, a message
// naming the problem, no file left behind) for each input it cannot convert.
#include <gtest/gtest.h>

#include <filesystem>
#include <nlohmann/json.hpp>

#include "../engine/engine_fixture.h"
#include "../golden/golden_util.h"
#include "cli_runner.h"
#include "common/golden_dir.h"
#include "formats/gguf.h"

namespace ferry {
namespace {

using testing::CliRun;
using testing::quote;

CliRun ferry(const std::string& args, const std::string& stdin_text = "") {
  return testing::run_ferry(args, stdin_text);
}

std::string golden_case(const std::string& name) {
  return testing::golden_dir() + "/text/" + name;
}

std::string read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

TEST(CliConvert, ConvertedModelTokenizesAndRunsLikeItsSource) {
  testing::TempDir dir("cli_convert");
  const std::string hf = dir.file("hf");
  testing::make_model(hf, tiny::Arch::Llama, "hf", 5);
  const std::string out = dir.file("model.gguf");
  const CliRun r = ferry("convert " + quote(hf) + " " + quote(out));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  for (const char* needle : {"arch llama", "f32 x", "gpt2 (byte-level BPE), pre gpt-2, 512 tokens", "chat template"}) {
    EXPECT_NE(r.out.find(needle), std::string::npos) << needle << " in: " << r.out;
  }
  const std::string text = "The ferry leaves the harbour at seven. <|user|>\nhi";
  const CliRun from_hf = ferry("tokenize --tokenizer " + quote(hf) + " " + quote(text));
  const CliRun from_gguf = ferry("tokenize --tokenizer " + quote(out) + " " + quote(text));
  ASSERT_EQ(from_gguf.exit_code, 0) << from_gguf.err;
  EXPECT_EQ(from_gguf.out, from_hf.out);
  // The chat template came along.
  const CliRun tmpl =
      ferry("template --model " + quote(out) + " --messages -", R"([{"role": "user", "content": "hi"}])");
  EXPECT_EQ(tmpl.exit_code, 0) << tmpl.err;
  EXPECT_EQ(tmpl.out, "<|user|>\nhi");

  // The same logits from both (llama: the GGUF holds q/k rows permuted for adjacent-pair RoPE).
  const std::string ids = "17,42,99,3,250,7";
  ASSERT_EQ(ferry("logits -q --model " + quote(hf) + " --prompt-ids " + ids + " --out " + dir.file("a.f32")).exit_code,
            0);
  ASSERT_EQ(ferry("logits -q --model " + quote(out) + " --prompt-ids " + ids + " --out " + dir.file("b.f32")).exit_code,
            0);
  const std::vector<float> a = testing::read_binary<float>(dir.file("a.f32"));
  const std::vector<float> b = testing::read_binary<float>(dir.file("b.f32"));
  ASSERT_EQ(a.size(), 512u);
  ASSERT_EQ(a.size(), b.size());
  EXPECT_LE(testing::max_abs_diff(a.data(), b.data(), a.size()), 1e-4f);
}

TEST(CliConvert, DtypeQuantizesTheMatricesByWeightQuantsRule) {
  testing::TempDir dir("cli_convert_q8");
  const std::string out = dir.file("q8.gguf");
  const CliRun r = ferry("convert " + golden_case("llama") + "/hf " + quote(out) + " --dtype q8_0 --name llama");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("q8_0 x"), std::string::npos) << r.out;
  EXPECT_NE(r.err.find("no tokenizer"), std::string::npos) << r.err;  // the golden's hf/ has none
  // llama-quantize --pure q8_0 of the same model wrote the same file, bar the text keys.
  const GgufFile ours = GgufFile::open(out);
  const GgufFile golden = GgufFile::open(golden_case("llama_q8_0") + "/model.gguf");
  ASSERT_EQ(ours.tensors().size(), golden.tensors().size());
  for (const TensorRecord& t : golden.tensors().all()) {
    const TensorRecord* mine = ours.tensors().find(t.name);
    ASSERT_NE(mine, nullptr) << t.name;
    EXPECT_EQ(mine->dtype, t.dtype) << t.name;
    EXPECT_EQ(std::string(reinterpret_cast<const char*>(mine->data), mine->nbytes),
              std::string(reinterpret_cast<const char*>(t.data), t.nbytes))
        << t.name;
  }
  EXPECT_EQ(ours.get_u32("general.file_type"), 7u);
}

TEST(CliConvert, RefusesWhatItCannotConvert) {
  testing::TempDir dir("cli_convert_bad");
  const std::string out = dir.file("out.gguf");
  const std::string llama = golden_case("llama") + "/hf";

  CliRun r = ferry("convert /no/such/model " + quote(out));
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("/no/such/model: no such file or directory"), std::string::npos) << r.err;

  r = ferry("convert " + golden_case("llama") + "/model.gguf " + quote(out));
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("is already a GGUF file"), std::string::npos) << r.err;

  r = ferry("convert " + testing::golden_dir() + "/glm/glm4v_rope1/model " + quote(out));
  EXPECT_EQ(r.exit_code, 1);
  for (const char* needle : {"vision-language model", "mmproj", "llama (and mistral), qwen2, qwen3, glm, glm4"}) {
    EXPECT_NE(r.err.find(needle), std::string::npos) << needle << " in: " << r.err;
  }

  r = ferry("convert " + llama + " " + quote(out) + " --dtype q9_9");
  EXPECT_EQ(r.exit_code, 1);
  for (const char* needle : {"--dtype 'q9_9' is not a weight type", "q4_k_m", "q8_0"}) {
    EXPECT_NE(r.err.find(needle), std::string::npos) << needle << " in: " << r.err;
  }

  r = ferry("convert " + llama + " " + quote(dir.file("missing/dir/out.gguf")));
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("does not exist"), std::string::npos) << r.err;
  r = ferry("convert " + llama + " " + quote(dir.str()));
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("is a directory"), std::string::npos) << r.err;
  // Unwritable: a path under a regular file (refused whoever runs the test, root included).
  const std::string file = dir.write_text("plain", "x");
  r = ferry("convert " + llama + " " + quote(file + "/out.gguf"));
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find(file), std::string::npos) << r.err;
  EXPECT_FALSE(std::filesystem::exists(out));

  // The input itself as the output: refused before a byte is written.
  testing::TempDir copy("cli_convert_self");
  std::filesystem::copy(llama, copy.str(), std::filesystem::copy_options::recursive);
  const std::string weights = copy.file("model.safetensors");
  const std::string before = read_bytes(weights);
  r = ferry("convert " + quote(copy.str()) + " " + quote(weights));
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("one of the checkpoint's own files"), std::string::npos) << r.err;
  EXPECT_EQ(read_bytes(weights), before);
}

}  // namespace
}  // namespace ferry
