// vocab_from_tokenizer_json: a Hugging Face tokenizer.json (model.type "BPE") plus the
// tokenizer_config.json and generation_config.json beside it.
#include <algorithm>
#include <cctype>
#include <filesystem>
#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <unordered_map>
#include <unordered_set>

#include "core/error.h"
#include "formats/json_file.h"
#include "text/utf8.h"
#include "text/vocab.h"

namespace ferry {

using nlohmann::json;

namespace {

const std::string kMetaspace = "\xE2\x96\x81";  // U+2581 "▁"
constexpr int kMaxNesting = 32;                 // Sequence inside Sequence ...
constexpr int64_t kMaxTokenId = 50'000'000;

// A member of an object, or nullptr when absent or null (also when `j` is not an object).
const json* member(const json& j, const char* key) {
  if (!j.is_object()) return nullptr;
  const auto it = j.find(key);
  return it == j.end() || it->is_null() ? nullptr : &*it;
}

std::string member_string(const json& j, const char* key) {
  const json* v = member(j, key);
  return v != nullptr && v->is_string() ? v->get<std::string>() : std::string();
}

bool member_bool(const json& j, const char* key, bool fallback) {
  const json* v = member(j, key);
  return v != nullptr && v->is_boolean() ? v->get<bool>() : fallback;
}

// A token named in tokenizer_config.json: a string or an AddedToken object {"content": ...}.
std::optional<std::string> token_text(const json& config, const char* key, const std::string& file) {
  const json* v = member(config, key);
  if (v == nullptr) return std::nullopt;
  if (v->is_string()) return v->get<std::string>();
  if (const json* content = member(*v, "content"); content != nullptr && content->is_string()) {
    return content->get<std::string>();
  }
  fail(ErrorKind::Config, "{}: field '{}' is {}, expected a token string or {{\"content\": ...}}", file, key,
       json_describe(*v));
}

class TokenizerJsonReader {
 public:
  explicit TokenizerJsonReader(std::string path) : path_(std::move(path)) {}

  // `with_configs`: also read tokenizer_config.json and generation_config.json beside the file.
  Vocab read(const json& root, bool with_configs) {
    if (!root.is_object()) fail(ErrorKind::Format, "{}: expected a JSON object at the top level", path_);
    const json* model = member(root, "model");
    if (model == nullptr || !model->is_object()) {
      fail(ErrorKind::Format, "{}: no \"model\" object; this is not a tokenizers tokenizer.json", path_);
    }
    check_model(*model);

    vocab_.source = path_;
    const json* normalizer = member(root, "normalizer");
    const json* pre_tokenizer = member(root, "pre_tokenizer");
    const json* decoder = member(root, "decoder");
    if (normalizer != nullptr) read_normalizer(*normalizer, 0);
    if (pre_tokenizer != nullptr) read_pre_tokenizer(*pre_tokenizer, 0);
    if (decoder != nullptr && !decoder->is_null()) check_decoder(*decoder);
    choose_kind(decoder);

    read_model_vocab(*model);
    read_merges(*model);
    check_merges();
    read_added_tokens(member(root, "added_tokens"));
    check_complete();
    vocab_.unk = lookup_optional(member_string(*model, "unk_token"), "model.unk_token");
    if (vocab_.unk >= 0) vocab_.types[vocab_.unk] = static_cast<int32_t>(TokenType::Unknown);
    if (const json* post = member(root, "post_processor")) read_post_processor(*post, 0);

    std::vector<int64_t> extra_eog;
    if (with_configs) {
      const std::filesystem::path dir = std::filesystem::path(path_).parent_path();
      read_tokenizer_config(dir / "tokenizer_config.json");
      read_generation_config(dir / "generation_config.json", extra_eog);
    }
    finalize_special_tokens(vocab_, extra_eog);
    vocab_.validate();
    return std::move(vocab_);
  }

 private:
  void check_model(const json& model) {
    const std::string type = member_string(model, "type");
    if (type == "BPE" || (type.empty() && member(model, "merges") != nullptr)) {  // older files omit the type
      for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"}) {
        const json* v = member(model, key);
        if (v != nullptr && !(v->is_string() && v->get<std::string>().empty())) {
          fail(ErrorKind::Unsupported,
               "{}: BPE with model.{} = {} is not supported (only byte-level and sentencepiece-style BPE are)", path_,
               key, v->dump());
        }
      }
      if (const json* dropout = member(model, "dropout");
          dropout != nullptr && dropout->is_number() && dropout->get<double>() > 0.0) {
        fail(ErrorKind::Unsupported, "{}: model.dropout = {} makes encoding random; set it to null for inference",
             path_, dropout->dump());
      }
      return;
    }
    if (type.empty()) fail(ErrorKind::Format, "{}: model.type is missing; expected \"BPE\"", path_);
    fail(ErrorKind::Unsupported,
         "{}: model.type \"{}\" is not supported; ferry reads BPE tokenizers (byte-level like GPT-2/Llama-3/Qwen2, "
         "or sentencepiece-converted like Llama-2). A GGUF of the model carries a usable vocabulary too",
         path_, type);
  }

  // The components of a "Sequence" (or the component itself), depth-limited.
  template <typename Visit>
  void for_each_in(const json& component, const char* list, int depth, const char* what, Visit&& visit) {
    if (depth > kMaxNesting) {
      fail(ErrorKind::Format, "{}: the {} is nested more than {} Sequences deep", path_, what, kMaxNesting);
    }
    if (!component.is_object()) {
      fail(ErrorKind::Format, "{}: a {} is {}, expected an object with a \"type\"", path_, what,
           json_describe(component));
    }
    if (member_string(component, "type") == "Sequence") {
      const json* items = member(component, list);
      if (items == nullptr || !items->is_array()) {
        fail(ErrorKind::Format, "{}: a Sequence {} has no \"{}\" array", path_, what, list);
      }
      for (const json& item : *items) for_each_in(item, list, depth + 1, what, visit);
      return;
    }
    visit(component);
  }

  // A Split/Replace pattern: {"String": "..."} or {"Regex": "..."}.
  std::pair<std::string, bool> read_pattern(const json& c, const std::string& where) {
    const json* pattern = member(c, "pattern");
    if (pattern != nullptr) {
      if (const json* s = member(*pattern, "String"); s != nullptr && s->is_string())
        return {s->get<std::string>(), false};
      if (const json* r = member(*pattern, "Regex"); r != nullptr && r->is_string())
        return {r->get<std::string>(), true};
    }
    fail(ErrorKind::Format, "{}: {} needs \"pattern\": {{\"String\": ...}} or {{\"Regex\": ...}}", path_, where);
  }

  void read_normalizer(const json& normalizer, int depth) {
    for_each_in(normalizer, "normalizers", depth, "normalizer", [&](const json& c) {
      const std::string type = member_string(c, "type");
      NormalizerStep step;
      if (type == "NFC") {
        step.kind = NormalizerStep::Kind::Nfc;
      } else if (type == "NFD") {
        step.kind = NormalizerStep::Kind::Nfd;
      } else if (type == "NFKC") {
        step.kind = NormalizerStep::Kind::Nfkc;
      } else if (type == "NFKD") {
        step.kind = NormalizerStep::Kind::Nfkd;
      } else if (type == "Lowercase") {
        step.kind = NormalizerStep::Kind::Lowercase;
      } else if (type == "Prepend" || type == "Append") {
        step.kind = type == "Prepend" ? NormalizerStep::Kind::Prepend : NormalizerStep::Kind::Append;
        step.content = member_string(c, type == "Prepend" ? "prepend" : "append");
      } else if (type == "Replace") {
        step.kind = NormalizerStep::Kind::Replace;
        std::tie(step.pattern, step.regex) = read_pattern(c, "the Replace normalizer");
        step.content = member_string(c, "content");
      } else if (type == "Strip") {
        step.kind = NormalizerStep::Kind::Strip;
        step.left = member_bool(c, "strip_left", true);
        step.right = member_bool(c, "strip_right", true);
      } else if (type == "Precompiled" && !has_charsmap(c)) {
        return;  // an empty precompiled map changes nothing
      } else {
        fail(ErrorKind::Unsupported,
             "{}: the normalizer \"{}\" is not supported (ferry has NFC, NFD, NFKC, NFKD, Lowercase, Prepend, Append, "
             "Replace, Strip)",
             path_, type.empty() ? c.dump() : type);
      }
      vocab_.normalizers.push_back(std::move(step));
    });
  }

  static bool has_charsmap(const json& c) {
    const json* map = member(c, "precompiled_charsmap");
    return map != nullptr && !(map->is_string() && map->get<std::string>().empty());
  }

  SplitBehavior read_behavior(const json& c, const char* fallback) {
    std::string b = member_string(c, "behavior");
    if (b.empty()) b = fallback;
    if (b == "Removed") return SplitBehavior::Removed;
    if (b == "Isolated") return SplitBehavior::Isolated;
    if (b == "MergedWithPrevious") return SplitBehavior::MergedWithPrevious;
    if (b == "MergedWithNext") return SplitBehavior::MergedWithNext;
    if (b == "Contiguous") return SplitBehavior::Contiguous;
    fail(ErrorKind::Format,
         "{}: pre-tokenizer behavior \"{}\" is unknown; expected Removed, Isolated, MergedWithPrevious, "
         "MergedWithNext or Contiguous",
         path_, b);
  }

  void read_pre_tokenizer(const json& pre_tokenizer, int depth) {
    for_each_in(pre_tokenizer, "pretokenizers", depth, "pre-tokenizer", [&](const json& c) {
      const std::string type = member_string(c, "type");
      PreTokenizerStep step;
      if (type == "Split") {
        std::tie(step.pattern, step.regex) = read_pattern(c, "the Split pre-tokenizer");
        step.behavior = read_behavior(c, "Isolated");
        step.invert = member_bool(c, "invert", false);
      } else if (type == "ByteLevel") {
        step =
            PreTokenizerStep::byte_level(member_bool(c, "add_prefix_space", true), member_bool(c, "use_regex", true));
      } else if (type == "Metaspace") {
        step.kind = PreTokenizerStep::Kind::Metaspace;
        if (const json* r = member(c, "replacement"); r != nullptr && r->is_string()) {
          step.replacement = r->get<std::string>();
          if (step.replacement.empty() || utf8::char_length(step.replacement) != step.replacement.size()) {
            fail(ErrorKind::Format, "{}: the Metaspace replacement must be one character, got \"{}\"", path_,
                 utf8::sanitize(step.replacement));
          }
        }
        const std::string scheme = member_string(c, "prepend_scheme");
        if (scheme.empty()) {  // older files
          step.prepend = member_bool(c, "add_prefix_space", true) ? PreTokenizerStep::Prepend::Always
                                                                  : PreTokenizerStep::Prepend::Never;
        } else if (scheme == "always") {
          step.prepend = PreTokenizerStep::Prepend::Always;
        } else if (scheme == "first") {
          step.prepend = PreTokenizerStep::Prepend::First;
        } else if (scheme == "never") {
          step.prepend = PreTokenizerStep::Prepend::Never;
        } else {
          fail(ErrorKind::Format, "{}: Metaspace prepend_scheme \"{}\" is unknown; expected always, first or never",
               path_, scheme);
        }
        step.split = member_bool(c, "split", true);
      } else if (type == "Digits") {
        step = PreTokenizerStep::split_regex(R"(\p{N})", member_bool(c, "individual_digits", false)
                                                             ? SplitBehavior::Isolated
                                                             : SplitBehavior::Contiguous);
      } else if (type == "Punctuation") {
        step = PreTokenizerStep::split_regex(R"([\p{P}!-/:-@\[-`{-~])", read_behavior(c, "Isolated"));
      } else if (type == "Whitespace") {
        step = PreTokenizerStep::split_regex(R"(\w+|[^\w\s]+)", SplitBehavior::Removed);
        step.invert = true;
      } else if (type == "WhitespaceSplit") {
        step = PreTokenizerStep::split_regex(R"(\s+)", SplitBehavior::Removed);
      } else {
        fail(ErrorKind::Unsupported,
             "{}: the pre-tokenizer \"{}\" is not supported (ferry has Split, ByteLevel, Metaspace, Digits, "
             "Punctuation, Whitespace, WhitespaceSplit)",
             path_, type.empty() ? c.dump() : type);
      }
      vocab_.pre_tokenizers.push_back(std::move(step));
    });
  }

  bool pre_tokenizer_has(PreTokenizerStep::Kind kind) const {
    return std::any_of(vocab_.pre_tokenizers.begin(), vocab_.pre_tokenizers.end(),
                       [&](const PreTokenizerStep& s) { return s.kind == kind; });
  }

  bool decoder_has(const json* decoder, std::string_view type) {
    bool found = false;
    if (decoder != nullptr) {
      for_each_in(*decoder, "decoders", 0, "decoder",
                  [&](const json& c) { found = found || member_string(c, "type") == type; });
    }
    return found;
  }

  void choose_kind(const json* decoder) {
    if (pre_tokenizer_has(PreTokenizerStep::Kind::ByteLevel) || decoder_has(decoder, "ByteLevel")) {
      vocab_.kind = Vocab::Kind::Bpe;
      vocab_.add_space_prefix = false;
      for (const PreTokenizerStep& s : vocab_.pre_tokenizers) {
        if (s.kind == PreTokenizerStep::Kind::ByteLevel && s.add_prefix_space) vocab_.add_space_prefix = true;
      }
      return;
    }
    const bool metaspace_normalizer =
        std::any_of(vocab_.normalizers.begin(), vocab_.normalizers.end(), [](const NormalizerStep& s) {
          return s.kind == NormalizerStep::Kind::Replace && !s.regex && s.pattern == " " && s.content == kMetaspace;
        });
    if (pre_tokenizer_has(PreTokenizerStep::Kind::Metaspace) || decoder_has(decoder, "Metaspace") ||
        metaspace_normalizer) {
      vocab_.kind = Vocab::Kind::Spm;
      // Whether the text gets a leading "▁", which decoding drops again.
      vocab_.add_space_prefix = false;
      for (const NormalizerStep& s : vocab_.normalizers) {
        if (s.kind == NormalizerStep::Kind::Prepend && s.content == kMetaspace) vocab_.add_space_prefix = true;
      }
      for (const PreTokenizerStep& s : vocab_.pre_tokenizers) {
        if (s.kind == PreTokenizerStep::Kind::Metaspace && s.prepend != PreTokenizerStep::Prepend::Never) {
          vocab_.add_space_prefix = true;
        }
      }
      if (vocab_.normalizers.empty() && vocab_.pre_tokenizers.empty()) {
        fail(ErrorKind::Unsupported,
             "{}: a sentencepiece-style tokenizer with a Metaspace decoder but neither a normalizer nor a "
             "pre-tokenizer writing spaces as U+2581 is not supported",
             path_);
      }
      return;
    }
    fail(ErrorKind::Unsupported,
         "{}: this BPE tokenizer is neither byte-level (a ByteLevel pre-tokenizer or decoder) nor "
         "sentencepiece-style (Metaspace, or a normalizer replacing ' ' with U+2581); other pre-tokenizers are not "
         "supported",
         path_);
  }

  void read_model_vocab(const json& model) {
    const json* map = member(model, "vocab");
    if (map == nullptr || !map->is_object()) {
      fail(ErrorKind::Format, "{}: model.vocab is missing or not an object", path_);
    }
    if (map->empty()) {
      fail(ErrorKind::Format, "{}: model.vocab is empty: no text could be encoded; this file is not a usable tokenizer",
           path_);
    }
    vocab_.byte_fallback = member_bool(model, "byte_fallback", false);
    vocab_.ignore_merges = member_bool(model, "ignore_merges", false);
    vocab_.fuse_unk = member_bool(model, "fuse_unk", false);

    int64_t max_id = -1;
    for (const auto& [text, id] : map->items()) {
      if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() > kMaxTokenId) {
        fail(ErrorKind::Format, "{}: model.vocab[\"{}\"] is {}, expected a token id from 0 to {}", path_,
             utf8::sanitize(text), json_describe(id), kMaxTokenId);
      }
      max_id = std::max(max_id, id.get<int64_t>());
    }
    check_dense(max_id, map->size(), "model.vocab");
    resize(max_id + 1);
    for (const auto& [text, id_json] : map->items()) {
      const auto id = static_cast<size_t>(id_json.get<int64_t>());
      if (assigned_[id]) {
        fail(ErrorKind::Format, "{}: model.vocab gives id {} to both \"{}\" and \"{}\"", path_, id,
             utf8::sanitize(vocab_.tokens[id]), utf8::sanitize(text));
      }
      if (text.empty()) fail(ErrorKind::Format, "{}: model.vocab has an empty token (id {})", path_, id);
      assigned_[id] = true;
      vocab_.tokens[id] = text;
      vocab_.types[id] = static_cast<int32_t>(is_byte_token(text) ? TokenType::Byte : TokenType::Normal);
    }
  }

  // "<0xAB>": sentencepiece's byte-fallback pieces (only special when the model falls back to bytes).
  bool is_byte_token(const std::string& text) const {
    if (!vocab_.byte_fallback || text.size() != 6 || text.compare(0, 3, "<0x") != 0 || text[5] != '>') return false;
    return std::isxdigit(static_cast<unsigned char>(text[3])) && std::isxdigit(static_cast<unsigned char>(text[4]));
  }

  // Hugging Face's decoders: the ones a byte-level or sentencepiece vocabulary uses are read (their
  // effect is the vocabulary kind's decoding); the WordPiece/CTC/BPE-suffix ones are not
  // supported; any other name is an error, as in Hugging Face's tokenizers.
  void check_decoder(const json& decoder) {
    for_each_in(decoder, "decoders", 0, "decoder", [&](const json& c) {
      const std::string type = member_string(c, "type");
      static constexpr std::string_view kRead[] = {"ByteLevel", "Metaspace", "Replace",
                                                   "Strip",     "Fuse",      "ByteFallback"};
      static constexpr std::string_view kNotSupported[] = {"WordPiece", "BPEDecoder", "CTC"};
      if (std::find(std::begin(kRead), std::end(kRead), type) != std::end(kRead)) return;
      if (std::find(std::begin(kNotSupported), std::end(kNotSupported), type) != std::end(kNotSupported)) {
        fail(ErrorKind::Unsupported,
             "{}: the decoder \"{}\" is not supported (ferry reads byte-level and "
             "sentencepiece-style tokenizers)",
             path_, type);
      }
      fail(ErrorKind::Format, "{}: unknown decoder type \"{}\" (Hugging Face's tokenizers refuses it too)", path_,
           utf8::sanitize(type));
    });
  }

  // Every merge joins two tokens of model.vocab into a third one, as Hugging Face's BPE builder
  // requires (a merge of unknown tokens can never apply, and means the file is inconsistent).
  void check_merges() const {
    std::unordered_set<std::string_view> tokens;
    for (size_t id = 0; id < vocab_.tokens.size(); ++id) {
      if (assigned_[id]) tokens.insert(vocab_.tokens[id]);
    }
    for (size_t i = 0; i < vocab_.merges.size(); ++i) {
      const auto& [left, right] = vocab_.merges[i];
      for (const std::string& piece : {left, right, left + right}) {
        if (!tokens.count(piece)) {
          fail(ErrorKind::Format,
               "{}: model.merges[{}] (\"{}\" + \"{}\") needs the token \"{}\", which model.vocab "
               "does not have; the file is inconsistent",
               path_, i, utf8::sanitize(left), utf8::sanitize(right), utf8::sanitize(piece));
        }
      }
    }
  }

  // After the vocabulary and the added tokens: every id from 0 up is defined (ids with holes are
  // refused, as in an embedding table every row is a token).
  void check_complete() const {
    for (size_t id = 0; id < assigned_.size(); ++id) {
      if (!assigned_[id]) {
        fail(ErrorKind::Format,
             "{}: token ids are not dense: no token has id {} (the vocabulary and added_tokens define {} of ids 0..{})",
             path_, id, std::count(assigned_.begin(), assigned_.end(), true), assigned_.size() - 1);
      }
    }
  }

  void read_merges(const json& model) {
    const json* merges = member(model, "merges");
    if (merges == nullptr) fail(ErrorKind::Format, "{}: model.merges is missing; a BPE model needs its merges", path_);
    if (!merges->is_array()) {
      fail(ErrorKind::Format, "{}: model.merges is {}, expected an array", path_, json_describe(*merges));
    }
    vocab_.merges.reserve(merges->size());
    for (size_t i = 0; i < merges->size(); ++i) {
      const json& m = (*merges)[i];
      if (m.is_string()) {  // "left right" (older files)
        const std::string s = m.get<std::string>();
        const size_t space = s.find(' ', 1);
        if (space == std::string::npos || space + 1 >= s.size() || s.find(' ', space + 1) != s.npos) {
          fail(ErrorKind::Format, "{}: model.merges[{}] = \"{}\" is not of the form \"left right\"", path_, i,
               utf8::sanitize(s));
        }
        vocab_.merges.emplace_back(s.substr(0, space), s.substr(space + 1));
      } else if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string()) {  // ["left", "right"]
        vocab_.merges.emplace_back(m[0].get<std::string>(), m[1].get<std::string>());
      } else {
        fail(ErrorKind::Format, "{}: model.merges[{}] is {}, expected \"left right\" or [\"left\", \"right\"]", path_,
             i, json_describe(m));
      }
    }
  }

  void read_added_tokens(const json* added) {
    if (added == nullptr) return;
    if (!added->is_array()) {
      fail(ErrorKind::Format, "{}: added_tokens is {}, expected an array", path_, json_describe(*added));
    }
    for (size_t i = 0; i < added->size(); ++i) {
      const json& t = (*added)[i];
      const json* id = member(t, "id");
      const json* content = member(t, "content");
      if (id == nullptr || !id->is_number_integer() || id->get<int64_t>() < 0 || id->get<int64_t>() > kMaxTokenId ||
          content == nullptr || !content->is_string() || content->get<std::string>().empty()) {
        fail(ErrorKind::Format, "{}: added_tokens[{}] needs an \"id\" from 0 to {} and a non-empty \"content\" string",
             path_, i, kMaxTokenId);
      }
      const auto index = static_cast<size_t>(id->get<int64_t>());
      if (index >= vocab_.tokens.size()) {
        check_dense(static_cast<int64_t>(index), vocab_.tokens.size() + added->size(), "added_tokens");
        resize(static_cast<int64_t>(index) + 1);
      }
      // An added token overrides the model's entry for its id, as in tokenizers.
      const bool special = member_bool(t, "special", false);
      assigned_[index] = true;
      vocab_.tokens[index] = content->get<std::string>();
      vocab_.types[index] = static_cast<int32_t>(special ? TokenType::Control : TokenType::UserDefined);
      uint8_t flags = 0;
      if (member_bool(t, "lstrip", false)) flags |= kAddedLStrip;
      if (member_bool(t, "rstrip", false)) flags |= kAddedRStrip;
      if (member_bool(t, "single_word", false)) flags |= kAddedSingleWord;
      if (member_bool(t, "normalized", !special)) flags |= kAddedNormalized;
      vocab_.token_flags[index] = flags;
    }
  }

  // The ids a post-processor names by token text.
  std::vector<int32_t> special_ids(const json& processor, const json& piece) {
    const std::string name = member_string(piece, "id");
    if (const json* specials = member(processor, "special_tokens")) {
      if (const json* entry = member(*specials, name.c_str())) {
        const json* ids = member(*entry, "ids");
        if (ids == nullptr || !ids->is_array()) {
          fail(ErrorKind::Format, "{}: post_processor special_tokens[\"{}\"] has no \"ids\" array", path_,
               utf8::sanitize(name));
        }
        std::vector<int32_t> out;
        for (const json& v : *ids) {
          if (!v.is_number_integer() || v.get<int64_t>() < 0 || v.get<int64_t>() >= vocab_.size()) {
            fail(ErrorKind::Format, "{}: post_processor special_tokens[\"{}\"] lists {}, not a token id", path_,
                 utf8::sanitize(name), v.dump());
          }
          out.push_back(v.get<int32_t>());
        }
        return out;
      }
    }
    return {lookup_required(name, "post_processor SpecialToken")};
  }

  // The ids of a [token, id] pair (RobertaProcessing / BertProcessing "cls" and "sep").
  int32_t pair_id(const json& processor, const char* key) {
    const json* pair = member(processor, key);
    if (pair == nullptr || !pair->is_array() || pair->size() != 2 || !(*pair)[1].is_number_integer() ||
        (*pair)[1].get<int64_t>() < 0 || (*pair)[1].get<int64_t>() >= vocab_.size()) {
      fail(ErrorKind::Format, "{}: post_processor.{} must be [token, id] with an id in the vocabulary", path_, key);
    }
    return (*pair)[1].get<int32_t>();
  }

  // TemplateProcessing's "single" template says what encode(add_special) puts around the text.
  void read_post_processor(const json& post, int depth) {
    for_each_in(post, "processors", depth, "post-processor", [&](const json& c) {
      const std::string type = member_string(c, "type");
      std::vector<int32_t> before, after;
      if (type == "TemplateProcessing") {
        const json* single = member(c, "single");
        if (single == nullptr || !single->is_array()) {
          fail(ErrorKind::Format, "{}: TemplateProcessing has no \"single\" array", path_);
        }
        bool seen_sequence = false;
        for (const json& piece : *single) {
          if (member(piece, "Sequence") != nullptr) {
            seen_sequence = true;
          } else if (const json* special = member(piece, "SpecialToken")) {
            for (int32_t id : special_ids(c, *special)) (seen_sequence ? after : before).push_back(id);
          } else {
            fail(ErrorKind::Format, "{}: TemplateProcessing piece {} is neither a Sequence nor a SpecialToken", path_,
                 piece.dump());
          }
        }
      } else if (type == "RobertaProcessing" || type == "BertProcessing") {
        before.push_back(pair_id(c, "cls"));
        after.push_back(pair_id(c, "sep"));
      } else if (type == "ByteLevel") {
        return;  // only adjusts offsets
      } else {
        fail(ErrorKind::Unsupported, "{}: the post-processor \"{}\" is not supported", path_,
             type.empty() ? c.dump() : type);
      }
      set_template(before, after);
    });
  }

  void set_template(const std::vector<int32_t>& before, const std::vector<int32_t>& after) {
    vocab_.special_prefix = before;
    vocab_.special_suffix = after;
    // A template of one bos and/or one eos is what add_bos / add_eos say.
    vocab_.add_bos = before.size() == 1;
    if (vocab_.add_bos) vocab_.bos = before.front();
    vocab_.add_eos = after.size() == 1;
    if (vocab_.add_eos) vocab_.eos = after.front();
  }

  void read_tokenizer_config(const std::filesystem::path& file) {
    if (!std::filesystem::exists(file)) return;
    const std::string name = file.string();
    const json config = read_json_file(name, ErrorKind::Config);
    if (!config.is_object()) fail(ErrorKind::Config, "{}: expected a JSON object", name);
    vocab_.source = path_ + " + " + name;

    const auto set_token = [&](const char* key, int32_t& id) {
      if (const auto text = token_text(config, key, name)) id = lookup_required(*text, name + " " + key);
    };
    set_token("bos_token", vocab_.bos);
    set_token("eos_token", vocab_.eos);
    set_token("unk_token", vocab_.unk);
    set_token("pad_token", vocab_.pad);
    // transformers rebuilds the template from these flags when the config sets them.
    const auto add_bos = json_opt_bool(config, "add_bos_token", name);
    const auto add_eos = json_opt_bool(config, "add_eos_token", name);
    if (add_bos || add_eos) {
      const bool bos = add_bos.value_or(vocab_.add_bos && vocab_.special_prefix.size() == 1);
      const bool eos = add_eos.value_or(vocab_.add_eos && vocab_.special_suffix.size() == 1);
      if (bos && vocab_.bos < 0) {
        fail(ErrorKind::Config, "{}: add_bos_token is true but no bos_token is named; set bos_token", name);
      }
      if (eos && vocab_.eos < 0) {
        fail(ErrorKind::Config, "{}: add_eos_token is true but no eos_token is named; set eos_token", name);
      }
      set_template(bos ? std::vector<int32_t>{vocab_.bos} : std::vector<int32_t>{},
                   eos ? std::vector<int32_t>{vocab_.eos} : std::vector<int32_t>{});
    }

    if (const json* tmpl = member(config, "chat_template")) {
      if (tmpl->is_string()) {
        vocab_.chat_template = tmpl->get<std::string>();
      } else if (tmpl->is_array()) {  // [{"name": "default", "template": ...}, ...]
        for (const json& named : *tmpl) {
          if (vocab_.chat_template.empty() || member_string(named, "name") == "default") {
            vocab_.chat_template = member_string(named, "template");
          }
        }
      }
    }
  }

  void read_generation_config(const std::filesystem::path& file, std::vector<int64_t>& extra_eog) {
    if (!std::filesystem::exists(file)) return;
    const std::string name = file.string();
    const json config = read_json_file(name, ErrorKind::Config);
    extra_eog = json_opt_int_list(config, "eos_token_id", name);
    if (vocab_.eos < 0 && !extra_eog.empty() && extra_eog.front() >= 0 && extra_eog.front() < vocab_.size()) {
      vocab_.eos = static_cast<int32_t>(extra_eog.front());
    }
    if (vocab_.bos < 0) {
      if (const auto bos = json_opt_int(config, "bos_token_id", name); bos && *bos >= 0 && *bos < vocab_.size()) {
        vocab_.bos = static_cast<int32_t>(*bos);
      }
    }
  }

  int32_t find(const std::string& text) {
    if (index_.empty()) {
      // Added tokens may repeat a model token's text; the lowest id wins, as in a first match.
      for (size_t id = vocab_.tokens.size(); id-- > 0;) {
        if (assigned_[id]) index_[vocab_.tokens[id]] = static_cast<int32_t>(id);
      }
    }
    const auto it = index_.find(text);
    return it == index_.end() ? -1 : it->second;
  }

  int32_t lookup_optional(const std::string& text, const std::string& what) {
    if (text.empty()) return -1;
    return lookup_required(text, what);
  }

  int32_t lookup_required(const std::string& text, const std::string& what) {
    const int32_t id = find(text);
    if (id < 0) {
      fail(ErrorKind::Format, "{}: {} names the token \"{}\", which is not in the vocabulary", path_, what,
           utf8::sanitize(text));
    }
    return id;
  }

  // Ids far beyond the number of tokens would make a table of mostly undefined entries (and a
  // small file could ask for gigabytes).
  void check_dense(int64_t max_id, size_t n_tokens, const char* where) const {
    if (max_id >= 2 * static_cast<int64_t>(n_tokens) + 65536) {
      fail(ErrorKind::Format, "{}: {} has ids up to {} for only {} tokens; token ids must be dense", path_, where,
           max_id, n_tokens);
    }
  }

  void resize(int64_t n) {
    vocab_.tokens.resize(static_cast<size_t>(n));
    vocab_.scores.resize(static_cast<size_t>(n), 0.0f);
    vocab_.types.resize(static_cast<size_t>(n), static_cast<int32_t>(TokenType::Unused));  // ids nobody defines
    vocab_.token_flags.resize(static_cast<size_t>(n), 0);
    assigned_.resize(static_cast<size_t>(n), false);
  }

  std::string path_;
  Vocab vocab_;
  std::vector<bool> assigned_;                      // id -> defined by the vocab or an added token
  std::unordered_map<std::string, int32_t> index_;  // text -> lowest id, built after the added tokens
};

}  // namespace

Vocab vocab_from_tokenizer_json(const std::string& path) {
  return TokenizerJsonReader(path).read(read_json_file(path, ErrorKind::Format), true);
}

Vocab vocab_from_tokenizer_json_text(std::string_view text, const std::string& name) {
  return TokenizerJsonReader(name).read(parse_json_text(text, name, ErrorKind::Format), false);
}

}  // namespace ferry
