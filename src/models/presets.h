// Published config.json files of well-known checkpoints, bundled so `ferry plan --config NAME`
// works without downloading anything. Their values are public facts (the model cards' config.json).
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace ferry {

// The config.json text of preset `name` (e.g. "glm-4v-9b"), nullopt when there is none.
std::optional<std::string> preset_config(std::string_view name);
// "glm-4-9b-chat, glm-4v-9b, ..." for help texts.
std::string preset_names();

}  // namespace ferry
