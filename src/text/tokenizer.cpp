#include "text/tokenizer.h"

#include <algorithm>
#include <array>
#include <cctype>
#include <mutex>
#include <queue>
#include <unordered_map>
#include <unordered_set>

#include "core/error.h"
#include "text/added_tokens.h"
#include "text/byte_level.h"
#include "text/merge.h"
#include "text/normalizer.h"
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

uint64_t pair_key(int32_t left, int32_t right) {
  return (static_cast<uint64_t>(static_cast<uint32_t>(left)) << 32) | static_cast<uint32_t>(right);
}

// What runs on each word.
enum class Model {
  RankBpe,   // merges by rank (tokenizers' BPE model, GGUF gpt2)
  ScoreSpm,  // merges by token score (GGUF llama, llama.cpp's sentencepiece BPE)
  RankIds,   // tiktoken: the merge whose result has the lowest id first
};

struct MergeRule {
  int32_t rank;
  int32_t merged;
};

bool has_byte_level(const std::vector<PreTokenizerStep>& steps) {
  return std::any_of(steps.begin(), steps.end(),
                     [](const PreTokenizerStep& s) { return s.kind == PreTokenizerStep::Kind::ByteLevel; });
}

}  // namespace

struct Tokenizer::Impl {
  Vocab vocab;
  Model model = Model::RankBpe;
  StringMap<int32_t> piece_to_id;                       // every non-empty piece, lowest id first
  StringMap<int32_t> mergeable;                         // pieces ordinary text may become: all but control tokens
  std::unordered_map<uint64_t, MergeRule> merge_rules;  // (left id, right id) -> rank and result
  std::array<int32_t, 256> byte_token{};                // byte -> <0xXX> token, -1 when absent
  AddedTokenMatcher raw_added;                          // added tokens matched in the raw text
  AddedTokenMatcher normalized_added;                   // added tokens matched after normalization
  Normalizer normalizer;
  PreTokenizer pre_tokenizer;
  std::vector<int32_t> prefix, suffix;  // what add_special puts around the text
  std::shared_ptr<const FragmentEncoder> external;

  // Words already merged during one encode call (texts repeat their words).
  using WordCache = std::unordered_map<std::string, std::vector<int32_t>>;

  void encode_run(std::string_view text, bool at_start, WordCache& cache, std::vector<int32_t>& out) const;
  void encode_word(std::string_view word, WordCache& cache, std::vector<int32_t>& out) const;
  void merge_cached(std::string_view chunk, WordCache& cache, std::vector<int32_t>& out) const;
  void merge(std::string_view chunk, std::vector<int32_t>& out) const;
  void encode_rank_bpe(std::string_view word, std::vector<int32_t>& out) const;
  void encode_by_score(std::string_view word, std::vector<int32_t>& out) const;
  bool is_barrier(std::string_view left_char, std::string_view right_char) const;

  // Adjacent character pairs that occur inside some token. No merge can ever join two characters
  // whose pair is not here, so a long word splits there into chunks merged on their own, with
  // exactly the same result (built on the first long word).
  mutable std::once_flag bigrams_once;
  mutable std::unordered_set<uint64_t> token_bigrams;
  void fallback(std::string_view symbol, std::vector<int32_t>& out) const;
  void check_id(int32_t id) const;
};

Tokenizer Tokenizer::from_vocab(Vocab vocab) {
  return from_vocab(std::move(vocab), nullptr);
}

Tokenizer Tokenizer::from_vocab(Vocab vocab, std::shared_ptr<const FragmentEncoder> encoder) {
  // A hand-built vocabulary may leave out what has an obvious default.
  if (vocab.scores.empty()) vocab.scores.assign(vocab.tokens.size(), 0.0f);
  if (vocab.types.empty()) vocab.types.assign(vocab.tokens.size(), static_cast<int32_t>(TokenType::Normal));
  std::sort(vocab.eog_ids.begin(), vocab.eog_ids.end());
  vocab.eog_ids.erase(std::unique(vocab.eog_ids.begin(), vocab.eog_ids.end()), vocab.eog_ids.end());
  vocab.validate();

  auto impl = std::make_shared<Impl>();
  impl->external = std::move(encoder);
  impl->byte_token.fill(-1);

  // The pipeline a vocabulary without one implies.
  if (vocab.kind == Vocab::Kind::Bpe) {
    if (vocab.pre_tokenizers.empty()) {
      vocab.pre_tokenizers.push_back(PreTokenizerStep::byte_level(vocab.add_space_prefix, true));
    } else if (!has_byte_level(vocab.pre_tokenizers)) {
      vocab.pre_tokenizers.push_back(PreTokenizerStep::byte_level(false, false));
    }
    impl->model = vocab.merges_from_ranks ? Model::RankIds : Model::RankBpe;
  } else {
    if (vocab.normalizers.empty() && vocab.pre_tokenizers.empty() && !impl->external) {
      if (vocab.add_space_prefix) vocab.normalizers.push_back({NormalizerStep::Kind::Prepend, "", false, kMetaspace});
      vocab.normalizers.push_back({NormalizerStep::Kind::Replace, " ", false, kMetaspace});
    }
    impl->model = vocab.merges.empty() ? Model::ScoreSpm : Model::RankBpe;
  }
  impl->normalizer = Normalizer(vocab.normalizers, vocab.source);
  impl->pre_tokenizer = PreTokenizer(vocab.pre_tokenizers, vocab.source);

  for (int32_t id = 0; id < vocab.size(); ++id) {
    const std::string& piece = vocab.tokens[id];
    if (piece.empty()) continue;  // an id nobody defined
    impl->piece_to_id.emplace(piece, id);
    const TokenType type = vocab.type(id);
    if (type != TokenType::Control) impl->mergeable.emplace(piece, id);
    if (type == TokenType::Control || type == TokenType::UserDefined || type == TokenType::Unknown) {
      const uint8_t flags = vocab.token_flags.empty() ? 0 : vocab.token_flags[id];
      const bool special = type != TokenType::UserDefined;
      if (flags & kAddedNormalized) {
        impl->normalized_added.add(impl->normalizer.apply(piece), id, flags, special);
      } else {
        impl->raw_added.add(piece, id, flags, special);
      }
    }
    if (const int byte = parse_byte_piece(piece); byte >= 0 && impl->byte_token[byte] < 0) {
      impl->byte_token[byte] = id;
    }
  }

  for (size_t rank = 0; rank < vocab.merges.size(); ++rank) {
    const auto& [left, right] = vocab.merges[rank];
    const auto l = impl->piece_to_id.find(left);
    const auto r = impl->piece_to_id.find(right);
    const auto m = impl->piece_to_id.find(left + right);
    // A merge of pieces the vocabulary lacks can never apply (llama.cpp skips it too).
    if (l == impl->piece_to_id.end() || r == impl->piece_to_id.end() || m == impl->piece_to_id.end()) continue;
    // A repeated merge keeps its first rank.
    impl->merge_rules.emplace(pair_key(l->second, r->second), MergeRule{static_cast<int32_t>(rank), m->second});
  }

  impl->prefix = vocab.special_prefix;
  if (impl->prefix.empty() && vocab.add_bos) impl->prefix.push_back(vocab.bos);
  impl->suffix = vocab.special_suffix;
  if (impl->suffix.empty() && vocab.add_eos) impl->suffix.push_back(vocab.eos);
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

std::vector<int32_t> Tokenizer::encode(std::string_view text, bool add_special, bool parse_special) const {
  const Impl& m = *impl_;
  std::vector<int32_t> out;
  out.reserve(text.size() / 3 + 8);
  if (add_special) out.insert(out.end(), m.prefix.begin(), m.prefix.end());
  Impl::WordCache cache;

  for (const AddedTokenMatcher::Part& part : m.raw_added.split(text, parse_special)) {
    if (part.id >= 0) {
      out.push_back(part.id);
      continue;
    }
    const std::string_view run = text.substr(part.start, part.end - part.start);
    const bool at_start = part.start == 0;
    if (m.external) {
      m.external->encode(run, out);
      continue;
    }
    const std::string normalized = m.normalizer.empty() ? std::string(run) : m.normalizer.apply(run);
    if (m.normalized_added.empty()) {
      m.encode_run(normalized, at_start, cache, out);
      continue;
    }
    for (const AddedTokenMatcher::Part& sub : m.normalized_added.split(normalized, parse_special)) {
      if (sub.id >= 0) {
        out.push_back(sub.id);
      } else {
        m.encode_run(std::string_view(normalized).substr(sub.start, sub.end - sub.start), at_start && sub.start == 0,
                     cache, out);
      }
    }
  }

  // Text with something to say that became no token at all: the tokenizer has no token for any
  // of its characters (and no unknown token). Dropping all of it silently would feed the model
  // nothing, or another prompt than the user wrote.
  const size_t produced = out.size() - (add_special ? m.prefix.size() : 0);
  if (produced == 0 &&
      std::any_of(text.begin(), text.end(), [](char c) { return !std::isspace(static_cast<unsigned char>(c)); })) {
    fail(ErrorKind::Usage,
         "the tokenizer has no token for any character of the text \"{}\" (and no unknown token): it cannot encode "
         "it; check that the tokenizer belongs to the model",
         utf8::sanitize(text.substr(0, std::min<size_t>(text.size(), 60))));
  }
  if (add_special) out.insert(out.end(), m.suffix.begin(), m.suffix.end());
  return out;
}

void Tokenizer::Impl::encode_run(std::string_view text, bool at_start, WordCache& cache,
                                 std::vector<int32_t>& out) const {
  const Words words = pre_tokenizer.split(text, at_start);
  for (size_t i = 0; i < words.size(); ++i) encode_word(words[i], cache, out);
}

namespace {

constexpr size_t kChunkedWord = 64;   // longer words are cut into chunks at merge barriers
constexpr size_t kCachedChunk = 256;  // longer chunks are not cached
constexpr size_t kCacheEntries = 1 << 16;

// A character's key for the bigram table: its code point, or 0x110000 + byte when malformed.
uint32_t char_key(std::string_view c) {
  const utf8::Decoded d = utf8::decode(c);
  return d.status == utf8::Status::Ok ? d.codepoint : 0x110000u + static_cast<uint8_t>(c.front());
}

uint64_t bigram_key(std::string_view left, std::string_view right) {
  return (static_cast<uint64_t>(char_key(left)) << 32) | char_key(right);
}

}  // namespace

bool Tokenizer::Impl::is_barrier(std::string_view left_char, std::string_view right_char) const {
  // Two characters without tokens of their own fall back to bytes or unk (fused under fuse_unk):
  // never cut between them.
  if (!piece_to_id.count(left_char) && !piece_to_id.count(right_char)) return false;
  return !token_bigrams.count(bigram_key(left_char, right_char));
}

void Tokenizer::Impl::encode_word(std::string_view word, WordCache& cache, std::vector<int32_t>& out) const {
  if (word.empty()) return;
  if (vocab.ignore_merges) {  // a word that is a token is taken whole
    const StringMap<int32_t>& lookup = model == Model::RankBpe ? piece_to_id : mergeable;
    if (const auto it = lookup.find(word); it != lookup.end()) {
      out.push_back(it->second);
      return;
    }
  }
  if (word.size() < kChunkedWord) {
    merge_cached(word, cache, out);
    return;
  }
  std::call_once(bigrams_once, [&] {
    for (const auto& [piece, id] : piece_to_id) {
      for (size_t i = 0, n = 0; i < piece.size(); i += n) {
        n = utf8::char_length(std::string_view(piece).substr(i));
        if (i + n < piece.size()) {
          const std::string_view rest = std::string_view(piece).substr(i + n);
          token_bigrams.insert(
              bigram_key(std::string_view(piece).substr(i, n), rest.substr(0, utf8::char_length(rest))));
        }
      }
    }
  });
  size_t chunk_start = 0;
  std::string_view previous;
  for (size_t i = 0; i < word.size();) {
    const std::string_view c = word.substr(i, utf8::char_length(word.substr(i)));
    if (!previous.empty() && is_barrier(previous, c)) {
      merge_cached(word.substr(chunk_start, i - chunk_start), cache, out);
      chunk_start = i;
    }
    previous = c;
    i += c.size();
  }
  merge_cached(word.substr(chunk_start), cache, out);
}

void Tokenizer::Impl::merge_cached(std::string_view chunk, WordCache& cache, std::vector<int32_t>& out) const {
  if (chunk.size() > kCachedChunk) {
    merge(chunk, out);
    return;
  }
  if (const auto it = cache.find(std::string(chunk)); it != cache.end()) {
    out.insert(out.end(), it->second.begin(), it->second.end());
    return;
  }
  const size_t first = out.size();
  merge(chunk, out);
  if (cache.size() < kCacheEntries) cache.emplace(chunk, std::vector<int32_t>(out.begin() + first, out.end()));
}

void Tokenizer::Impl::merge(std::string_view chunk, std::vector<int32_t>& out) const {
  switch (model) {
    case Model::RankBpe:
      encode_rank_bpe(chunk, out);
      break;
    case Model::ScoreSpm:
    case Model::RankIds:
      encode_by_score(chunk, out);
      break;
  }
}

// tokenizers' BPE::merge_word + Word::merge_all: characters (or their <0xXX> bytes, or the unknown
// token) become symbols, then the pair with the lowest rank merges first, the leftmost on ties; a
// queued pair is stale when the symbols there no longer form it.
void Tokenizer::Impl::encode_rank_bpe(std::string_view word, std::vector<int32_t>& out) const {
  struct Symbol {
    int32_t id;
    int32_t prev;
    int32_t next;
    bool removed;
  };
  std::vector<Symbol> symbols;
  symbols.reserve(word.size());
  const auto add = [&](int32_t id) {
    const auto index = static_cast<int32_t>(symbols.size());
    if (index > 0) symbols.back().next = index;
    symbols.push_back({id, index - 1, -1, false});
  };
  int32_t pending_unknown = -1;  // fuse_unk: one unknown token for a run of unknown characters
  for (size_t i = 0; i < word.size();) {
    const size_t length = utf8::char_length(word.substr(i));
    const std::string_view c = word.substr(i, length);
    i += length;
    if (const auto it = piece_to_id.find(c); it != piece_to_id.end()) {
      if (pending_unknown >= 0) add(std::exchange(pending_unknown, -1));
      add(it->second);
      continue;
    }
    if (vocab.byte_fallback &&
        std::all_of(c.begin(), c.end(), [&](char b) { return byte_token[static_cast<uint8_t>(b)] >= 0; })) {
      if (pending_unknown >= 0) add(std::exchange(pending_unknown, -1));
      for (char b : c) add(byte_token[static_cast<uint8_t>(b)]);
      continue;
    }
    if (vocab.unk < 0) continue;  // tokenizers drops a character it has no token for
    if (pending_unknown >= 0 && !vocab.fuse_unk) add(pending_unknown);
    pending_unknown = vocab.unk;
  }
  if (pending_unknown >= 0) add(pending_unknown);

  struct Candidate {
    int32_t rank;
    int32_t pos;
    int32_t merged;
  };
  const auto later = [](const Candidate& a, const Candidate& b) {  // the queue's top merges first
    return a.rank != b.rank ? a.rank > b.rank : a.pos > b.pos;
  };
  std::priority_queue<Candidate, std::vector<Candidate>, decltype(later)> queue(later);
  const auto rule = [&](int32_t left, int32_t right) -> const MergeRule* {
    const auto it = merge_rules.find(pair_key(symbols[left].id, symbols[right].id));
    return it == merge_rules.end() ? nullptr : &it->second;
  };
  for (int32_t i = 0; i + 1 < static_cast<int32_t>(symbols.size()); ++i) {
    if (const MergeRule* r = rule(i, i + 1)) queue.push({r->rank, i, r->merged});
  }
  while (!queue.empty()) {
    const Candidate top = queue.top();
    queue.pop();
    Symbol& left = symbols[top.pos];
    if (left.removed || left.next < 0) continue;
    const MergeRule* r = rule(top.pos, left.next);
    if (r == nullptr || r->merged != top.merged) continue;  // stale
    Symbol& right = symbols[left.next];
    left.id = top.merged;
    right.removed = true;
    left.next = right.next;
    if (right.next >= 0) symbols[right.next].prev = top.pos;
    if (left.prev >= 0) {
      if (const MergeRule* p = rule(left.prev, top.pos)) queue.push({p->rank, left.prev, p->merged});
    }
    if (left.next >= 0) {
      if (const MergeRule* n = rule(top.pos, left.next)) queue.push({n->rank, top.pos, n->merged});
    }
  }
  for (const Symbol& s : symbols) {
    if (!s.removed) out.push_back(s.id);
  }
}

// llama.cpp's sentencepiece BPE (merge the pair whose concatenation is the token with the highest
// score) or tiktoken's (the lowest id); a symbol that is no token falls back to bytes.
void Tokenizer::Impl::encode_by_score(std::string_view word, std::vector<int32_t>& out) const {
  const bool by_id = model == Model::RankIds;
  const std::vector<std::string_view> symbols =
      merge_by_score(word, [&](std::string_view piece) -> std::optional<float> {
        const auto it = mergeable.find(piece);
        if (it == mergeable.end()) return std::nullopt;
        return by_id ? -static_cast<float>(it->second) : vocab.scores[it->second];
      });
  for (std::string_view symbol : symbols) {
    if (const auto it = mergeable.find(symbol); it != mergeable.end()) {
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
