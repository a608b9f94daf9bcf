#include "engine/gguf_vocab_export.h"

#include <fmt/format.h>

#include <algorithm>
#include <unordered_map>

#include "core/error.h"
#include "formats/gguf.h"
#include "text/byte_level.h"
#include "text/pretokenizer.h"
#include "text/utf8.h"

namespace ferry {

namespace {

// tokenizer.ggml.pre names tried for a byte-level vocabulary, after the architecture's own: what
// convert_hf_to_gguf.py writes for the tokenizers of the models ferry runs first, then the others
// llama.cpp knows.
constexpr const char* kPreNames[] = {
    "llama-bpe",  "qwen2",     "chatglm-bpe", "gpt-2",     "deepseek-v3", "deepseek-llm", "deepseek-coder",
    "qwen35",     "gpt-4o",    "tekken",      "starcoder", "falcon",      "poro-chat",    "viking",
    "seed-coder", "superbpe",  "minicpm5",    "jais-2",    "exaone-moe",  "bailingmoe",   "tiny_aya",
    "spark2_5",   "chameleon", "laguna",      "ufakzeka",
};

constexpr float kPadScore = -1000.0f;  // llama.cpp's score for [PAD<id>] tokens of a sentencepiece vocabulary

std::string pad_piece(int64_t id) {
  return fmt::format("[PAD{}]", id);
}

bool is_added(const Vocab& v, size_t id) {
  const auto t = static_cast<TokenType>(v.types[id]);
  return t == TokenType::Control || t == TokenType::UserDefined;
}

// Undefined ids (holes in a tokenizer's id space) and the rows past the tokenizer, up to the
// model's embedding rows, become unused "[PAD<id>]" tokens.
void pad_vocab(Vocab& v, int64_t n_vocab) {
  const bool spm = v.kind == Vocab::Kind::Spm;
  for (size_t id = 0; id < v.tokens.size(); ++id) {
    if (v.tokens[id].empty()) {
      v.tokens[id] = pad_piece(static_cast<int64_t>(id));
      v.types[id] = static_cast<int32_t>(TokenType::Unused);
      if (spm) v.scores[id] = kPadScore;
    }
  }
  for (int64_t id = v.size(); id < n_vocab; ++id) {
    v.tokens.push_back(pad_piece(id));
    v.types.push_back(static_cast<int32_t>(TokenType::Unused));
    v.scores.push_back(spm ? kPadScore : 0.0f);
    if (!v.token_flags.empty()) v.token_flags.push_back(0);
  }
}

// llama.cpp's QwenModel.bpe: the two parts a tiktoken token of rank `rank` is merged from, found
// by running byte-pair merging over its bytes with the ranks below its own.
std::vector<std::string> bpe_parts(const std::unordered_map<std::string, int64_t>& ranks, const std::string& token,
                                   int64_t rank) {
  std::vector<std::string> parts;
  for (char c : token) parts.emplace_back(1, c);
  while (parts.size() > 1) {
    size_t best = parts.size();
    int64_t best_rank = rank;
    for (size_t i = 0; i + 1 < parts.size(); ++i) {
      const auto it = ranks.find(parts[i] + parts[i + 1]);
      if (it != ranks.end() && it->second < best_rank) best = i, best_rank = it->second;
    }
    if (best == parts.size()) break;
    parts[best] += parts[best + 1];
    parts.erase(parts.begin() + static_cast<std::ptrdiff_t>(best) + 1);
  }
  return parts;
}

// A tiktoken vocabulary's merges, one per multi-byte token in rank order (what GGUF's "gpt2"
// model needs where tiktoken has only ranks).
void merges_from_ranks(Vocab& v) {
  std::unordered_map<std::string, int64_t> ranks;
  std::vector<std::string> bytes(v.tokens.size());
  for (size_t id = 0; id < v.tokens.size(); ++id) {
    if (static_cast<TokenType>(v.types[id]) != TokenType::Normal) continue;
    bytes[id] = byte_level::decode(v.tokens[id]);
    ranks.emplace(bytes[id], static_cast<int64_t>(id));
  }
  v.merges.clear();
  for (size_t id = 0; id < v.tokens.size(); ++id) {
    if (bytes[id].size() < 2) continue;
    const std::vector<std::string> parts = bpe_parts(ranks, bytes[id], static_cast<int64_t>(id));
    if (parts.size() != 2) {
      fail(ErrorKind::Unsupported,
           "{}: tiktoken token {} ('{}') is not the merge of two lower-ranked tokens ({} parts), so it has no GGUF "
           "merge",
           v.source, id, utf8::sanitize(bytes[id]), parts.size());
    }
    v.merges.emplace_back(byte_level::encode(parts[0]), byte_level::encode(parts[1]));
  }
  v.merges_from_ranks = false;
}

// A sentencepiece-style vocabulary from tokenizer.json merges by rank; GGUF's "llama" model merges
// by token score. Each merged token gets minus the rank of the first merge that makes it, so the
// best-scored pair is the lowest-ranked merge; tokens no merge makes rank below every merge.
void scores_from_merges(Vocab& v) {
  std::unordered_map<std::string, size_t> id_of;
  for (size_t id = 0; id < v.tokens.size(); ++id) id_of.emplace(v.tokens[id], id);
  std::vector<float> scores(v.tokens.size(), -1e9f);
  std::vector<bool> made(v.tokens.size(), false);
  for (size_t rank = 0; rank < v.merges.size(); ++rank) {
    const auto it = id_of.find(v.merges[rank].first + v.merges[rank].second);
    if (it == id_of.end() || made[it->second]) continue;
    made[it->second] = true;
    scores[it->second] = -static_cast<float>(rank);
  }
  for (size_t id = 0; id < v.tokens.size(); ++id) {
    if (is_added(v, id) || static_cast<TokenType>(v.types[id]) == TokenType::Unknown) scores[id] = 0.0f;
  }
  v.scores = std::move(scores);
  v.merges.clear();
}

std::vector<std::string> split(const PreTokenizer& p, const std::string& text) {
  return p.split_to_strings(text);
}

// Texts without added tokens (the pre-tokenizer comparison runs on them).
std::vector<std::string> plain_check_texts() {
  return {
      "Hello world",
      " Hello world!",
      "Hello World. HELLO WORLD? hello_world",
      "  two leading spaces, trailing ones   ",
      "\n \n\n \n\n\n \t \t\t \t\n  \n   \n    \n     \n",
      "line one\nline two\r\nline three\n\n\tindented",
      "3 33 333 3333 33333 333333 3333333 33333333 3.3 3..3 3...3 1,000,000 2024-01-01",
      "I've been 'told he's there, 'RE you sure? 'M not sure I'll make it, 'D you like some tea? We'Ve a'lL",
      "------======= нещо на Български ''''''```````\"\"\"\"......!!!!!!??????",
      "我想在apple工作1314151天～ こんにちは世界 안녕하세요 مرحبا بالعالم कान्हा កាន់តែពិសេសអាច",
      "🚀 (normal) 😶‍🌫️ (multiple emojis concatenated) ✅ 🦙🦙 😁",
      "def square(x):\n    return x ** 2  # squared\n\nprint(square(12))",
      "The ferry leaves the harbour at seven in the morning and crosses the river to the old town.",
  };
}

std::string ids_text(const std::vector<int32_t>& ids) {
  constexpr size_t kShown = 24;
  std::vector<int32_t> head(ids.begin(), ids.begin() + static_cast<std::ptrdiff_t>(std::min(ids.size(), kShown)));
  return fmt::format("[{}{}]", fmt::join(head, ","), ids.size() > kShown ? ",..." : "");
}

// Splits of the vocabulary's own pre-tokenizer and of a GGUF pre name agree on every test text.
bool same_splits(const PreTokenizer& theirs, const std::string& name) {
  std::vector<PreTokenizerStep> steps;
  try {
    steps = pre_tokenizer_for_gguf(name, "gguf export").steps;
  } catch (const Error&) {
    return false;  // a name this build of ferry does not know
  }
  const PreTokenizer ours(steps, name);
  for (const std::string& text : plain_check_texts()) {
    if (split(theirs, text) != split(ours, text)) return false;
  }
  return true;
}

// The tokenizer.ggml.pre name for a byte-level vocabulary: the first candidate whose splits are the
// vocabulary's, the architecture's own names first.
std::string choose_pre(const Vocab& v, const std::vector<std::string>& preferred) {
  std::vector<PreTokenizerStep> steps = v.pre_tokenizers;
  if (steps.empty()) steps.push_back(PreTokenizerStep::byte_level(false, true));  // Tokenizer's own default
  const PreTokenizer theirs(steps, v.source);
  // The architecture's own names first, whatever their ignore_merges (the read-back check decides);
  // then every name, those that also merge like the vocabulary first.
  for (const std::string& name : preferred) {
    if (same_splits(theirs, name)) return name;
  }
  std::vector<std::string> names;
  for (const char* n : kPreNames) names.emplace_back(n);
  for (const bool exact : {true, false}) {
    for (const std::string& name : names) {
      if (exact) {
        bool ignore_merges = false;
        try {
          ignore_merges = pre_tokenizer_for_gguf(name, "gguf export").ignore_merges;
        } catch (const Error&) {
          continue;
        }
        if (ignore_merges != v.ignore_merges) continue;
      }
      if (same_splits(theirs, name)) return name;
    }
  }
  fail(ErrorKind::Unsupported,
       "{}: the tokenizer's pre-tokenizer splits text like none of the tokenizer.ggml.pre names llama.cpp knows "
       "(tried {}), so a GGUF could not say how to tokenize; convert with --no-tokenizer to write the model without "
       "one (ferry then runs it on token ids, --prompt-ids)",
       v.source, fmt::join(names, ", "));
}

int32_t find_control(const Vocab& v, const std::string& piece) {
  for (size_t id = 0; id < v.tokens.size(); ++id) {
    if (v.tokens[id] == piece && is_added(v, id)) return static_cast<int32_t>(id);
  }
  return -1;
}

// The vocabulary written as GGUF and read back, as ferry (and llama.cpp) will load it.
Tokenizer read_back(const Vocab& v) {
  GgufWriter w;
  add_gguf_vocab(w, v);
  const GgufFile file = GgufFile::parse(MappedFile::from_bytes("the GGUF form of " + v.source, w.to_bytes()));
  return Tokenizer::from_vocab(vocab_from_gguf(file));
}

}  // namespace

void add_gguf_vocab(GgufWriter& gguf, const Vocab& vocab) {
  const bool spm = vocab.kind == Vocab::Kind::Spm;
  gguf.set_string("tokenizer.ggml.model", spm ? "llama" : "gpt2");
  if (!spm && !vocab.pre.empty()) gguf.set_string("tokenizer.ggml.pre", vocab.pre);
  gguf.set_string_array("tokenizer.ggml.tokens", vocab.tokens);
  if (spm) gguf.set_f32_array("tokenizer.ggml.scores", vocab.scores);
  gguf.set_i32_array("tokenizer.ggml.token_type", vocab.types);
  if (!spm) {
    std::vector<std::string> merges;
    merges.reserve(vocab.merges.size());
    for (const auto& [left, right] : vocab.merges) merges.push_back(left + " " + right);
    gguf.set_string_array("tokenizer.ggml.merges", merges);
  }
  const auto id = [&](const char* key, int32_t value) {
    if (value >= 0) gguf.set_u32(key, static_cast<uint32_t>(value));
  };
  id("tokenizer.ggml.bos_token_id", vocab.bos);
  id("tokenizer.ggml.eos_token_id", vocab.eos);
  id("tokenizer.ggml.unknown_token_id", vocab.unk);
  id("tokenizer.ggml.eot_token_id", vocab.eot);
  id("tokenizer.ggml.eom_token_id", vocab.eom);
  id("tokenizer.ggml.padding_token_id", vocab.pad);
  gguf.set_bool("tokenizer.ggml.add_bos_token", vocab.add_bos);
  gguf.set_bool("tokenizer.ggml.add_eos_token", vocab.add_eos);
  if (spm) gguf.set_bool("tokenizer.ggml.add_space_prefix", vocab.add_space_prefix);
  if (!vocab.chat_template.empty()) gguf.set_string("tokenizer.chat_template", vocab.chat_template);
}

std::vector<std::string> gguf_vocab_check_texts(const Vocab& vocab) {
  std::vector<std::string> texts = plain_check_texts();
  // Added tokens inside text, with and without spaces around them (up to 64 of them: the first
  // and the last, where reserved ranges begin and end).
  std::vector<size_t> added;
  for (size_t id = 0; id < vocab.tokens.size(); ++id) {
    if (is_added(vocab, id) && !vocab.tokens[id].empty()) added.push_back(id);
  }
  if (added.size() > 64) added.erase(added.begin() + 32, added.end() - 32);
  std::string joined = "Hi";
  for (size_t i = 0; i < added.size(); ++i) {
    joined += (i % 2 == 0 ? " " : "") + vocab.tokens[added[i]] + (i % 3 == 0 ? "\nthere " : "x");
  }
  if (!added.empty()) texts.push_back(joined);
  return texts;
}

Vocab gguf_vocab_for(const Tokenizer& tokenizer, const GgufVocabOptions& options) {
  Vocab v = tokenizer.vocab();
  if (options.n_vocab > 0 && v.size() > options.n_vocab) {
    fail(ErrorKind::Shape,
         "{}: the tokenizer has {} tokens but the model's embedding has {} rows; ids past {} would have no "
         "embedding (llama.cpp refuses such a file)",
         v.source, v.size(), options.n_vocab, options.n_vocab - 1);
  }
  if (v.scores.size() != v.tokens.size()) v.scores.assign(v.tokens.size(), 0.0f);
  pad_vocab(v, options.n_vocab);
  if (v.kind == Vocab::Kind::Bpe) {
    if (v.merges_from_ranks) merges_from_ranks(v);
    v.pre = choose_pre(v, options.preferred_pre);
  } else if (!v.merges.empty()) {
    scores_from_merges(v);
  }
  if (v.bos < 0 && options.fallback_bos >= 0 && options.fallback_bos < v.size()) v.bos = options.fallback_bos;
  if (v.eos < 0 && options.fallback_eos >= 0 && options.fallback_eos < v.size()) v.eos = options.fallback_eos;
  if (v.eot < 0 && !options.eot_piece.empty()) v.eot = find_control(v, options.eot_piece);

  const Tokenizer back = read_back(v);
  for (const std::string& text : gguf_vocab_check_texts(tokenizer.vocab())) {
    const std::vector<int32_t> want = tokenizer.encode(text, false, true);
    const std::vector<int32_t> got = back.encode(text, false, true);
    if (want == got) continue;
    fail(ErrorKind::Unsupported,
         "{}: the GGUF form of this tokenizer (model {}{}) tokenizes differently: \"{}\" gives {} ids {} from the "
         "tokenizer but {} ids {} from the GGUF vocabulary (GGUF cannot express every Hugging Face tokenizer "
         "option); convert with --no-tokenizer to write the model without one (ferry then runs it on token ids, "
         "--prompt-ids)",
         v.source, v.kind == Vocab::Kind::Spm ? "llama" : "gpt2", v.pre.empty() ? "" : ", pre " + v.pre,
         utf8::sanitize(text.substr(0, 120)), want.size(), ids_text(want), got.size(), ids_text(got));
  }
  return v;
}

}  // namespace ferry
