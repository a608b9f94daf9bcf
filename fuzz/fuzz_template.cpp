// libFuzzer target: a chat template. Parses the input and renders it with a small fixed
// conversation under tight limits. Any ferry::Error is the expected outcome for bad input; a
// crash, a sanitizer report, another exception (bad_alloc included), a hang (-timeout) or memory
// above -rss_limit_mb is a finding. The limits keep every render bounded in time and memory.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "chat/chat_template.h"
#include "core/error.h"

namespace {

const nlohmann::ordered_json& variables() {
  static const nlohmann::ordered_json v = nlohmann::ordered_json::parse(R"({
    "messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi \u00e9 \ud83d\ude00"},
                 {"role": "assistant", "content": "", "tool_calls": [{"id": "a1b2c3d4e", "type": "function",
                   "function": {"name": "f", "arguments": {"x": 1, "y": [1.5, null, true]}}}]},
                 {"role": "tool", "content": "{\"r\": 2}"}, {"role": "user", "content": "Bye"}],
    "tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "object",
               "properties": {"x": {"type": "integer"}}}}}],
    "add_generation_prompt": true, "bos_token": "<s>", "eos_token": "</s>", "enable_thinking": false,
    "n": 3, "s": "Hello World", "lst": [3, 1, 2], "d": {"b": 1, "a": 2, "10": 3}
  })");
  return v;
}

ferry::chat::RenderLimits limits() {
  ferry::chat::RenderLimits l;
  l.max_output_bytes = 1 << 20;
  l.max_steps = 200'000;
  l.max_depth = 200;
  l.max_list_length = 10'000;
  l.max_allocated_bytes = 64 << 20;
  return l;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view source(reinterpret_cast<const char*>(data), size);
  try {
    const auto t = ferry::chat::ChatTemplate::parse(source, "fuzz");
    const std::string out = t.render(variables(), limits());
    if (out.size() > limits().max_output_bytes) __builtin_trap();
  } catch (const ferry::Error&) {
  }
  return 0;
}
