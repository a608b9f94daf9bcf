// vocab_from_tokenizer_json: a Hugging Face tokenizer.json (model.type "BPE") plus the
// tokenizer_config.json and generation_config.json beside it.
#include <algorithm>
#include <cctype>
#include <filesystem>
#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <unordered_map>

#include "core/error.h"
#include "formats/json_file.h"
#include "text/vocab.h"

namespace ferry {

using nlohmann::json;

namespace {

const std::string kMetaspace = "\xE2\x96\x81";  // U+2581 "▁"

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

// Visits a component and, for "Sequence" components, every component inside (tokenizers nests
// them under "pretokenizers", "normalizers", "decoders" or "processors").
void for_each_component(const json& component, const std::function<void(const json&)>& visit) {
  if (!component.is_object()) return;
  visit(component);
  for (const char* list : {"pretokenizers", "normalizers", "decoders", "processors"}) {
    if (const json* items = member(component, list); items != nullptr && items->is_array()) {
      for (const json& item : *items) for_each_component(item, visit);
    }
  }
}

bool has_component(const json* component, std::string_view type) {
  bool found = false;
  if (component != nullptr) {
    for_each_component(*component, [&](const json& c) { found = found || member_string(c, "type") == type; });
  }
  return found;
}

// A normalizer that writes spaces as "▁" (sentencepiece converted to tokenizers, newer style).
bool replaces_space_with_metaspace(const json* normalizer) {
  bool found = false;
  if (normalizer != nullptr) {
    for_each_component(*normalizer, [&](const json& c) {
      const json* pattern = member(c, "pattern");
      if (member_string(c, "type") == "Replace" && pattern != nullptr && member_string(*pattern, "String") == " " &&
          member_string(c, "content") == kMetaspace) {
        found = true;
      }
    });
  }
  return found;
}

bool prepends_metaspace(const json* normalizer, const json* pre_tokenizer) {
  bool found = false;
  if (normalizer != nullptr) {
    for_each_component(*normalizer, [&](const json& c) {
      if (member_string(c, "type") == "Prepend" && member_string(c, "prepend") == kMetaspace) found = true;
    });
  }
  if (pre_tokenizer != nullptr) {
    for_each_component(*pre_tokenizer, [&](const json& c) {
      if (member_string(c, "type") != "Metaspace") return;
      const std::string scheme = member_string(c, "prepend_scheme");  // newer files
      if (!scheme.empty()) {
        found = found || scheme != "never";
      } else {
        found = found || member_bool(c, "add_prefix_space", true);
      }
    });
  }
  return found;
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

  Vocab read() {
    const json root = read_json_file(path_, ErrorKind::Format);
    if (!root.is_object()) fail(ErrorKind::Format, "{}: expected a JSON object at the top level", path_);
    const json* model = member(root, "model");
    if (model == nullptr || !model->is_object()) {
      fail(ErrorKind::Format, "{}: no \"model\" object; this is not a tokenizers tokenizer.json", path_);
    }
    check_model_type(*model);

    vocab_.source = path_;
    const json* normalizer = member(root, "normalizer");
    const json* pre_tokenizer = member(root, "pre_tokenizer");
    const json* decoder = member(root, "decoder");
    choose_kind(normalizer, pre_tokenizer, decoder);

    read_model_vocab(*model);
    read_merges(*model);
    read_added_tokens(member(root, "added_tokens"));
    vocab_.unk = lookup_optional(member_string(*model, "unk_token"), "model.unk_token");
    if (vocab_.unk >= 0) vocab_.types[vocab_.unk] = static_cast<int32_t>(TokenType::Unknown);
    read_post_processor(member(root, "post_processor"));

    const std::filesystem::path dir = std::filesystem::path(path_).parent_path();
    std::vector<int64_t> extra_eog;
    read_tokenizer_config(dir / "tokenizer_config.json");
    read_generation_config(dir / "generation_config.json", extra_eog);

    finalize_special_tokens(vocab_, extra_eog);
    vocab_.validate();
    return std::move(vocab_);
  }

 private:
  void check_model_type(const json& model) {
    const std::string type = member_string(model, "type");
    if (type == "BPE") {
      for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"}) {
        const json* v = member(model, key);
        if (v != nullptr && !(v->is_string() && v->get<std::string>().empty())) {
          fail(ErrorKind::Unsupported,
               "{}: BPE with model.{} = {} is not supported (only byte-level and "
               "sentencepiece-style BPE are)",
               path_, key, v->dump());
        }
      }
      return;
    }
    if (type.empty()) {
      fail(ErrorKind::Format, "{}: model.type is missing; expected \"BPE\"", path_);
    }
    fail(ErrorKind::Unsupported,
         "{}: model.type \"{}\" is not supported; ferry reads BPE tokenizers (byte-level like GPT-2/Llama-3/Qwen2, "
         "or sentencepiece-converted like Llama-2). A GGUF of the model carries a usable vocabulary too",
         path_, type);
  }

  void choose_kind(const json* normalizer, const json* pre_tokenizer, const json* decoder) {
    if (has_component(pre_tokenizer, "ByteLevel") || has_component(decoder, "ByteLevel")) {
      vocab_.kind = Vocab::Kind::Bpe;
      vocab_.add_space_prefix = false;
      if (pre_tokenizer != nullptr) {
        for_each_component(*pre_tokenizer, [&](const json& c) {
          const std::string type = member_string(c, "type");
          if (type == "ByteLevel" && member_bool(c, "add_prefix_space", false)) vocab_.add_space_prefix = true;
          if (type == "Split" && vocab_.pre_pattern.empty()) {
            if (const json* pattern = member(c, "pattern")) vocab_.pre_pattern = member_string(*pattern, "Regex");
          }
        });
      }
      return;
    }
    if (has_component(pre_tokenizer, "Metaspace") || has_component(decoder, "Metaspace") ||
        replaces_space_with_metaspace(normalizer)) {
      vocab_.kind = Vocab::Kind::Spm;
      vocab_.add_space_prefix = prepends_metaspace(normalizer, pre_tokenizer);
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
    if (map == nullptr || !map->is_object())
      fail(ErrorKind::Format, "{}: model.vocab is missing or not an object", path_);
    vocab_.byte_fallback = member_bool(model, "byte_fallback", false);
    vocab_.ignore_merges = member_bool(model, "ignore_merges", false);

    int64_t max_id = -1;
    for (const auto& [text, id] : map->items()) {
      if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() > 50'000'000) {
        fail(ErrorKind::Format, "{}: model.vocab[\"{}\"] is {}, expected a token id >= 0", path_, text,
             json_describe(id));
      }
      max_id = std::max(max_id, id.get<int64_t>());
    }
    resize(max_id + 1);
    for (const auto& [text, id_json] : map->items()) {
      const auto id = static_cast<size_t>(id_json.get<int64_t>());
      if (assigned_[id]) {
        fail(ErrorKind::Format, "{}: model.vocab gives id {} to both \"{}\" and \"{}\"", path_, id, vocab_.tokens[id],
             text);
      }
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

  void read_merges(const json& model) {
    const json* merges = member(model, "merges");
    if (merges == nullptr) {
      if (vocab_.kind == Vocab::Kind::Bpe) fail(ErrorKind::Format, "{}: model.merges is missing", path_);
      return;
    }
    if (!merges->is_array())
      fail(ErrorKind::Format, "{}: model.merges is {}, expected an array", path_, json_describe(*merges));
    vocab_.merges.reserve(merges->size());
    for (size_t i = 0; i < merges->size(); ++i) {
      const json& m = (*merges)[i];
      if (m.is_string()) {  // "left right" (older files)
        const std::string s = m.get<std::string>();
        const size_t space = s.find(' ');
        if (space == std::string::npos || space == 0 || space + 1 >= s.size() || s.find(' ', space + 1) != s.npos) {
          fail(ErrorKind::Format, "{}: model.merges[{}] = \"{}\" is not of the form \"left right\"", path_, i, s);
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
    if (!added->is_array())
      fail(ErrorKind::Format, "{}: added_tokens is {}, expected an array", path_, json_describe(*added));
    for (size_t i = 0; i < added->size(); ++i) {
      const json& t = (*added)[i];
      const json* id = member(t, "id");
      const json* content = member(t, "content");
      if (id == nullptr || !id->is_number_integer() || id->get<int64_t>() < 0 || id->get<int64_t>() > 50'000'000 ||
          content == nullptr || !content->is_string() || content->get<std::string>().empty()) {
        fail(ErrorKind::Format, "{}: added_tokens[{}] needs an \"id\" >= 0 and a non-empty \"content\" string", path_,
             i);
      }
      const auto index = static_cast<size_t>(id->get<int64_t>());
      if (index >= vocab_.tokens.size()) resize(static_cast<int64_t>(index) + 1);
      // An added token overrides the model's entry for its id, as in tokenizers.
      assigned_[index] = true;
      vocab_.tokens[index] = content->get<std::string>();
      vocab_.types[index] =
          static_cast<int32_t>(member_bool(t, "special", false) ? TokenType::Control : TokenType::UserDefined);
    }
  }

  // TemplateProcessing's "single" template says which special tokens encode(add_special) adds.
  void read_post_processor(const json* post) {
    if (post == nullptr) return;
    for_each_component(*post, [&](const json& c) {
      const json* single = member(c, "single");
      if (member_string(c, "type") != "TemplateProcessing" || single == nullptr || !single->is_array()) return;
      bool seen_sequence = false;
      for (const json& piece : *single) {
        if (member(piece, "Sequence") != nullptr) {
          seen_sequence = true;
        } else if (const json* special = member(piece, "SpecialToken")) {
          const int32_t id = lookup_required(member_string(*special, "id"), "post_processor SpecialToken");
          if (!seen_sequence) {
            vocab_.bos = id;
            vocab_.add_bos = true;
          } else {
            vocab_.eos = id;
            vocab_.add_eos = true;
          }
        }
      }
    });
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
    if (const auto add_bos = json_opt_bool(config, "add_bos_token", name)) vocab_.add_bos = *add_bos;
    if (const auto add_eos = json_opt_bool(config, "add_eos_token", name)) vocab_.add_eos = *add_eos;

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

  int32_t find(const std::string& text) const {
    // Added tokens may repeat a model token's text; the lowest id wins, as in a first match.
    for (size_t id = 0; id < vocab_.tokens.size(); ++id) {
      if (assigned_[id] && vocab_.tokens[id] == text) return static_cast<int32_t>(id);
    }
    return -1;
  }

  int32_t lookup_optional(const std::string& text, const std::string& what) const {
    if (text.empty()) return -1;
    return lookup_required(text, what);
  }

  int32_t lookup_required(const std::string& text, const std::string& what) const {
    const int32_t id = find(text);
    if (id < 0)
      fail(ErrorKind::Format, "{}: {} names the token \"{}\", which is not in the vocabulary", path_, what, text);
    return id;
  }

  void resize(int64_t n) {
    vocab_.tokens.resize(static_cast<size_t>(n));
    vocab_.scores.resize(static_cast<size_t>(n), 0.0f);
    vocab_.types.resize(static_cast<size_t>(n), static_cast<int32_t>(TokenType::Unused));  // ids nobody defines
    assigned_.resize(static_cast<size_t>(n), false);
  }

  std::string path_;
  Vocab vocab_;
  std::vector<bool> assigned_;  // id -> defined by the vocab or an added token
};

}  // namespace

Vocab vocab_from_tokenizer_json(const std::string& path) {
  return TokenizerJsonReader(path).read();
}

}  // namespace ferry
