#include "text/sentencepiece_model.h"

#include <sentencepiece_processor.h>

#include <charconv>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "formats/json_file.h"
#include "text/utf8.h"

namespace ferry {

namespace {

const std::string kMetaspace = "\xE2\x96\x81";

class SentencepieceEncoder final : public FragmentEncoder {
 public:
  SentencepieceEncoder(std::shared_ptr<const sentencepiece::SentencePieceProcessor> processor, std::string source)
      : processor_(std::move(processor)), source_(std::move(source)) {}

  void encode(std::string_view text, std::vector<int32_t>& out) const override {
    std::vector<int> ids;
    const auto status = processor_->Encode(text, &ids);
    if (!status.ok())
      fail(ErrorKind::Internal, "{}: libsentencepiece could not encode: {}", source_, status.ToString());
    out.insert(out.end(), ids.begin(), ids.end());
  }

 private:
  std::shared_ptr<const sentencepiece::SentencePieceProcessor> processor_;
  std::string source_;
};

TokenType type_of(const sentencepiece::SentencePieceProcessor& sp, int id) {
  if (sp.IsUnknown(id)) return TokenType::Unknown;
  if (sp.IsControl(id)) return TokenType::Control;
  if (sp.IsByte(id)) return TokenType::Byte;
  if (sp.IsUnused(id)) return TokenType::Unused;
  return TokenType::Normal;  // user-defined pieces too: the library matches them itself
}

// tokenizer_config.json: added tokens past the model's pieces, add_bos_token, add_eos_token.
void read_config(const std::filesystem::path& file, Vocab& vocab) {
  if (!std::filesystem::exists(file)) return;
  const std::string name = file.string();
  const nlohmann::json config = read_json_file(name, ErrorKind::Config);
  if (!config.is_object()) fail(ErrorKind::Config, "{}: expected a JSON object", name);
  vocab.source += " + " + name;
  if (const auto it = config.find("added_tokens_decoder"); it != config.end() && it->is_object()) {
    for (const auto& [key, entry] : it->items()) {
      int64_t id = -1;
      const auto [end, ec] = std::from_chars(key.data(), key.data() + key.size(), id);
      const auto content = entry.is_object() ? entry.find("content") : entry.end();
      if (ec != std::errc() || end != key.data() + key.size() || id < 0 ||
          id > 2 * static_cast<int64_t>(vocab.tokens.size()) + 65536 || content == entry.end() ||
          !content->is_string() || content->get<std::string>().empty()) {
        fail(ErrorKind::Config,
             "{}: added_tokens_decoder[\"{}\"] needs a numeric id not far past the vocabulary and a \"content\" string",
             name, utf8::sanitize(key));
      }
      const auto index = static_cast<size_t>(id);
      if (index < vocab.tokens.size()) continue;  // the model's own piece
      vocab.tokens.resize(index + 1);
      vocab.scores.resize(index + 1, 0.0f);
      vocab.types.resize(index + 1, static_cast<int32_t>(TokenType::Unused));
      const auto special = entry.find("special");
      vocab.tokens[index] = content->get<std::string>();
      vocab.types[index] = static_cast<int32_t>(special == entry.end() || !special->is_boolean() || special->get<bool>()
                                                    ? TokenType::Control
                                                    : TokenType::UserDefined);
    }
  }
  if (const auto add_bos = json_opt_bool(config, "add_bos_token", name)) vocab.add_bos = *add_bos;
  if (const auto add_eos = json_opt_bool(config, "add_eos_token", name)) vocab.add_eos = *add_eos;
}

}  // namespace

bool looks_like_sentencepiece(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  char first = 0;
  // ModelProto field 1 (repeated SentencePiece, length-delimited): tag byte 0x0A.
  return in.get(first) && first == 0x0A;
}

Tokenizer load_sentencepiece_tokenizer(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail(ErrorKind::Io, "{}: cannot open the sentencepiece model", path);
  const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  auto processor = std::make_shared<sentencepiece::SentencePieceProcessor>();
  if (const auto status = processor->LoadFromSerializedProto(bytes); !status.ok()) {
    fail(ErrorKind::Format, "{}: libsentencepiece cannot read this file ({}); is it a sentencepiece tokenizer.model?",
         path, status.ToString());
  }
  const sentencepiece::SentencePieceProcessor& sp = *processor;

  Vocab vocab;
  vocab.kind = Vocab::Kind::Spm;
  vocab.source = path;
  const int n = sp.GetPieceSize();
  if (n <= 0) fail(ErrorKind::Format, "{}: the sentencepiece model has no pieces", path);
  for (int id = 0; id < n; ++id) {
    vocab.tokens.push_back(sp.IdToPiece(id));
    vocab.scores.push_back(sp.GetScore(id));
    vocab.types.push_back(static_cast<int32_t>(type_of(sp, id)));
  }
  vocab.bos = sp.bos_id();
  vocab.eos = sp.eos_id();
  vocab.unk = sp.unk_id();
  vocab.pad = sp.pad_id();
  vocab.add_bos = vocab.bos >= 0;
  vocab.byte_fallback = true;
  // Whether the model writes a dummy "▁" before the text (decoding drops that space again).
  std::vector<std::string> pieces;
  vocab.add_space_prefix = sp.Encode("a", &pieces).ok() && !pieces.empty() && pieces.front().rfind(kMetaspace, 0) == 0;
  read_config(std::filesystem::path(path).parent_path() / "tokenizer_config.json", vocab);
  finalize_special_tokens(vocab);
  return Tokenizer::from_vocab(std::move(vocab), std::make_shared<SentencepieceEncoder>(processor, path));
}

}  // namespace ferry
