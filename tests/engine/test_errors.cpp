// Bad checkpoints and bad requests end in a typed error that names the file, field or tensor.
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "common/expect_error.h"
#include "engine_fixture.h"
#include "plan/strategy.h"

namespace ferry {
namespace {

using testing::SingleDevice;
using testing::TempDir;

nlohmann::json read(const std::string& path) {
  std::ifstream in(path);
  return nlohmann::json::parse(in);
}
void write(const std::string& path, const nlohmann::json& j) {
  std::ofstream(path) << j.dump(2);
}

using testing::expect_error;

TEST(CheckpointErrors, MissingConfigFieldIsNamed) {
  TempDir dir("missing_field");
  testing::make_model(dir.str(), tiny::Arch::Llama, "hf", 1);
  auto config = read(dir.str() + "/config.json");
  config.erase("hidden_size");
  write(dir.str() + "/config.json", config);
  expect_error([&] { open_checkpoint(dir.str()); }, ErrorKind::Config, {"config.json", "hidden_size"});
}

TEST(CheckpointErrors, ChatGlmMissingFieldIsNamed) {
  TempDir dir("missing_field_glm");
  testing::make_model(dir.str(), tiny::Arch::ChatGlm, "hf", 1);
  auto config = read(dir.str() + "/config.json");
  config.erase("ffn_hidden_size");
  write(dir.str() + "/config.json", config);
  expect_error([&] { open_checkpoint(dir.str()); }, ErrorKind::Config, {"config.json", "ffn_hidden_size"});
}

TEST(CheckpointErrors, ConfigThatDoesNotFitTheTensorsNamesTensorAndShapes) {
  TempDir dir("wrong_shape");
  testing::make_model(dir.str(), tiny::Arch::Qwen2, "hf", 1);
  auto config = read(dir.str() + "/config.json");
  const int64_t ffn = config["intermediate_size"].get<int64_t>();
  config["intermediate_size"] = ffn + 32;
  write(dir.str() + "/config.json", config);
  expect_error([&] { open_checkpoint(dir.str()); }, ErrorKind::Shape,
               {"model.layers.0.mlp.gate_proj.weight", std::to_string(ffn), std::to_string(ffn + 32)});
}

TEST(CheckpointErrors, MoreLayersInConfigThanInFileSaysHowMany) {
  TempDir dir("missing_layers");
  testing::make_model(dir.str(), tiny::Arch::Llama, "hf", 1);
  auto config = read(dir.str() + "/config.json");
  const int stored = config["num_hidden_layers"].get<int>();
  // A lying count costs nothing: the layers present are counted, not a thousand names listed.
  for (int declared : {stored + 1, 1000}) {
    config["num_hidden_layers"] = declared;
    write(dir.str() + "/config.json", config);
    expect_error([&] { open_checkpoint(dir.str()); }, ErrorKind::Shape,
                 {fmt::format("declares {} layers", declared), fmt::format("holds {}", stored)});
  }
  // An absurd one is refused before anything is read.
  config["num_hidden_layers"] = 1000000000;
  write(dir.str() + "/config.json", config);
  expect_error([&] { open_checkpoint(dir.str()); }, ErrorKind::Config,
               {"the number of layers = 1000000000 is implausible"});
}

TEST(CheckpointErrors, TensorsTheConfigDoesNotUseAreRefused) {
  TempDir dir("unused");
  testing::make_model(dir.str(), tiny::Arch::Llama, "both", 1);
  auto config = read(dir.str() + "/config.json");
  config["num_hidden_layers"] = 1;  // the file holds 2: running 1 would be silently wrong
  write(dir.str() + "/config.json", config);
  expect_error([&] { open_checkpoint(dir.str()); }, ErrorKind::Shape,
               {"are not part of the llama model", "model.layers.1.input_layernorm.weight"});
}

TEST(CheckpointErrors, SlidingWindowAndPrefixTuningAreRefusedNotIgnored) {
  TempDir dir("sliding");
  testing::make_model(dir.str(), tiny::Arch::Qwen2, "hf", 1);
  auto config = read(dir.str() + "/config.json");
  config["use_sliding_window"] = true;
  config["sliding_window"] = 4;
  write(dir.str() + "/config.json", config);
  expect_error([&] { open_checkpoint(dir.str()); }, ErrorKind::Unsupported, {"use_sliding_window"});

  TempDir glm("prefix");
  testing::make_model(glm.str(), tiny::Arch::ChatGlm, "hf", 1);
  auto c2 = read(glm.str() + "/config.json");
  c2["pre_seq_len"] = 16;
  write(glm.str() + "/config.json", c2);
  expect_error([&] { open_checkpoint(glm.str()); }, ErrorKind::Unsupported, {"pre_seq_len"});
}

TEST(CheckpointErrors, NonFiniteConstantsAreConfigErrors) {
  TempDir dir("finite");
  testing::make_model(dir.str(), tiny::Arch::Llama, "hf", 1);
  auto config = read(dir.str() + "/config.json");
  config["rope_theta"] = 1e300;  // inf as a float
  write(dir.str() + "/config.json", config);
  expect_error([&] { open_checkpoint(dir.str()); }, ErrorKind::Config, {"rope_theta"});
  config["rope_theta"] = 10000.0;
  config["rms_norm_eps"] = -1.0;
  write(dir.str() + "/config.json", config);
  expect_error([&] { open_checkpoint(dir.str()); }, ErrorKind::Config, {"norm epsilon"});
}

// A bos/eos id past the embedding would be looked up, or never matched, at run time: refused as a
// GGUF's is, naming the file it came from (generation_config.json is not config.json).
TEST(CheckpointErrors, TokenIdsOutsideTheVocabularyNameTheirFile) {
  TempDir dir("ids_outside");
  testing::make_model(dir.str(), tiny::Arch::Llama, "hf", 1);
  const std::string config_path = dir.str() + "/config.json";
  const std::string generation_path = dir.str() + "/generation_config.json";
  const auto config = read(config_path);
  const auto generation = read(generation_path);
  const std::string vocab = std::to_string(config["vocab_size"].get<int64_t>());

  auto c = config;
  c["eos_token_id"] = 99999;
  write(config_path, c);
  expect_error([&] { open_checkpoint(dir.str()); }, ErrorKind::Config,
               {config_path, "eos_token_id 99999", "vocabulary of " + vocab});
  write(config_path, config);

  auto g = generation;
  g["bos_token_id"] = config["vocab_size"].get<int64_t>();
  write(generation_path, g);
  expect_error([&] { open_checkpoint(dir.str()); }, ErrorKind::Config, {generation_path, "bos_token_id"});
  g = generation;
  g["eos_token_id"] = "x";
  write(generation_path, g);
  const std::string msg = expect_error([&] { open_checkpoint(dir.str()); }, ErrorKind::Config, {generation_path});
  EXPECT_EQ(msg.find(config_path), std::string::npos) << "blames config.json: " << msg;
}

TEST(CheckpointErrors, UnknownArchitectureIsUnsupported) {
  TempDir dir("unknown_arch");
  testing::make_model(dir.str(), tiny::Arch::Llama, "hf", 1);
  auto config = read(dir.str() + "/config.json");
  config["model_type"] = "mamba";
  config["architectures"] = {"MambaForCausalLM"};
  write(dir.str() + "/config.json", config);
  expect_error([&] { open_checkpoint(dir.str()); }, ErrorKind::Unsupported, {"mamba", "MambaForCausalLM"});
}

TEST(CheckpointErrors, UnsupportedRopeScalingIsRefusedNotIgnored) {
  TempDir dir("rope_scaling");
  testing::make_model(dir.str(), tiny::Arch::Llama, "hf", 1);
  auto config = read(dir.str() + "/config.json");
  config["rope_scaling"] = {{"rope_type", "dynamic"}, {"factor", 4.0}};
  write(dir.str() + "/config.json", config);
  expect_error([&] { open_checkpoint(dir.str()); }, ErrorKind::Unsupported, {"dynamic"});
}

TEST(CheckpointErrors, MissingPathAndNotAModel) {
  expect_error([] { open_checkpoint("/nonexistent/model"); }, ErrorKind::Io, {"/nonexistent/model"});
  TempDir dir("empty");
  expect_error([&] { open_checkpoint(dir.str()); }, ErrorKind::Usage, {"config.json"});
}

TEST(PlanErrors, OverBudgetNamesTheDeviceAndTheShortfall) {
  TempDir dir("budget");
  testing::make_model(dir.str(), tiny::Arch::Llama, "hf", 1);
  const Checkpoint ck = open_checkpoint(dir.str());
  expect_error([&] { plan_balanced(ck.spec, parse_device_list("cpu:0=64KiB,cpu:1=64KiB"), 64); },
               ErrorKind::OutOfMemory, {"cpu:0", "budget", "over"});
}

TEST(SessionErrors, TokenOutsideVocabularyAndFullContext) {
  TempDir dir("session");
  testing::make_model(dir.str(), tiny::Arch::Llama, "hf", 1);
  SingleDevice m(dir.str());
  Session s(m.ckpt.spec, m.placement, m.weights, 4);
  expect_error([&] { s.eval(std::vector<int32_t>{m.ckpt.config().vocab}); }, ErrorKind::Usage,
               {std::to_string(m.ckpt.config().vocab)});
  s.eval(std::vector<int32_t>{1, 2, 3});
  expect_error([&] { s.eval(std::vector<int32_t>{1, 2}); }, ErrorKind::Usage, {"context is full"});
}

TEST(SpecErrors, EveryMissingTensorIsListedAtOnce) {
  ModelConfig c;
  c.family = Family::Llama;
  c.layout = TensorLayout::HfDecoder;
  c.n_layer = 2;
  c.hidden = 8;
  c.n_head = 2;
  c.n_kv_head = 1;
  c.head_dim = 4;
  c.ffn = 16;
  c.vocab = 32;
  c.n_rot = 4;
  c.max_context = 64;
  const TensorLookup nothing = [](const std::string&) { return std::optional<StoredTensor>(); };
  expect_error(
      [&] { make_decoder_spec(c, nothing, "test"); }, ErrorKind::Shape,
      {"21 missing tensor", "model.embed_tokens.weight", "model.layers.0.input_layernorm.weight", "and 9 more"});
}

}  // namespace
}  // namespace ferry
