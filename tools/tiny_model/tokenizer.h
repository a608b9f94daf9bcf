// The tokenizer the generated test checkpoints carry: a small byte-level BPE (GPT-2 style) whose
// merges are learned, deterministically, from a short English text embedded here.
//
// Ids: 0..255 the 256 byte tokens in GPT-2's bytes_to_unicode order (id 0 is "!", byte 0x21), then
// one token per merge in the order learned, then the special tokens <|endoftext|> (bos, eos, pad),
// <|user|>, <|assistant|>, <|observation|>. A model's vocabulary is padded past that with unused
// tokens "<|pad_N|>" (GGUF only; tokenizer.json holds the real tokens, as Hugging Face checkpoints
// whose embedding is larger than their tokenizer do).
#pragma once

#include <algorithm>
#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "engine/gguf_vocab_export.h"
#include "formats/gguf_writer.h"
#include "text/vocab.h"

namespace ferry::tiny {

// Written for this tool: the text the merges are learned from.
inline constexpr const char* kTrainingText =
    R"(The ferry leaves the harbour at seven in the morning and crosses the river to the old town on the other side. On a calm day the crossing takes twenty minutes; when the wind comes from the sea it takes longer, and the captain keeps the boat close to the northern bank where the water is quiet.

Most of the people on the morning ferry go to work in the town. They stand at the rail with their coffee and watch the gulls follow the boat. Some read the news, some talk about the weather, and some simply look at the water and think about the day in front of them. A few children cross with their parents to go to the school near the market.

In the summer the ferry is full of visitors. They come to see the castle on the hill, the long bridge that was never finished, and the little museum by the pier, where you can learn how the river was used to carry wood, wool and wine to the sea. The visitors take pictures of everything: of the boat, of the town, of the captain, and of each other.

The captain has worked on the river for thirty years. She knows every stone under the water and every light on the shore. When the fog is thick she listens for the bell on the far pier and steers toward the sound. She says that a good captain does not need to see the river; she needs to remember it.

In the evening the last ferry leaves the town at ten. The lights of the harbour shine on the water, and the boat moves slowly through the dark. The people on board are tired and quiet. They think about the work they have done and the work they will do tomorrow, and they are glad to be going home.

When the river floods in the spring, the ferry does not run. The water rises over the pier and carries branches, boxes and sometimes whole trees down to the sea. The people of the town then take the long road over the hills, which takes more than an hour, and they talk about the ferry as if it were an old friend who had gone away for a while. When the water falls again, the captain checks the boat, cleans the pier, and rings the bell to tell the town that the ferry is back.

There is a small cafe at the end of the pier. The owner opens it at six, before the first ferry, and closes it after the last one. He knows what every regular passenger drinks and has the cup ready before they reach the counter. On cold mornings he gives the children a warm drink for free, and on hot afternoons he sells cold water and ice cream to the visitors who wait in the sun.

The user asks a question and the assistant gives an answer. The assistant should be helpful, honest and clear. If the answer is not known, the assistant says so, and if a tool is needed, the assistant calls the tool and reads the observation before it answers. Numbers such as 1, 2, 3, 10, 100 and 2024 appear in text too, as do words like "don't", "it's" and "we'll".
)";

inline constexpr int kMergeCount = 250;  // 256 bytes + 250 merges + 4 specials = 510 tokens
inline const std::vector<std::string> kSpecialTokens = {"<|endoftext|>", "<|user|>", "<|assistant|>",
                                                        "<|observation|>"};
inline constexpr const char* kChatTemplate =
    "{% for m in messages %}<|{{ m.role }}|>\n{{ m.content }}{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>\n{% endif %}";

struct Tokenizer {
  std::vector<std::string> tokens;  // id order: bytes, merges, specials (no padding)
  std::vector<std::string> merges;  // "left right", rank order
  int32_t endoftext = 0, user = 0, assistant = 0, observation = 0;
  int32_t first_special = 0;

  int32_t size() const { return static_cast<int32_t>(tokens.size()); }
  // The token of id `id` in a vocabulary padded to any size (ids past the tokenizer are pads).
  std::string token_or_pad(int64_t id) const {
    return id < size() ? tokens[static_cast<size_t>(id)] : "<|pad_" + std::to_string(id - size()) + "|>";
  }
  std::vector<int32_t> eos_ids() const { return {endoftext, user, observation}; }
};

// GPT-2's bytes_to_unicode: every byte gets a printable code point; returns (byte, code point) in
// GPT-2's order (the printable bytes first, then the others mapped to 256, 257, ...).
inline std::vector<std::pair<uint8_t, uint32_t>> gpt2_byte_order() {
  std::vector<std::pair<uint8_t, uint32_t>> order;
  std::vector<bool> printable(256, false);
  auto keep = [&](int lo, int hi) {
    for (int b = lo; b <= hi; ++b) {
      printable[static_cast<size_t>(b)] = true;
      order.emplace_back(static_cast<uint8_t>(b), static_cast<uint32_t>(b));
    }
  };
  keep('!', '~');
  keep(0xA1, 0xAC);
  keep(0xAE, 0xFF);
  uint32_t next = 256;
  for (int b = 0; b < 256; ++b) {
    if (!printable[static_cast<size_t>(b)]) order.emplace_back(static_cast<uint8_t>(b), next++);
  }
  return order;
}

inline std::string utf8_encode(uint32_t cp) {
  std::string s;
  if (cp < 0x80) {
    s += static_cast<char>(cp);
  } else if (cp < 0x800) {
    s += static_cast<char>(0xC0 | (cp >> 6));
    s += static_cast<char>(0x80 | (cp & 0x3F));
  } else {  // the code points used here are below 0x10000
    s += static_cast<char>(0xE0 | (cp >> 12));
    s += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    s += static_cast<char>(0x80 | (cp & 0x3F));
  }
  return s;
}

// GPT-2's pre-tokenizer regex for ASCII text:
//   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
// so merges never cross the word boundaries a byte-level BPE tokenizer sees.
inline std::vector<std::string> pretokenize_ascii(const std::string& text) {
  auto is_space = [](char c) { return c == ' ' || c == '\n' || c == '\t' || c == '\r'; };
  auto is_letter = [](char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); };
  auto is_digit = [](char c) { return c >= '0' && c <= '9'; };
  auto is_other = [&](char c) { return !is_space(c) && !is_letter(c) && !is_digit(c); };
  std::vector<std::string> words;
  const size_t n = text.size();
  size_t i = 0;
  while (i < n) {
    if (text[i] == '\'') {
      bool matched = false;
      for (const char* c : {"s", "t", "re", "ve", "m", "ll", "d"}) {
        const std::string suffix = c;
        if (text.compare(i + 1, suffix.size(), suffix) == 0) {
          words.push_back(text.substr(i, 1 + suffix.size()));
          i += 1 + suffix.size();
          matched = true;
          break;
        }
      }
      if (matched) continue;
    }
    size_t start = i;
    size_t j = i;
    if (text[j] == ' ' && j + 1 < n && !is_space(text[j + 1])) ++j;
    if (!is_space(text[j])) {
      const char c = text[j];
      auto same_class = [&](char d) { return is_letter(c) ? is_letter(d) : is_digit(c) ? is_digit(d) : is_other(d); };
      while (j < n && same_class(text[j])) ++j;
      words.push_back(text.substr(start, j - start));
      i = j;
      continue;
    }
    size_t k = i;
    while (k < n && is_space(text[k])) ++k;
    if (k < n && k - i > 1) --k;  // \s+(?!\S): leave the last space for the next word
    words.push_back(text.substr(i, k - i));
    i = k;
  }
  return words;
}

// Learns `n_merges` merges from `text`: each step merges the most frequent adjacent pair (ties: the
// lexically smallest "left right"). A pair whose result is already a token is skipped, so every
// merge adds exactly one new token.
inline Tokenizer train_tokenizer(const std::string& text = kTrainingText, int n_merges = kMergeCount) {
  Tokenizer tok;
  std::map<uint8_t, int32_t> byte_id;
  for (const auto& [byte, cp] : gpt2_byte_order()) {
    byte_id[byte] = static_cast<int32_t>(tok.tokens.size());
    tok.tokens.push_back(utf8_encode(cp));
  }
  std::map<std::string, int64_t> word_counts;
  for (const std::string& w : pretokenize_ascii(text)) ++word_counts[w];
  std::vector<std::vector<int32_t>> words;
  std::vector<int64_t> counts;
  for (const auto& [w, count] : word_counts) {
    std::vector<int32_t> ids;
    for (char c : w) ids.push_back(byte_id[static_cast<uint8_t>(c)]);
    words.push_back(std::move(ids));
    counts.push_back(count);
  }
  std::map<std::string, int32_t> token_id;
  for (size_t id = 0; id < tok.tokens.size(); ++id) token_id[tok.tokens[id]] = static_cast<int32_t>(id);

  std::map<std::pair<int32_t, int32_t>, bool> skipped;
  while (static_cast<int>(tok.merges.size()) < n_merges) {
    std::map<std::pair<int32_t, int32_t>, int64_t> pair_counts;
    for (size_t w = 0; w < words.size(); ++w) {
      for (size_t i = 0; i + 1 < words[w].size(); ++i) pair_counts[{words[w][i], words[w][i + 1]}] += counts[w];
    }
    const std::pair<int32_t, int32_t>* best = nullptr;
    int64_t best_count = 0;
    for (const auto& [pair, count] : pair_counts) {
      if (skipped.count(pair)) continue;
      const bool better =
          best == nullptr || count > best_count ||
          (count == best_count && std::make_pair(tok.tokens[pair.first], tok.tokens[pair.second]) <
                                      std::make_pair(tok.tokens[best->first], tok.tokens[best->second]));
      if (better) {
        best = &pair;
        best_count = count;
      }
    }
    if (best == nullptr) break;  // the text has no pairs left
    const auto [left, right] = *best;
    const std::string merged = tok.tokens[left] + tok.tokens[right];
    if (token_id.count(merged)) {
      skipped[*best] = true;
      continue;
    }
    const int32_t id = static_cast<int32_t>(tok.tokens.size());
    tok.tokens.push_back(merged);
    token_id[merged] = id;
    tok.merges.push_back(tok.tokens[left] + " " + tok.tokens[right]);
    for (std::vector<int32_t>& ids : words) {
      std::vector<int32_t> out;
      for (size_t i = 0; i < ids.size(); ++i) {
        if (i + 1 < ids.size() && ids[i] == left && ids[i + 1] == right) {
          out.push_back(id);
          ++i;
        } else {
          out.push_back(ids[i]);
        }
      }
      ids = std::move(out);
    }
  }
  tok.first_special = tok.size();
  for (const std::string& s : kSpecialTokens) tok.tokens.push_back(s);
  tok.endoftext = tok.first_special;
  tok.user = tok.first_special + 1;
  tok.assistant = tok.first_special + 2;
  tok.observation = tok.first_special + 3;
  return tok;
}

// The tokenizer learned from the embedded text (computed once).
inline const Tokenizer& default_tokenizer() {
  static const Tokenizer tokenizer = train_tokenizer();
  return tokenizer;
}

// Hugging Face tokenizer.json (tokenizers library format).
inline nlohmann::ordered_json tokenizer_json(const Tokenizer& tok) {
  using json = nlohmann::ordered_json;
  json added = json::array();
  for (int32_t id = tok.first_special; id < tok.size(); ++id) {
    added.push_back({{"id", id},
                     {"content", tok.tokens[static_cast<size_t>(id)]},
                     {"single_word", false},
                     {"lstrip", false},
                     {"rstrip", false},
                     {"normalized", false},
                     {"special", true}});
  }
  json vocab = json::object();
  for (int32_t id = 0; id < tok.first_special; ++id) vocab[tok.tokens[static_cast<size_t>(id)]] = id;
  json byte_level = {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true}, {"use_regex", true}};
  json model = {{"type", "BPE"},
                {"dropout", nullptr},
                {"unk_token", nullptr},
                {"continuing_subword_prefix", nullptr},
                {"end_of_word_suffix", nullptr},
                {"fuse_unk", false},
                {"byte_fallback", false},
                {"ignore_merges", false},
                {"vocab", std::move(vocab)},
                {"merges", tok.merges}};
  return json{{"version", "1.0"},          {"truncation", nullptr}, {"padding", nullptr},
              {"added_tokens", added},     {"normalizer", nullptr}, {"pre_tokenizer", byte_level},
              {"post_processor", nullptr}, {"decoder", byte_level}, {"model", std::move(model)}};
}

// Hugging Face tokenizer_config.json.
inline nlohmann::ordered_json tokenizer_config_json(const Tokenizer& tok, int64_t max_context) {
  using json = nlohmann::ordered_json;
  json decoder = json::object();
  for (int32_t id = tok.first_special; id < tok.size(); ++id) {
    decoder[std::to_string(id)] = {{"content", tok.tokens[static_cast<size_t>(id)]},
                                   {"lstrip", false},
                                   {"normalized", false},
                                   {"rstrip", false},
                                   {"single_word", false},
                                   {"special", true}};
  }
  const std::string& eot = tok.tokens[static_cast<size_t>(tok.endoftext)];
  return json{{"add_bos_token", false},
              {"add_eos_token", false},
              {"added_tokens_decoder", decoder},
              {"additional_special_tokens", json::array({"<|user|>", "<|assistant|>", "<|observation|>"})},
              {"bos_token", eot},
              {"eos_token", eot},
              {"pad_token", eot},
              {"chat_template", kChatTemplate},
              {"clean_up_tokenization_spaces", false},
              {"model_max_length", max_context},
              {"tokenizer_class", "PreTrainedTokenizerFast"}};
}

// The tokenizer.* keys of a GGUF whose vocabulary has `vocab_size` >= tok.size() entries: the
// tokens, then unused pads "<|pad_N|>"; eos and eot are <|endoftext|> and <|user|>.
inline void add_gguf_tokenizer(GgufWriter& gguf, const Tokenizer& tok, int64_t vocab_size) {
  Vocab v;
  v.kind = Vocab::Kind::Bpe;
  v.pre = "default";
  for (int64_t id = 0; id < vocab_size; ++id) {
    v.tokens.push_back(tok.token_or_pad(id));
    const TokenType type = id >= tok.size()          ? TokenType::Unused
                           : id >= tok.first_special ? TokenType::Control
                                                     : TokenType::Normal;
    v.types.push_back(static_cast<int32_t>(type));
  }
  for (const std::string& m : tok.merges) {
    const size_t space = m.find(' ');
    v.merges.emplace_back(m.substr(0, space), m.substr(space + 1));
  }
  v.bos = v.eos = v.pad = tok.endoftext;
  v.eot = tok.user;
  v.chat_template = kChatTemplate;
  add_gguf_vocab(gguf, v);
}

}  // namespace ferry::tiny
