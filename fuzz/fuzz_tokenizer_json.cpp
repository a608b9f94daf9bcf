// libFuzzer target: a Hugging Face tokenizer.json. Reads the input as the file's text, builds the
// tokenizer (vocabulary, merges, added tokens, normalizer and pre-tokenizer regexes, template),
// then encodes a few fixed texts and the input's own first bytes, and decodes the ids. Any
// ferry::Error is the expected outcome for bad input; a crash, a sanitizer report, another
// exception, a hang (-timeout) or memory above -rss_limit_mb is a finding, and so is an id outside
// the vocabulary.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "core/error.h"
#include "text/tokenizer.h"
#include "text/vocab.h"

namespace {

constexpr std::string_view kTexts[] = {
    "Hello world, it's 12345 o'clock!\n\n  ",
    "caf\xC3\xA9 e\xCC\x81 \xE4\xB8\xAD\xE6\x96\x87 \xF0\x9F\x98\x80 \xD9\xA3\xD9\xA4",  // café é 中文 😀 ٣٤
    "<s><|im_start|>user\n<|im_end|></s><unk>[gMASK]<sop>",
    "\xFF\xC3 broken \xE4\xB8",  // malformed UTF-8
    "\t\r\n\xC2\xA0\xE3\x80\x80 \xE2\x96\x81",
};

void check_ids(const ferry::Tokenizer& tok, const std::vector<int32_t>& ids) {
  for (int32_t id : ids) {
    if (id < 0 || id >= tok.n_vocab()) __builtin_trap();
  }
  (void)tok.decode(ids, true);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view json(reinterpret_cast<const char*>(data), size);
  try {
    const ferry::Tokenizer tok = ferry::Tokenizer::from_vocab(ferry::vocab_from_tokenizer_json_text(json, "fuzz.json"));
    for (std::string_view text : kTexts) {
      check_ids(tok, tok.encode(text, true));
      check_ids(tok, tok.encode(text, false, false));
    }
    check_ids(tok, tok.encode(json.substr(0, 256), false));
  } catch (const ferry::Error&) {
  }
  return 0;
}
