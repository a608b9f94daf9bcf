// Where a checkpoint keeps its chat template: chat_template.jinja or tokenizer_config.json next to
// the weights (a string, or a list of named templates), or the GGUF key tokenizer.chat_template
// (named ones as tokenizer.chat_template.<name>).
#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "chat/chat_template.h"
#include "core/error.h"
#include "formats/gguf.h"
#include "formats/json_file.h"

namespace ferry::chat {

namespace {

namespace fs = std::filesystem;

struct Found {
  std::string source;
  std::string origin;
  std::optional<std::string> bos_token;
  std::optional<std::string> eos_token;
  std::vector<std::string> names;
};

std::string read_text_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail(ErrorKind::Io, "cannot read {}", path);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

bool ends_with(const std::string& s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// transformers' choice among named templates: the requested one, else "tool_use" when tools are
// given and it exists, else "default".
std::string choose_name(const std::vector<std::string>& names, bool with_tools, const std::string& requested,
                        const std::string& where) {
  const auto has = [&](const std::string& n) { return std::find(names.begin(), names.end(), n) != names.end(); };
  std::string listed;
  for (const auto& n : names) listed += (listed.empty() ? "" : ", ") + n;
  if (!requested.empty()) {
    if (!has(requested))
      fail(ErrorKind::Config, "{} has no chat template named '{}' (it has: {})", where, requested, listed);
    return requested;
  }
  if (with_tools && has("tool_use")) return "tool_use";
  if (has("default")) return "default";
  fail(ErrorKind::Config, "{} has several chat templates but none named 'default' ({}); pick one by name", where,
       listed);
}

// bos_token / eos_token in tokenizer_config.json: a string or an AddedToken object {content: ...}.
std::optional<std::string> special_token(const nlohmann::json& config, const char* key) {
  const auto it = config.find(key);
  if (it == config.end() || it->is_null()) return std::nullopt;
  if (it->is_string()) return it->get<std::string>();
  if (it->is_object()) {
    const auto content = it->find("content");
    if (content != it->end() && content->is_string()) return content->get<std::string>();
  }
  return std::nullopt;
}

void read_tokens(const nlohmann::json& config, Found& found) {
  found.bos_token = special_token(config, "bos_token");
  found.eos_token = special_token(config, "eos_token");
}

// chat_template from tokenizer_config.json (or chat_template.json); false when the key is absent.
bool template_from_config(const nlohmann::json& config, const std::string& path, bool with_tools,
                          const std::string& name, Found& found) {
  const auto it = config.find("chat_template");
  if (it == config.end() || it->is_null()) return false;
  if (it->is_string()) {
    if (!name.empty() && name != "default") {
      fail(ErrorKind::Config, "{} has a single chat template; there is none named '{}'", path, name);
    }
    found.source = it->get<std::string>();
    found.origin = path;
    return true;
  }
  if (!it->is_array())
    fail(ErrorKind::Config, "{}: chat_template must be a string or a list of {{name, template}}", path);
  std::vector<std::string> names;
  for (const auto& entry : *it) {
    if (!entry.is_object() || !entry.contains("name") || !entry["name"].is_string() || !entry.contains("template") ||
        !entry["template"].is_string()) {
      fail(ErrorKind::Config, "{}: every chat_template list entry needs a string name and template", path);
    }
    names.push_back(entry["name"].get<std::string>());
  }
  const std::string chosen = choose_name(names, with_tools, name, path);
  for (const auto& entry : *it) {
    if (entry["name"].get<std::string>() == chosen) found.source = entry["template"].get<std::string>();
  }
  found.origin = path + " (" + chosen + ")";
  found.names = names;
  return true;
}

Found from_gguf(const std::string& path, bool with_tools, const std::string& name) {
  const GgufFile g = GgufFile::open(path);
  Found found;
  const std::string base = "tokenizer.chat_template";
  std::vector<std::string> names;
  if (g.has(base)) names.push_back("default");
  for (const std::string& key : g.keys()) {
    if (key.rfind(base + ".", 0) == 0) names.push_back(key.substr(base.size() + 1));
  }
  if (names.empty()) fail(ErrorKind::Config, "{} has no chat template (no {} key)", path, base);
  const std::string chosen = choose_name(names, with_tools, name, path);
  const std::string key = chosen == "default" ? base : base + "." + chosen;
  const auto text = g.opt_string(key);
  if (!text) fail(ErrorKind::Config, "{} has no chat template (no {} key)", path, key);
  found.source = *text;
  found.origin = path + " (" + key + ")";
  if (names.size() > 1) found.names = names;
  // The special tokens by id, from the embedded vocabulary.
  if (const GgufValue* tokens = g.find("tokenizer.ggml.tokens"); tokens != nullptr && tokens->type == GgufType::Array) {
    const auto token = [&](const char* id_key) -> std::optional<std::string> {
      const auto id = g.opt_int(id_key);
      if (!id || *id < 0 || static_cast<uint64_t>(*id) >= tokens->strings.size()) return std::nullopt;
      return std::string(tokens->strings[static_cast<size_t>(*id)]);
    };
    found.bos_token = token("tokenizer.ggml.bos_token_id");
    found.eos_token = token("tokenizer.ggml.eos_token_id");
  }
  return found;
}

Found find_template(const std::string& path, bool with_tools, const std::string& name) {
  std::error_code ec;
  if (fs::is_directory(path, ec)) {
    const fs::path dir(path);
    Found found;
    const std::string config_path = (dir / "tokenizer_config.json").string();
    std::optional<nlohmann::json> config;
    if (fs::exists(config_path)) {
      config = read_json_file(config_path);
      read_tokens(*config, found);
    }
    const std::string jinja = (dir / "chat_template.jinja").string();
    if (fs::exists(jinja) && (name.empty() || name == "default")) {
      found.source = read_text_file(jinja);
      found.origin = jinja;
      return found;
    }
    if (config && template_from_config(*config, config_path, with_tools, name, found)) return found;
    const std::string processor = (dir / "chat_template.json").string();
    if (fs::exists(processor) && template_from_config(read_json_file(processor), processor, with_tools, name, found)) {
      return found;
    }
    fail(ErrorKind::Config,
         "{} has no chat template: looked for chat_template.jinja, the chat_template field of tokenizer_config.json "
         "and chat_template.json; give one with --template FILE.jinja",
         path);
  }
  if (!fs::exists(path, ec)) fail(ErrorKind::Io, "{} does not exist", path);
  if (ends_with(path, ".gguf")) return from_gguf(path, with_tools, name);
  if (ends_with(path, ".json")) {
    Found found;
    const nlohmann::json config = read_json_file(path);
    read_tokens(config, found);
    if (!template_from_config(config, path, with_tools, name, found)) {
      fail(ErrorKind::Config, "{} has no chat_template field", path);
    }
    return found;
  }
  Found found;
  found.source = read_text_file(path);
  found.origin = path;
  return found;
}

}  // namespace

LoadedChatTemplate load_chat_template(const std::string& path, bool with_tools, const std::string& name) {
  Found found = find_template(path, with_tools, name);
  return LoadedChatTemplate{ChatTemplate::parse(found.source, found.origin), found.bos_token, found.eos_token,
                            found.names};
}

std::string read_chat_template_source(const std::string& path, bool with_tools, const std::string& name) {
  return find_template(path, with_tools, name).source;
}

}  // namespace ferry::chat
