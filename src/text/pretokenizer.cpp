#include "text/pretokenizer.h"

#include <algorithm>
#include <array>

#include "core/error.h"
#include "text/byte_level.h"

namespace ferry {

const char* const kGpt2SplitPattern = R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

namespace {

// A piece of the working buffer; `at_start` marks the piece that begins the input.
struct Piece {
  size_t offset;
  size_t length;
  bool at_start;
};

// A stretch of a piece, found by a pattern (match) or between two matches.
struct Part {
  size_t start;
  size_t end;
  bool match;
};

// The pieces a Split makes of one piece from its matches, as tokenizers'
// NormalizedString::split does for each SplitDelimiterBehavior.
void apply_behavior(const std::vector<Part>& parts, SplitBehavior behavior, const Piece& piece,
                    std::vector<Piece>& out) {
  std::vector<std::pair<size_t, size_t>> kept;  // (start, end) relative to the piece
  switch (behavior) {
    case SplitBehavior::Removed:
      for (const Part& p : parts) {
        if (!p.match) kept.emplace_back(p.start, p.end);
      }
      break;
    case SplitBehavior::Isolated:
      for (const Part& p : parts) kept.emplace_back(p.start, p.end);
      break;
    case SplitBehavior::MergedWithPrevious: {
      bool previous_match = false;
      for (const Part& p : parts) {
        if (p.match && !previous_match && !kept.empty()) {
          kept.back().second = p.end;
        } else {
          kept.emplace_back(p.start, p.end);
        }
        previous_match = p.match;
      }
      break;
    }
    case SplitBehavior::MergedWithNext: {
      bool previous_match = false;  // walking backwards: "previous" is the part after this one
      for (auto it = parts.rbegin(); it != parts.rend(); ++it) {
        if (it->match && !previous_match && !kept.empty()) {
          kept.back().first = it->start;
        } else {
          kept.emplace_back(it->start, it->end);
        }
        previous_match = it->match;
      }
      std::reverse(kept.begin(), kept.end());
      break;
    }
    case SplitBehavior::Contiguous: {
      bool previous_match = false;
      for (const Part& p : parts) {
        if (p.match == previous_match && !kept.empty()) {
          kept.back().second = p.end;
        } else {
          kept.emplace_back(p.start, p.end);
        }
        previous_match = p.match;
      }
      break;
    }
  }
  for (const auto& [start, end] : kept) {
    if (end > start) out.push_back({piece.offset + start, end - start, piece.at_start && start == 0});
  }
}

// Matches of a literal pattern, left to right, not overlapping.
template <typename OnMatch>
void for_each_literal(std::string_view text, std::string_view literal, OnMatch&& on_match) {
  for (size_t at = text.find(literal); at != std::string_view::npos; at = text.find(literal, at + literal.size())) {
    on_match(at, at + literal.size());
  }
}

// Parts of `text` for the matches `find_all` reports, gaps included.
template <typename FindAll>
std::vector<Part> parts_of(std::string_view text, bool invert, FindAll&& find_all) {
  std::vector<Part> parts;
  size_t previous = 0;
  find_all([&](size_t start, size_t end) {
    if (start > previous) parts.push_back({previous, start, invert});
    parts.push_back({start, end, !invert});
    previous = end;
  });
  if (previous < text.size()) parts.push_back({previous, text.size(), invert});
  return parts;
}

// Rewrites every piece with `transform(piece_text, at_start, out)`, building a new buffer.
template <typename Transform>
void rewrite(std::string& buffer, std::vector<Piece>& pieces, Transform transform) {
  std::string next;
  next.reserve(buffer.size() + buffer.size() / 2 + 8);
  for (Piece& p : pieces) {
    const size_t offset = next.size();
    transform(std::string_view(buffer).substr(p.offset, p.length), p.at_start, next);
    p.offset = offset;
    p.length = next.size() - offset;
  }
  buffer.swap(next);
  std::erase_if(pieces, [](const Piece& p) { return p.length == 0; });
}

bool starts_with(std::string_view text, std::string_view prefix) {
  return text.substr(0, prefix.size()) == prefix;
}

}  // namespace

PreTokenizer::PreTokenizer(std::vector<PreTokenizerStep> steps, std::string_view where) : steps_(std::move(steps)) {
  for (size_t i = 0; i < steps_.size(); ++i) {
    const PreTokenizerStep& s = steps_[i];
    int index = -1;
    const std::string what = std::string(where) + " pre-tokenizer " + std::to_string(i);
    if (s.kind == PreTokenizerStep::Kind::Split && s.regex) {
      index = static_cast<int>(regexes_.size());
      regexes_.emplace_back(s.pattern, what);
    } else if (s.kind == PreTokenizerStep::Kind::Split && s.pattern.empty()) {
      fail(ErrorKind::Format, "{}: a Split pre-tokenizer has an empty pattern; give the text to split on", what);
    } else if (s.kind == PreTokenizerStep::Kind::ByteLevel && s.use_regex) {
      index = static_cast<int>(regexes_.size());
      regexes_.emplace_back(kGpt2SplitPattern, what);
    } else if (s.kind == PreTokenizerStep::Kind::Metaspace && s.replacement.empty()) {
      fail(ErrorKind::Format, "{}: a Metaspace pre-tokenizer has an empty replacement character", what);
    }
    if (s.kind == PreTokenizerStep::Kind::ByteLevel) maps_bytes_ = true;
    regex_index_.push_back(index);
  }
}

Words PreTokenizer::split(std::string_view text, bool at_start) const {
  Words words;
  if (text.empty()) return words;
  std::string buffer(text);
  std::vector<Piece> pieces{{0, buffer.size(), at_start}};
  std::vector<Piece> next;

  const auto split_each = [&](auto&& split_piece) {
    next.clear();
    next.reserve(pieces.size() * 2);
    for (const Piece& p : pieces) split_piece(p);
    pieces.swap(next);
  };
  const auto split_by_regex = [&](const Regex& regex, SplitBehavior behavior, bool invert) {
    split_each([&](const Piece& p) {
      const std::string_view piece = std::string_view(buffer).substr(p.offset, p.length);
      apply_behavior(parts_of(piece, invert, [&](auto&& emit) { regex.for_each_match(piece, emit); }), behavior, p,
                     next);
    });
  };

  for (size_t i = 0; i < steps_.size(); ++i) {
    const PreTokenizerStep& s = steps_[i];
    switch (s.kind) {
      case PreTokenizerStep::Kind::Split:
        if (s.regex) {
          split_by_regex(regexes_[regex_index_[i]], s.behavior, s.invert);
        } else {
          split_each([&](const Piece& p) {
            const std::string_view piece = std::string_view(buffer).substr(p.offset, p.length);
            apply_behavior(parts_of(piece, s.invert, [&](auto&& emit) { for_each_literal(piece, s.pattern, emit); }),
                           s.behavior, p, next);
          });
        }
        break;
      case PreTokenizerStep::Kind::ByteLevel:
        if (s.add_prefix_space) {
          rewrite(buffer, pieces, [](std::string_view piece, bool, std::string& out) {
            if (piece.front() != ' ') out += ' ';
            out.append(piece);
          });
        }
        if (s.use_regex) split_by_regex(regexes_[regex_index_[i]], SplitBehavior::Isolated, false);
        rewrite(buffer, pieces,
                [](std::string_view piece, bool, std::string& out) { out.append(byte_level::encode(piece)); });
        break;
      case PreTokenizerStep::Kind::Metaspace:
        rewrite(buffer, pieces, [&](std::string_view piece, bool piece_at_start, std::string& out) {
          std::string replaced;
          replaced.reserve(piece.size() + 8);
          for (char c : piece) {
            if (c == ' ') {
              replaced += s.replacement;
            } else {
              replaced += c;
            }
          }
          const bool prepend = s.prepend == PreTokenizerStep::Prepend::Always ||
                               (s.prepend == PreTokenizerStep::Prepend::First && piece_at_start);
          if (prepend && !starts_with(replaced, s.replacement)) out += s.replacement;
          out += replaced;
        });
        if (s.split) {
          split_each([&](const Piece& p) {
            const std::string_view piece = std::string_view(buffer).substr(p.offset, p.length);
            apply_behavior(parts_of(piece, false, [&](auto&& emit) { for_each_literal(piece, s.replacement, emit); }),
                           SplitBehavior::MergedWithNext, p, next);
          });
        }
        break;
    }
  }

  words.spans.reserve(pieces.size());
  for (const Piece& p : pieces) words.spans.emplace_back(p.offset, p.length);
  words.text = std::move(buffer);
  return words;
}

std::vector<std::string> PreTokenizer::split_to_strings(std::string_view text) const {
  const Words words = split(text);
  std::vector<std::string> out;
  for (size_t i = 0; i < words.size(); ++i) out.emplace_back(words[i]);
  return out;
}

namespace {

// Patterns of the original tokenizer.json files (as llama.cpp lists them per pre-tokenizer name).
const char* const kLlama3 =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
const char* const kQwen2 =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
const char* const kQwen35 =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
const char* const kDeepseekV3 =
    R"([!"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~][A-Za-z]+|[^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+| ?[\p{P}\p{S}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
const char* const kGpt4o =
    R"([^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
const char* const kBloom = R"( ?[^(\s|.,!?…。，、।۔،)]+)";
const char* const kCjk = R"([一-龥぀-ゟ゠-ヿ]+)";

struct PreEntry {
  std::string_view names;  // space-separated tokenizer.ggml.pre values
  std::vector<const char*> patterns;
  bool ignore_merges = false;
  bool add_bos = false;
};

const std::vector<PreEntry>& pre_entries() {
  static const std::vector<PreEntry> entries = {
      {"default gpt-2 phi-2 jina-es jina-de gigachat jina-v2-es jina-v2-de a.x-4.0 mellum modern-bert jina-v1-en "
       "jina-v2-code roberta-bpe exaone4 mpt olmo jais trillion granite-docling",
       {kGpt2SplitPattern}},
      {"llama3 llama-v3 llama-bpe falcon3 falcon-h1 pixtral midm-2.0 lfm2 jina-v5-nano", {kLlama3}, true, true},
      {"dbrx smaug-bpe glm4 chatglm-bpe", {kLlama3}},
      {"jais-2",
       {R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s{512}(?!\S)|\s{256}(?!\S)|\s{128}(?!\S)|\s{64}(?!\S)|\s{32}(?!\S)|\s{16}(?!\S)|\s{8}(?!\S)|\s{4}(?!\S)|\s{1,2}(?!\S)|\s{1})"}},
      {"deepseek-llm",
       {R"([\r\n])",
        // (Greek and letterlike symbols that NFC would rewrite are written as escapes.)
        R"(\s?[A-Za-zµÀ-ÖØ-öø-ƺƼ-ƿǄ-ʓʕ-ʯͰ-ͳͶͷͻ-ͽͿΆΈ-ΊΌΎ-ΡΣ-ϵϷ-ҁҊ-ԯԱ-ՖႠ-ჅᎠ-Ᏽᏸ-ᏽᲐ-ᲺᲽ-Ჿᴀ-ᴫᵫ-ᵷᵹ-ᶚḀ-ἕἘ-Ἕἠ-ὅὈ-Ὅὐ-ὗὙὛὝὟ-\x{1F7D}ᾀ-ᾴᾶ-ᾼ\x{1FBE}ῂ-ῄῆ-ῌῐ-\x{1FD3}ῖ-\x{1FDB}ῠ-Ῥῲ-ῴῶ-ῼℂℇℊ-ℓℕℙ-ℝℤ\x{2126}ℨ\x{212A}-ℭℯ-ℴℹℼ-ℿⅅ-ⅉⅎↃↄⰀ-ⱻⱾ-ⳤⳫ-ⳮⳲⳳꙀ-ꙭꚀ-ꚛꜢ-ꝯꝱ-ꞇꞋ-ꞎꭰ-ꮿﬀ-ﬆﬓ-ﬗＡ-Ｚａ-ｚ𐐀-𐑏𐒰-𐓓𐓘-𐓻𐲀-𐲲𐳀-𐳲𑢠-𑣟𞤀-𞥃]+)",
        R"(\s?[!-/:-~！-／：-～‘-‟　-。]+)", R"(\s+$)", R"([一-龥ࠀ-一가-퟿]+)", R"(\p{N}+)"}},
      {"deepseek-coder", {R"([\r\n])", R"(\s?\p{L}+)", R"(\s?\p{P}+)", R"([一-龥ࠀ-一가-퟿]+)", R"(\p{N})"}},
      {"deepseek-v3 hunyuan-dense joyai-llm hy_v4", {R"(\p{N}{1,3})", kCjk, kDeepseekV3}},
      {"spark2_5",
       {R"(\p{N}{1,3})", kCjk,
        R"([!"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~][A-Za-z]+|[^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+| ?[\p{P}\p{S}]+|[\r\n]|\s+(?!\S)|\s+)",
        R"(\p{N})"}},
      {"falcon",
       {R"([\p{P}\$\+<=>\^~\|`]+)", R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S))",
        R"([0-9][0-9][0-9])"}},
      {"starcoder refact command-r smollm codeshell exaone minerva-7b mellum2", {R"(\p{N})", kGpt2SplitPattern}},
      {"qwen2 deepseek-r1-qwen kormo f2llmv2 megrez stablelm2 hunyuan solar-open grok-2", {kQwen2}},
      {"qwen35", {kQwen35}},
      {"poro-chat bloom gpt3-finnish", {kBloom}},
      {"viking", {kBloom, R"(\p{N})"}},
      {"tekken",
       {R"([^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+)"},
       true,
       true},
      {"chameleon",
       {R"(<sentinel:[0-9]+>)", R"((IMGIMG)((A|B|C|D|E|F|G|H|I){1,4})Z)", R"(([\t\n]|    |  ))", R"(\p{N})",
        R"([\p{P}!-/:-@\[-`{-~])", kGpt2SplitPattern},
       false,
       true},
      {"gpt-4o llama4 kanana2 talkie minimax-m2", {kGpt4o}},
      {"tiny_aya cohere2moe",
       {R"(\d{1,3}(?=(?:\d{3})*\b))",
        R"([^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+)"}},
      {"superbpe", {R"(\p{N}+)", R"((?=(\d{3})+(?!\d)))"}},
      {"bailingmoe bailingmoe2 llada-moe",
       {R"('(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]++[\r\n]*|\s*[\r\n]|\s+(?!\S)|\s+)"}},
      {"seed-coder",
       {R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1}| ?[^\s\p{L}\p{N}\r\n]+|\s*[\r\n]+|\s+(?!\S)|\s+)"}},
      {"ufakzeka", {R"([^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)"}},
      {"laguna", {R"([^\n]+|[\n]+)", kQwen2}},
      {"exaone-moe",
       {R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?(?:\p{L}\p{M}*(?: \p{L}\p{M}*)*)+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]?|\s*[\r\n]|\s+(?!\S)|\s+)"}},
      {"minicpm5",
       {R"(\p{N}{1,3})",
        R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}+| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)"},
       true},
  };
  return entries;
}

bool names_contain(std::string_view names, std::string_view name) {
  while (!names.empty()) {
    const size_t space = names.find(' ');
    if (names.substr(0, space) == name) return true;
    if (space == std::string_view::npos) break;
    names.remove_prefix(space + 1);
  }
  return false;
}

}  // namespace

GgufPreTokenizer pre_tokenizer_for_gguf(std::string_view pre, std::string_view where) {
  const std::string_view name = pre.empty() ? "default" : pre;
  for (const PreEntry& e : pre_entries()) {
    if (!names_contain(e.names, name)) continue;
    GgufPreTokenizer out;
    for (const char* pattern : e.patterns) out.steps.push_back(PreTokenizerStep::split_regex(pattern));
    out.steps.push_back(PreTokenizerStep::byte_level(false, false));
    out.ignore_merges = e.ignore_merges;
    out.add_bos = e.add_bos;
    return out;
  }
  std::string known;
  for (const PreEntry& e : pre_entries()) {
    if (!known.empty()) known += ' ';
    known.append(e.names);
  }
  fail(ErrorKind::Unsupported,
       "{}: tokenizer.ggml.pre = \"{}\" is a pre-tokenizer ferry does not know; known names: {}. Load the model's "
       "tokenizer.json instead, or convert the model with a pre-tokenizer listed here",
       where, pre, known);
}

}  // namespace ferry
