#include "cli/line_reader.h"

#include <histedit.h>
#include <langinfo.h>
#include <poll.h>
#include <unistd.h>

#include <cerrno>
#include <clocale>
#include <cstdio>
#include <cstring>
#include <cwchar>

namespace ferry::cli {

// libedit's own interface (histedit.h). It installs no signal handler unless asked (EL_SIGNAL),
// so a SIGINT reaches the program's handler; the characters come through read_char, which ends
// the line (el_gets returns null, count -1) once the interrupt flag is up.
struct LineReader::Editor {
  EditLine* el = nullptr;
  History* hist = nullptr;
  HistEvent event{};
  std::string prompt;
  const std::atomic<bool>* interrupted = nullptr;
  std::mbstate_t state{};  // of a multibyte character read in part

  static Editor& of(EditLine* el) {
    void* self = nullptr;
    el_get(el, EL_CLIENTDATA, &self);
    return *static_cast<Editor*>(self);
  }
  static char* show_prompt(EditLine* el) { return of(el).prompt.data(); }

  // One character from the terminal: 1, 0 at end of input, -1 when interrupted or on an error.
  // The flag is checked between short waits, not left to the read's EINTR: a signal that comes
  // just before the read starts would otherwise leave it waiting for a key.
  static int read_char(EditLine* el, wchar_t* out) {
    Editor& self = of(el);
    const int fd = fileno(stdin);
    while (true) {
      if (self.interrupted->load()) {
        self.state = {};
        errno = EINTR;
        return -1;
      }
      pollfd ready{fd, POLLIN, 0};
      const int n_ready = poll(&ready, 1, 100);
      if (n_ready < 0 && errno != EINTR) return -1;
      if (n_ready <= 0) continue;
      char byte = 0;
      const ssize_t n = ::read(fd, &byte, 1);
      if (n == 0) return 0;
      if (n < 0) {
        if (errno == EINTR || errno == EAGAIN) continue;
        return -1;
      }
      wchar_t c = 0;
      const size_t used = std::mbrtowc(&c, &byte, 1, &self.state);
      if (used == static_cast<size_t>(-2)) continue;  // more bytes of this character to come
      if (used == static_cast<size_t>(-1)) {          // not a character in this locale: dropped
        self.state = {};
        continue;
      }
      *out = c;
      return 1;
    }
  }

  explicit Editor(const std::atomic<bool>& flag) : interrupted(&flag) {
    // Multibyte input (UTF-8 text for GLM and Qwen) is decoded by the terminal's character set;
    // where none is set (the C locale, usual in containers), as UTF-8.
    const char* ctype = std::setlocale(LC_CTYPE, "");
    if (ctype == nullptr || std::strcmp(nl_langinfo(CODESET), "ANSI_X3.4-1968") == 0) {
      std::setlocale(LC_CTYPE, "C.UTF-8");
    }
    el = el_init("ferry", stdin, stderr, stderr);
    if (el == nullptr) return;
    hist = history_init();
    history(hist, &event, H_SETSIZE, 1000);
    history(hist, &event, H_SETUNIQUE, 1);
    el_set(el, EL_CLIENTDATA, this);
    el_set(el, EL_PROMPT, &Editor::show_prompt);
    el_set(el, EL_GETCFN, &Editor::read_char);
    el_set(el, EL_EDITOR, "emacs");
    el_set(el, EL_HIST, history, hist);
    el_source(el, nullptr);  // the user's ~/.editrc
  }
  ~Editor() {
    if (el != nullptr) el_end(el);
    if (hist != nullptr) history_end(hist);
  }
  Editor(const Editor&) = delete;
  Editor& operator=(const Editor&) = delete;
};

LineReader::LineReader(const std::atomic<bool>& interrupted) : interrupted_(interrupted) {
  if (isatty(fileno(stdin)) != 0) {
    editor_ = std::make_unique<Editor>(interrupted_);
    if (editor_->el == nullptr) editor_.reset();  // no usable terminal: plain lines
  }
}

LineReader::~LineReader() = default;

bool LineReader::interactive() const {
  return isatty(fileno(stdin)) != 0;
}

LineReader::Read LineReader::read(const std::string& prompt, std::string& line) {
  line.clear();
  if (editor_) {
    editor_->prompt = prompt;
    int count = 0;
    const char* got = el_gets(editor_->el, &count);
    if (got == nullptr || count <= 0) {
      if (count < 0 && interrupted_.load()) return Read::Interrupted;
      return Read::End;
    }
    line.assign(got, static_cast<size_t>(count));
    while (!line.empty() && (line.back() == '\n' || line.back() == '\r')) line.pop_back();
    return Read::Line;
  }
  if (interactive()) {
    std::fputs(prompt.c_str(), stderr);
    std::fflush(stderr);
  }
  return read_plain(line);
}

// Lines as they come, the end-of-line dropped (a '\r' before it stays, as std::getline leaves it).
// The input is awaited in short polls, so the interrupt flag is seen while a pipe is quiet.
LineReader::Read LineReader::read_plain(std::string& line) {
  const int fd = fileno(stdin);
  while (true) {
    if (const size_t end = pending_.find('\n'); end != std::string::npos) {
      line.assign(pending_, 0, end);
      pending_.erase(0, end + 1);
      return Read::Line;
    }
    if (at_end_) {
      if (pending_.empty()) return Read::End;
      line = std::move(pending_);  // a last line without its end-of-line
      pending_.clear();
      return Read::Line;
    }
    if (interrupted_.load()) return Read::Interrupted;
    pollfd ready{fd, POLLIN, 0};
    const int n_ready = poll(&ready, 1, 100);
    if (n_ready < 0 && errno != EINTR) at_end_ = true;
    if (n_ready <= 0) continue;
    char buffer[4096];
    const ssize_t n = ::read(fd, buffer, sizeof buffer);
    if (n < 0 && (errno == EINTR || errno == EAGAIN)) continue;
    if (n <= 0) {
      at_end_ = true;
      continue;
    }
    pending_.append(buffer, static_cast<size_t>(n));
  }
}

void LineReader::remember(const std::string& line) {
  if (editor_ && !line.empty()) history(editor_->hist, &editor_->event, H_ENTER, line.c_str());
}

}  // namespace ferry::cli
