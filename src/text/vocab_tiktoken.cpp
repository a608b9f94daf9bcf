// vocab_from_tiktoken: a tiktoken rank file (GLM-4's tokenizer.model), one "<base64 token> <rank>"
// per line, plus the special tokens the model's tokenizer code adds after the ranks.
#include <algorithm>
#include <array>
#include <charconv>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "formats/json_file.h"
#include "text/byte_level.h"
#include "text/utf8.h"
#include "text/vocab.h"

namespace ferry {

namespace {

// GLM-4's split pattern and special tokens, in id order after the ranks (tokenization_chatglm.py).
constexpr const char* kGlm4Pattern =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
constexpr std::array<const char*, 14> kGlm4Specials = {"<|endoftext|>",
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
                                                       "<|end_of_image|>",
                                                       "<|begin_of_video|>",
                                                       "<|end_of_video|>"};
constexpr int64_t kMaxRank = 50'000'000;

int base64_value(char c) {
  if (c >= 'A' && c <= 'Z') return c - 'A';
  if (c >= 'a' && c <= 'z') return c - 'a' + 26;
  if (c >= '0' && c <= '9') return c - '0' + 52;
  if (c == '+') return 62;
  if (c == '/') return 63;
  return -1;
}

// Standard base64 with optional '=' padding; nullopt when malformed.
std::optional<std::string> decode_base64(std::string_view text) {
  while (!text.empty() && text.back() == '=') text.remove_suffix(1);
  if (text.size() % 4 == 1) return std::nullopt;
  std::string out;
  uint32_t bits = 0;
  int n_bits = 0;
  for (char c : text) {
    const int v = base64_value(c);
    if (v < 0) return std::nullopt;
    bits = (bits << 6) | static_cast<uint32_t>(v);
    n_bits += 6;
    if (n_bits >= 8) {
      n_bits -= 8;
      out += static_cast<char>((bits >> n_bits) & 0xFF);
    }
  }
  return out;
}

// "<base64> <rank>" split at the single space; false when the line has another shape.
bool split_line(std::string_view line, std::string_view& token, int64_t& rank) {
  const size_t space = line.find(' ');
  if (space == std::string_view::npos || space == 0) return false;
  token = line.substr(0, space);
  const std::string_view number = line.substr(space + 1);
  const auto [end, ec] = std::from_chars(number.data(), number.data() + number.size(), rank);
  return ec == std::errc() && end == number.data() + number.size() && !number.empty();
}

std::string_view trim_line(std::string_view line) {
  while (!line.empty() && (line.back() == '\r' || line.back() == '\n' || line.back() == ' ')) line.remove_suffix(1);
  return line;
}

}  // namespace

bool looks_like_tiktoken(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::string line;
  if (!in || !std::getline(in, line)) return false;
  std::string_view token;
  int64_t rank = 0;
  return split_line(trim_line(line), token, rank) && decode_base64(token).has_value();
}

Vocab vocab_from_tiktoken(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail(ErrorKind::Io, "{}: cannot open the tiktoken file", path);
  Vocab vocab;
  vocab.source = path;
  vocab.kind = Vocab::Kind::Bpe;
  vocab.merges_from_ranks = true;
  vocab.ignore_merges = true;  // tiktoken takes a word that is itself a token as it is
  vocab.add_space_prefix = false;
  vocab.byte_fallback = false;
  vocab.pre_tokenizers = {PreTokenizerStep::split_regex(kGlm4Pattern), PreTokenizerStep::byte_level(false, false)};

  std::array<bool, 256> has_byte{};
  std::string line;
  size_t line_number = 0;
  while (std::getline(in, line)) {
    ++line_number;
    const std::string_view text = trim_line(line);
    if (text.empty()) continue;
    std::string_view token;
    int64_t rank = 0;
    std::optional<std::string> bytes;
    if (!split_line(text, token, rank) || !(bytes = decode_base64(token)) || bytes->empty()) {
      fail(ErrorKind::Format, "{}:{}: expected \"<base64 token> <rank>\", got \"{}\"", path, line_number,
           utf8::sanitize(text.substr(0, 80)));
    }
    // Ranks are dense (0, 1, 2, ...): one far beyond the line count is a broken file, and a small
    // file could otherwise ask for a table of gigabytes.
    const int64_t limit = std::min<int64_t>(kMaxRank, 2 * static_cast<int64_t>(line_number) + 65536);
    if (rank < 0 || rank > limit) {
      fail(ErrorKind::Format, "{}:{}: rank {} is outside 0..{}; ranks must be dense", path, line_number, rank, limit);
    }
    const auto id = static_cast<size_t>(rank);
    if (id >= vocab.tokens.size()) {
      vocab.tokens.resize(id + 1);
      vocab.types.resize(id + 1, static_cast<int32_t>(TokenType::Unused));
    }
    if (!vocab.tokens[id].empty()) fail(ErrorKind::Format, "{}:{}: rank {} appears twice", path, line_number, rank);
    if (bytes->size() == 1) has_byte[static_cast<uint8_t>(bytes->front())] = true;
    vocab.tokens[id] = byte_level::encode(*bytes);
    vocab.types[id] = static_cast<int32_t>(TokenType::Normal);
  }
  if (vocab.tokens.empty()) fail(ErrorKind::Format, "{}: the tiktoken file has no ranks", path);
  for (int b = 0; b < 256; ++b) {
    // Every byte must be a token of its own, or some text could not be encoded at all.
    if (!has_byte[b]) {
      fail(ErrorKind::Format, "{}: byte 0x{:02X} has no rank; a tiktoken file must rank all 256 single bytes", path, b);
    }
  }

  // Special tokens: tokenizer_config.json's added_tokens_decoder, else GLM-4's list.
  const auto add_special = [&](size_t id, const std::string& text, bool special) {
    if (id >= vocab.tokens.size()) {
      vocab.tokens.resize(id + 1);
      vocab.types.resize(id + 1, static_cast<int32_t>(TokenType::Unused));
    }
    vocab.tokens[id] = text;
    vocab.types[id] = static_cast<int32_t>(special ? TokenType::Control : TokenType::UserDefined);
  };
  const std::filesystem::path config_path = std::filesystem::path(path).parent_path() / "tokenizer_config.json";
  bool from_config = false;
  if (std::filesystem::exists(config_path)) {
    const nlohmann::json config = read_json_file(config_path.string(), ErrorKind::Config);
    const auto it = config.is_object() ? config.find("added_tokens_decoder") : config.end();
    if (config.is_object() && it != config.end() && it->is_object()) {
      for (const auto& [key, entry] : it->items()) {
        int64_t id = -1;
        const auto [end, ec] = std::from_chars(key.data(), key.data() + key.size(), id);
        const auto content = entry.is_object() ? entry.find("content") : entry.end();
        if (ec != std::errc() || end != key.data() + key.size() || id < 0 ||
            id > 2 * static_cast<int64_t>(vocab.tokens.size()) + 65536 || content == entry.end() ||
            !content->is_string() || content->get<std::string>().empty()) {
          fail(ErrorKind::Config,
               "{}: added_tokens_decoder[\"{}\"] needs a numeric id not far past the vocabulary and a \"content\" "
               "string",
               config_path.string(), utf8::sanitize(key));
        }
        const auto special = entry.find("special");
        add_special(static_cast<size_t>(id), content->get<std::string>(),
                    special == entry.end() || !special->is_boolean() || special->get<bool>());
        from_config = true;
      }
    }
    vocab.source = path + " + " + config_path.string();
  }
  if (!from_config) {
    const size_t first = vocab.tokens.size();
    for (size_t i = 0; i < kGlm4Specials.size(); ++i) add_special(first + i, kGlm4Specials[i], true);
  }
  vocab.scores.assign(vocab.tokens.size(), 0.0f);

  const auto find = [&](std::string_view text) -> int32_t {
    for (size_t id = 0; id < vocab.tokens.size(); ++id) {
      if (vocab.types[id] == static_cast<int32_t>(TokenType::Control) && vocab.tokens[id] == text) {
        return static_cast<int32_t>(id);
      }
    }
    return -1;
  };
  vocab.eos = find("<|endoftext|>");
  vocab.pad = vocab.eos;
  const int32_t gmask = find("[gMASK]");
  const int32_t sop = find("<sop>");
  if (gmask >= 0 && sop >= 0) vocab.special_prefix = {gmask, sop};  // GLM-4's get_prefix_tokens

  finalize_special_tokens(vocab);
  vocab.validate();
  return vocab;
}

}  // namespace ferry
