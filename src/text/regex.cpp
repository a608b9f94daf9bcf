#include "text/regex.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <array>

#include "core/error.h"
#include "text/utf8.h"

namespace ferry {

namespace {

std::string pcre2_message(int code) {
  std::array<PCRE2_UCHAR, 256> buffer{};
  const int n = pcre2_get_error_message(code, buffer.data(), buffer.size());
  return n < 0 ? "error " + std::to_string(code) : std::string(reinterpret_cast<const char*>(buffer.data()));
}

// Match data and a JIT stack for the calling thread, shared by every pattern: matching needs
// scratch space, and a compiled pattern is shared between threads.
struct Scratch {
  pcre2_match_data* data = nullptr;
  pcre2_match_context* context = nullptr;
  pcre2_jit_stack* stack = nullptr;

  Scratch() {
    data = pcre2_match_data_create(1, nullptr);  // only the whole match is needed
    context = pcre2_match_context_create(nullptr);
    // Patterns such as \s+(?!\S) backtrack over long runs of white space: give the JIT room.
    stack = pcre2_jit_stack_create(32 * 1024, 8 * 1024 * 1024, nullptr);
    if (data == nullptr || context == nullptr || stack == nullptr) {
      release();
      throw std::bad_alloc();
    }
    pcre2_jit_stack_assign(context, nullptr, stack);
  }
  ~Scratch() { release(); }
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;

  void release() {
    pcre2_match_data_free(data);  // all accept nullptr
    pcre2_match_context_free(context);
    pcre2_jit_stack_free(stack);
  }
};

Scratch& scratch() {
  thread_local Scratch s;
  return s;
}

}  // namespace

struct Regex::Code {
  pcre2_code* code = nullptr;
  ~Code() { pcre2_code_free(code); }
};

Regex::Regex(std::string_view pattern, std::string_view where) : pattern_(pattern), where_(where) {
  int error = 0;
  PCRE2_SIZE offset = 0;
  auto code = std::make_shared<Code>();
  code->code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
                             PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF, &error, &offset, nullptr);
  if (code->code == nullptr) {
    fail(ErrorKind::Format, "{}: the regular expression \"{}\" does not compile (at offset {}: {}); fix the pattern",
         where, utf8::sanitize(pattern), offset, pcre2_message(error));
  }
  // JIT is only a speed-up: when the platform refuses it, the interpreter matches the same way.
  pcre2_jit_compile(code->code, PCRE2_JIT_COMPLETE);
  code_ = std::move(code);
}

bool Regex::find(std::string_view subject, size_t from, Match& match) const {
  Scratch& s = scratch();
  const int rc = pcre2_match(code_->code, reinterpret_cast<PCRE2_SPTR>(subject.data()), subject.size(), from, 0, s.data,
                             s.context);
  if (rc == PCRE2_ERROR_NOMATCH) return false;
  if (rc < 0) {
    fail(ErrorKind::Unsupported, "{}: the regular expression \"{}\" failed on a text of {} bytes: {}", where_,
         utf8::sanitize(pattern_), subject.size(), pcre2_message(rc));
  }
  const PCRE2_SIZE* ovector = pcre2_get_ovector_pointer(s.data);
  match.start = ovector[0];
  match.end = ovector[1];
  // \K in a lookahead can put the start after the end; treat such a match as empty at its end.
  if (match.start > match.end) match.start = match.end;
  return true;
}

size_t Regex::next_char_length(std::string_view subject, size_t at) {
  return at < subject.size() ? utf8::char_length(subject.substr(at)) : 1;
}

std::string Regex::replace_all(std::string_view subject, std::string_view replacement) const {
  std::string out;
  out.reserve(subject.size());
  size_t copied = 0;
  for_each_match(subject, [&](size_t start, size_t end) {
    out.append(subject.substr(copied, start - copied));
    out.append(replacement);
    copied = end;
  });
  out.append(subject.substr(copied));
  return out;
}

}  // namespace ferry
