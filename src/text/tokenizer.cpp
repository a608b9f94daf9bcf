#include "text/tokenizer.h"

#include <algorithm>
#include <array>
#include <unordered_map>

#include "core/error.h"
#include "text/byte_level.h"
#include "text/merge.h"
#include "text/pretokenizer.h"
#include "text/utf8.h"

namespace ferry {

namespace {

const std::string kMetaspace = "\xE2\x96\x81";  // U+2581 "▁", sentencepiece's visible space

struct StringHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};
template <typename V>
using StringMap = std::unordered_map<std::string, V, StringHash, std::equal_to<>>;

// A merge's key: the left part's length, then both parts, so ("ab","c") and ("a","bc") differ.
void merge_key(std::string& key, std::string_view left, std::string_view right) {
  const auto n = static_cast<uint32_t>(left.size());
  key.assign(reinterpret_cast<const char*>(&n), sizeof n);
  key.append(left);
  key.append(right);
}

// The byte of a "<0xAB>" piece, or -1.
int parse_byte_piece(std::string_view piece) {
  if (piece.size() != 6 || piece.substr(0, 3) != "<0x" || piece[5] != '>') return -1;
  int value = 0;
  for (char c : piece.substr(3, 2)) {
    value <<= 4;
    if (c >= '0' && c <= '9') {
      value |= c - '0';
    } else if (c >= 'A' && c <= 'F') {
      value |= c - 'A' + 10;
    } else if (c >= 'a' && c <= 'f') {
      value |= c - 'a' + 10;
    } else {
      return -1;
    }
  }
  return value;
}

// A piece of the input: raw text, or a special token found in it.
struct Fragment {
  int32_t id;  // -1 for raw text
  std::string_view text;
};

}  // namespace

struct Tokenizer::Impl {
  Vocab vocab;
  StringMap<int32_t> piece_to_id;         // every non-empty piece, lowest id first
  StringMap<int32_t> mergeable;           // pieces ordinary text may become: all but control tokens
  StringMap<int64_t> merge_rank;          // merge_key(left, right) -> rank
  std::array<int32_t, 256> byte_token{};  // Spm: byte -> <0xXX> token, -1 when absent
  std::vector<int32_t> specials;          // control/user-defined/unknown ids, longest text first
  std::shared_ptr<const PreTokenizer> pre_tokenizer;

  std::vector<Fragment> split_special(std::string_view text, bool parse_special) const;
  void encode_spm(std::string_view text, bool space_prefix, std::vector<int32_t>& out) const;
  void encode_bpe(std::string_view text, std::vector<int32_t>& out) const;
  void encode_bpe_word(std::string_view word, std::vector<int32_t>& out) const;
  void fallback(std::string_view symbol, std::vector<int32_t>& out) const;
  int64_t rank(std::string& key, std::string_view left, std::string_view right) const;
  void check_id(int32_t id) const;
};

Tokenizer Tokenizer::from_vocab(Vocab vocab) {
  return from_vocab(std::move(vocab), make_gpt2_pretokenizer());
}

Tokenizer Tokenizer::from_vocab(Vocab vocab, std::shared_ptr<const PreTokenizer> pre_tokenizer) {
  // A hand-built vocabulary may leave out what has an obvious default.
  if (vocab.scores.empty()) vocab.scores.assign(vocab.tokens.size(), 0.0f);
  if (vocab.types.empty()) vocab.types.assign(vocab.tokens.size(), static_cast<int32_t>(TokenType::Normal));
  std::sort(vocab.eog_ids.begin(), vocab.eog_ids.end());
  vocab.eog_ids.erase(std::unique(vocab.eog_ids.begin(), vocab.eog_ids.end()), vocab.eog_ids.end());
  vocab.validate();
  if (!pre_tokenizer) fail(ErrorKind::Usage, "{}: Tokenizer::from_vocab needs a pre-tokenizer", vocab.source);
  auto impl = std::make_shared<Impl>();
  impl->pre_tokenizer = std::move(pre_tokenizer);
  impl->byte_token.fill(-1);

  for (int32_t id = 0; id < vocab.size(); ++id) {
    const std::string& piece = vocab.tokens[id];
    if (piece.empty()) continue;  // an id nobody defined
    impl->piece_to_id.emplace(piece, id);
    const TokenType type = vocab.type(id);
    if (type != TokenType::Control) impl->mergeable.emplace(piece, id);
    if (type == TokenType::Control || type == TokenType::UserDefined || type == TokenType::Unknown) {
      impl->specials.push_back(id);
    }
    if (const int byte = parse_byte_piece(piece); byte >= 0 && impl->byte_token[byte] < 0) {
      impl->byte_token[byte] = id;
    }
  }
  std::stable_sort(impl->specials.begin(), impl->specials.end(),
                   [&](int32_t a, int32_t b) { return vocab.tokens[a].size() > vocab.tokens[b].size(); });

  std::string key;
  for (size_t rank = 0; rank < vocab.merges.size(); ++rank) {
    merge_key(key, vocab.merges[rank].first, vocab.merges[rank].second);
    impl->merge_rank.emplace(key, static_cast<int64_t>(rank));  // a repeated merge keeps its first rank
  }
  impl->vocab = std::move(vocab);
  return Tokenizer(std::move(impl));
}

const Vocab& Tokenizer::vocab() const {
  return impl_->vocab;
}

void Tokenizer::Impl::check_id(int32_t id) const {
  if (id < 0 || id >= vocab.size()) {
    fail(ErrorKind::Usage, "token id {} is outside the vocabulary of {} tokens ({})", id, vocab.size(), vocab.source);
  }
}

int64_t Tokenizer::Impl::rank(std::string& key, std::string_view left, std::string_view right) const {
  merge_key(key, left, right);
  const auto it = merge_rank.find(key);
  return it == merge_rank.end() ? -1 : it->second;
}

std::vector<Fragment> Tokenizer::Impl::split_special(std::string_view text, bool parse_special) const {
  std::vector<Fragment> fragments;
  if (text.empty()) return fragments;
  fragments.push_back({-1, text});
  std::vector<Fragment> next;
  // One special token at a time, longest first, over the raw text that is left (llama.cpp's
  // tokenizer_st_partition), so "<|im_end|>" wins over a shorter token inside it.
  for (int32_t id : specials) {
    if (!parse_special && vocab.type(id) != TokenType::UserDefined) continue;
    const std::string& special = vocab.tokens[id];
    next.clear();
    for (const Fragment& f : fragments) {
      if (f.id >= 0) {
        next.push_back(f);
        continue;
      }
      std::string_view rest = f.text;
      for (size_t at = rest.find(special); at != std::string_view::npos; at = rest.find(special)) {
        if (at > 0) next.push_back({-1, rest.substr(0, at)});
        next.push_back({id, special});
        rest.remove_prefix(at + special.size());
      }
      if (!rest.empty()) next.push_back({-1, rest});
    }
    fragments.swap(next);
  }
  return fragments;
}

std::vector<int32_t> Tokenizer::encode(std::string_view text, bool add_special, bool parse_special) const {
  const Impl& m = *impl_;
  const Vocab& v = m.vocab;
  std::vector<int32_t> out;
  if (add_special && v.add_bos) out.push_back(v.bos);

  bool after_special = true;  // the start of the text counts as following a special token
  for (const Fragment& f : m.split_special(text, parse_special)) {
    if (f.id >= 0) {
      out.push_back(f.id);
      after_special = true;
      continue;
    }
    if (v.kind == Vocab::Kind::Spm) {
      m.encode_spm(f.text, v.add_space_prefix && after_special, out);
    } else {
      m.encode_bpe(f.text, out);
    }
    after_special = false;
  }

  if (add_special && v.add_eos) out.push_back(v.eos);
  return out;
}

void Tokenizer::Impl::encode_spm(std::string_view text, bool space_prefix, std::vector<int32_t>& out) const {
  std::string escaped = space_prefix ? kMetaspace : std::string();
  escaped.reserve(escaped.size() + text.size() + text.size() / 2);
  for (char c : text) {
    if (c == ' ') {
      escaped += kMetaspace;
    } else {
      escaped += c;
    }
  }

  std::vector<std::string_view> symbols;
  if (vocab.merges.empty()) {
    symbols = merge_by_score(escaped, [&](std::string_view piece) -> std::optional<float> {
      const auto it = mergeable.find(piece);
      if (it == mergeable.end()) return std::nullopt;
      return vocab.scores[it->second];
    });
  } else {
    std::string key;
    symbols = merge_by_rank(escaped, [&](std::string_view l, std::string_view r) { return rank(key, l, r); });
  }
  for (std::string_view symbol : symbols) {
    const auto it = mergeable.find(symbol);
    if (it != mergeable.end()) {
      out.push_back(it->second);
    } else {
      fallback(symbol, out);
    }
  }
}

// A symbol with no token of its own (always a single character): its UTF-8 bytes as <0xXX>
// tokens when the vocabulary has them all, else the unknown token.
void Tokenizer::Impl::fallback(std::string_view symbol, std::vector<int32_t>& out) const {
  bool all_bytes = vocab.byte_fallback;
  for (char c : symbol) all_bytes = all_bytes && byte_token[static_cast<uint8_t>(c)] >= 0;
  if (all_bytes) {
    for (char c : symbol) out.push_back(byte_token[static_cast<uint8_t>(c)]);
    return;
  }
  if (vocab.unk >= 0) {
    out.push_back(vocab.unk);
    return;
  }
  fail(ErrorKind::Unsupported,
       "{}: cannot encode the text \"{}\": the vocabulary has no token for it, no byte-fallback tokens and no "
       "unknown token",
       vocab.source, utf8::sanitize(symbol));
}

void Tokenizer::Impl::encode_bpe(std::string_view text, std::vector<int32_t>& out) const {
  std::string prefixed;
  if (vocab.add_space_prefix && (text.empty() || text.front() != ' ')) {  // ByteLevel add_prefix_space
    prefixed = " ";
    prefixed.append(text);
    text = prefixed;
  }
  for (std::string_view word : pre_tokenizer->split(text)) encode_bpe_word(word, out);
}

void Tokenizer::Impl::encode_bpe_word(std::string_view word, std::vector<int32_t>& out) const {
  const std::string mapped = byte_level::encode(word);
  if (vocab.ignore_merges) {
    if (const auto it = mergeable.find(mapped); it != mergeable.end()) {
      out.push_back(it->second);
      return;
    }
  }
  std::string key;
  const auto symbols = merge_by_rank(mapped, [&](std::string_view l, std::string_view r) { return rank(key, l, r); });
  for (std::string_view symbol : symbols) {
    if (const auto it = mergeable.find(symbol); it != mergeable.end()) {
      out.push_back(it->second);
      continue;
    }
    // No token for the merged symbol: one token per byte character (as llama.cpp does).
    for (size_t i = 0; i < symbol.size();) {
      const size_t length = utf8::char_length(symbol.substr(i));
      if (const auto it = mergeable.find(symbol.substr(i, length)); it != mergeable.end()) {
        out.push_back(it->second);
      } else if (vocab.unk >= 0) {
        out.push_back(vocab.unk);
      } else {
        fail(ErrorKind::Unsupported,
             "{}: cannot encode the byte-level character \"{}\": the vocabulary has no token for it and no unknown "
             "token",
             vocab.source, symbol.substr(i, length));
      }
      i += length;
    }
  }
}

std::string Tokenizer::decode_token(int32_t id, bool render_special) const {
  const Impl& m = *impl_;
  m.check_id(id);
  const Vocab& v = m.vocab;
  const std::string& piece = v.tokens[id];
  switch (v.type(id)) {
    case TokenType::Control:
    case TokenType::Unknown:
      return render_special ? piece : std::string();
    case TokenType::UserDefined:
      return piece;
    case TokenType::Byte:
      if (const int byte = parse_byte_piece(piece); byte >= 0) return std::string(1, static_cast<char>(byte));
      break;
    default:
      break;
  }
  if (v.kind == Vocab::Kind::Bpe) return byte_level::decode(piece);
  std::string text;
  text.reserve(piece.size());
  for (size_t i = 0; i < piece.size();) {
    if (piece.compare(i, kMetaspace.size(), kMetaspace) == 0) {
      text += ' ';
      i += kMetaspace.size();
    } else {
      text += piece[i++];
    }
  }
  return text;
}

std::string Tokenizer::decode(const std::vector<int32_t>& ids, bool render_special) const {
  const Vocab& v = impl_->vocab;
  // Spm's dummy prefix put a space before the text; the first non-control token carries it.
  bool strip_space = v.kind == Vocab::Kind::Spm && v.add_space_prefix;
  std::string text;
  for (int32_t id : ids) {
    std::string piece = decode_token(id, render_special);
    if (strip_space && v.type(id) != TokenType::Control && !piece.empty()) {
      if (!piece.empty() && piece.front() == ' ') piece.erase(0, 1);
      strip_space = false;
    }
    text += piece;
  }
  return text;
}

std::string Tokenizer::token_piece(int32_t id) const {
  impl_->check_id(id);
  return impl_->vocab.tokens[id];
}

int32_t Tokenizer::find_token(std::string_view piece) const {
  const auto it = impl_->piece_to_id.find(piece);
  return it == impl_->piece_to_id.end() ? -1 : it->second;
}

StreamDecoder::StreamDecoder(Tokenizer tokenizer, bool render_special)
    : tokenizer_(std::move(tokenizer)), render_special_(render_special) {}

std::string StreamDecoder::push(int32_t id) {
  pending_ += tokenizer_.decode_token(id, render_special_);
  const size_t complete = utf8::complete_prefix_length(pending_);
  std::string out = utf8::sanitize(std::string_view(pending_).substr(0, complete));
  pending_.erase(0, complete);
  return out;
}

std::string StreamDecoder::flush() {
  std::string out = utf8::sanitize(pending_);
  pending_.clear();
  return out;
}

}  // namespace ferry
