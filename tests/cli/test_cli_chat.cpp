// Issue 14, items 1 and 2: `ferry chat` survives a full context (the oldest turns dropped with a
// notice, an over-long message refused, a reply cut at the context's end) and has the basics:
// /help, /reset, /exit, line editing and history on a terminal, Ctrl-C that stops a reply (twice:
// ends the chat with 130), and the cache reused up to the longest common prefix. `generate -n`
// beyond the context generates until it is full (stop: context). Driven through standard input,
// and through a pseudo-terminal for what needs one.
#include <gtest/gtest.h>
#include <poll.h>
#include <pty.h>
#include <signal.h>
#include <sys/wait.h>
#include <termios.h>
#include <unistd.h>

#include <array>
#include <chrono>
#include <nlohmann/json.hpp>
#include <regex>
#include <string>
#include <thread>
#include <vector>

#include "../engine/engine_fixture.h"
#include "cli_runner.h"

namespace ferry {
namespace {

using testing::CliRun;
using testing::quote;
using testing::run_ferry;

size_t count_of(const std::string& text, const std::string& needle) {
  size_t n = 0;
  for (size_t at = text.find(needle); at != std::string::npos; at = text.find(needle, at + 1)) ++n;
  return n;
}

// Every "[N new prompt tokens, reused K of M, ...]" line: {N, K, M}.
std::vector<std::array<int, 3>> turn_stats(const std::string& err) {
  std::vector<std::array<int, 3>> out;
  const std::regex line(R"(\[(\d+) new prompt tokens, reused (\d+) of (\d+), )");
  for (auto it = std::sregex_iterator(err.begin(), err.end(), line); it != std::sregex_iterator(); ++it) {
    out.push_back({std::stoi((*it)[1]), std::stoi((*it)[2]), std::stoi((*it)[3])});
  }
  return out;
}

class CliChat : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new testing::TempDir("cli_chat");
    testing::make_model(dir_->str(), tiny::Arch::Llama, "gguf", 5);
  }
  static void TearDownTestSuite() { delete dir_; }
  static std::string model() { return quote(dir_->file("model.gguf")); }
  static CliRun chat(const std::string& options, const std::string& lines) {
    return run_ferry("chat --model " + model() + " --temperature 0 " + options, lines);
  }
  static testing::TempDir* dir_;
};
testing::TempDir* CliChat::dir_ = nullptr;

TEST_F(CliChat, AHistoryLongerThanTheContextDropsTheOldestTurnsAndGoesOn) {
  std::string lines;
  for (int i = 0; i < 8; ++i) lines += "Tell me something about the number " + std::to_string(i) + "\n";
  const CliRun r = chat("--ctx 64 --max-tokens 8", lines);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(turn_stats(r.err).size(), 8u) << r.err;  // every line answered
  EXPECT_NE(r.err.find("[context full: dropped the "), std::string::npos) << r.err;
  // The notice comes once per shift, not per turn, and on a line of its own.
  EXPECT_LT(count_of(r.err, "[context full: dropped"), 8u) << r.err;
  EXPECT_EQ(r.err.find("usage error"), std::string::npos) << r.err;
}

TEST_F(CliChat, AMessageLongerThanTheContextIsRefusedAndTheChatGoesOn) {
  std::string longer;
  for (int i = 0; i < 40; ++i) longer += "word" + std::to_string(i) + " ";
  const CliRun r = chat("--ctx 64 --max-tokens 5", "Hello\n" + longer + "\nHi\n");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("error: this message takes"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("the context holds 64"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("--ctx"), std::string::npos) << r.err;
  const auto stats = turn_stats(r.err);
  ASSERT_EQ(stats.size(), 2u) << r.err;  // "Hello" and "Hi"
  // The refused message left the history as it was: "Hi" continues from "Hello"'s turn.
  EXPECT_GT(stats[1][1], 0) << r.err;
  EXPECT_EQ(r.err.find("[context full"), std::string::npos) << r.err;
}

TEST_F(CliChat, AReplyThatFillsTheContextStopsThereAndTheNextTurnShifts) {
  const CliRun r = chat("--ctx 64 --max-tokens 1000", "Hello\nHi\n");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("(stop: context)"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("[context full: dropped the oldest turn]"), std::string::npos) << r.err;
  EXPECT_EQ(turn_stats(r.err).size(), 2u) << r.err;
}

TEST_F(CliChat, HelpResetExitAndUnknownCommands) {
  const CliRun r = chat("--max-tokens 4", "/help\nHello\n/reset\nHello\n/frobnicate\n/exit\nnever read\n");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  for (const char* listed : {"/help", "/reset", "/exit", "/quit", "/image FILE"}) {
    EXPECT_NE(r.err.find(listed), std::string::npos) << listed << "\n" << r.err;
  }
  EXPECT_NE(r.err.find("[conversation cleared]"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("error: unknown command /frobnicate; /help lists the commands"), std::string::npos) << r.err;
  const auto stats = turn_stats(r.err);
  ASSERT_EQ(stats.size(), 2u) << r.err;  // nothing after /exit
  // After /reset the same message is the same prompt, evaluated from scratch: the same reply.
  EXPECT_EQ(stats[1], stats[0]) << r.err;
  EXPECT_EQ(stats[1][1], 0) << r.err;
  const size_t newline = r.out.find('\n');
  ASSERT_NE(newline, std::string::npos);
  EXPECT_EQ(r.out, r.out.substr(0, newline + 1) + r.out.substr(0, newline + 1));
  // /quit ends too; a path is a message, not a command.
  const CliRun q = chat("--max-tokens 2", "/usr/bin is a folder\n/quit\nHello\n");
  ASSERT_EQ(q.exit_code, 0) << q.err;
  EXPECT_EQ(turn_stats(q.err).size(), 1u) << q.err;
  EXPECT_EQ(q.err.find("unknown command"), std::string::npos) << q.err;
}

// The second turn reuses the cache up to where its prompt and what was evaluated part, even when
// the reply's text re-encodes differently (random weights write invalid UTF-8), instead of
// evaluating the whole conversation again.
TEST_F(CliChat, TheCacheIsReusedUpToTheLongestCommonPrefix) {
  const CliRun r = chat("--max-tokens 8", "Hello\nHow are you today?\nAnd then?\n");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto stats = turn_stats(r.err);
  ASSERT_EQ(stats.size(), 3u) << r.err;
  EXPECT_EQ(stats[0][1], 0);
  EXPECT_EQ(stats[0][0], stats[0][2]);
  for (size_t t = 1; t < stats.size(); ++t) {
    EXPECT_GE(stats[t][1], stats[0][2]) << "turn " << t << " re-evaluated the first prompt\n" << r.err;
    EXPECT_LT(stats[t][1], stats[t][2]) << r.err;
    EXPECT_EQ(stats[t][0] + stats[t][1], stats[t][2]) << r.err;
  }
}

TEST_F(CliChat, GenerateBeyondTheContextStopsWhenItIsFull) {
  const std::string base = "generate --model " + model() + " --prompt-ids 1,2,3 --temperature 0 --ignore-eos ";
  CliRun r = run_ferry(base + "-q --ctx 32 -n 100 --json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["stop"], "context");
  EXPECT_EQ(j["ids"].size(), 30u);  // 3 + 29 rows; the last token needs none
  r = run_ferry(base + "--ctx 32 -n 100");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("generated: 30 tokens"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("stop: context"), std::string::npos) << r.err;
  // Within the context, -n still decides.
  r = run_ferry(base + "-q --ctx 32 -n 29 --json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(nlohmann::json::parse(r.out)["stop"], "max_tokens");
  // A prompt longer than the context stays an error.
  r = run_ferry("generate -q --model " + model() + " --prompt-ids 1,2,3,4,5 --ctx 4 -n 1");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("the prompt (5 tokens) does not fit the context of 4 tokens"), std::string::npos) << r.err;
}

// `ferry chat` on a pseudo-terminal: what is typed, what comes back (both streams), the exit.
class PtyChat {
 public:
  explicit PtyChat(const std::vector<std::string>& args) {
    struct winsize size {};
    size.ws_row = 40;
    size.ws_col = 200;
    pid_ = forkpty(&fd_, nullptr, nullptr, &size);
    if (pid_ == 0) {
      setenv("TERM", "xterm", 1);
      std::vector<char*> argv;
      argv.push_back(const_cast<char*>(FERRY_CLI));
      for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
      argv.push_back(nullptr);
      execv(FERRY_CLI, argv.data());
      _exit(127);
    }
  }
  ~PtyChat() {
    if (pid_ > 0 && !exited_) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
    if (fd_ >= 0) close(fd_);
  }
  PtyChat(const PtyChat&) = delete;
  PtyChat& operator=(const PtyChat&) = delete;

  bool started() const { return pid_ > 0; }
  void type(std::string_view keys) {
    while (!keys.empty()) {
      const ssize_t n = write(fd_, keys.data(), keys.size());
      if (n <= 0) return;
      keys.remove_prefix(static_cast<size_t>(n));
    }
  }
  // Waits until `needle` appears after what earlier calls matched; true when it did.
  bool expect(const std::string& needle, double seconds = 30) {
    const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
    while (true) {
      if (const size_t at = out_.find(needle, seen_); at != std::string::npos) {
        seen_ = at + needle.size();
        return true;
      }
      if (std::chrono::steady_clock::now() > end || !read_some(50)) return false;
    }
  }
  // Waits until more than `bytes` bytes came after the last match.
  bool expect_more(size_t bytes, double seconds = 30) {
    const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
    while (out_.size() < seen_ + bytes) {
      if (std::chrono::steady_clock::now() > end || !read_some(50)) return false;
    }
    seen_ = out_.size();
    return true;
  }
  // Waits until the line editor holds the terminal (raw mode: no ICANON); keys typed before that
  // are cooked by the terminal first (an erase done by it, Ctrl-D lost), as for any type-ahead.
  bool editing(double seconds = 30) {
    const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
    while (std::chrono::steady_clock::now() < end) {
      termios mode{};
      if (tcgetattr(fd_, &mode) == 0 && (mode.c_lflag & ICANON) == 0) return true;
      read_some(5);
    }
    return false;
  }
  // The exit status, or -1 when it has not ended in time.
  int exit_code(double seconds = 30) {
    const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
    while (std::chrono::steady_clock::now() < end) {
      read_some(20);  // keep the terminal drained
      int status = 0;
      if (waitpid(pid_, &status, WNOHANG) == pid_) {
        exited_ = true;
        return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
      }
    }
    return -1;
  }
  const std::string& output() const { return out_; }

 private:
  // False once the terminal is closed (the program ended).
  bool read_some(int timeout_ms) {
    pollfd p{fd_, POLLIN, 0};
    if (poll(&p, 1, timeout_ms) <= 0) return true;
    char buf[4096];
    const ssize_t n = read(fd_, buf, sizeof buf);
    if (n <= 0) {
      std::this_thread::sleep_for(std::chrono::milliseconds(timeout_ms));
      return false;
    }
    out_.append(buf, static_cast<size_t>(n));
    return true;
  }

  pid_t pid_ = -1;
  int fd_ = -1;
  bool exited_ = false;
  std::string out_;
  size_t seen_ = 0;
};

TEST_F(CliChat, OnATerminalLinesAreEditedAndRemembered) {
  PtyChat c({"chat", "-q", "--model", dir_->file("model.gguf"), "--temperature", "0", "--max-tokens", "4"});
  ASSERT_TRUE(c.started());
  ASSERT_TRUE(c.expect("> ")) << c.output();
  ASSERT_TRUE(c.editing()) << c.output();
  c.type("/hep\x7flp\r");  // a typo erased with backspace
  ASSERT_TRUE(c.expect("commands:")) << c.output();
  ASSERT_TRUE(c.expect("> ")) << c.output();
  ASSERT_TRUE(c.editing()) << c.output();
  c.type("\x1b[A\r");  // up: the last line again
  ASSERT_TRUE(c.expect("commands:")) << c.output();
  ASSERT_TRUE(c.expect("> ")) << c.output();
  ASSERT_TRUE(c.editing()) << c.output();
  c.type("elp\x01/h\r");  // Ctrl-A: to the start of the line
  ASSERT_TRUE(c.expect("commands:")) << c.output();
  ASSERT_TRUE(c.expect("> ")) << c.output();
  ASSERT_TRUE(c.editing()) << c.output();
  c.type("\x04");  // Ctrl-D on an empty line ends the chat
  EXPECT_EQ(c.exit_code(), 0) << c.output();
}

// A model whose greedy reply to "Hi" runs for hundreds of tokens at a few milliseconds each (one
// thread): long enough to be interrupted.
class CliChatInterrupt : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new testing::TempDir("cli_chat_slow");
    tiny::Options o;
    o.arch = tiny::Arch::Llama;
    o.out_dir = dir_->str();
    o.format = "gguf";
    o.seed = 7;
    o.layers = 4;
    o.hidden = 512;
    o.ffn = 2048;
    o.max_context = 8192;
    o.threads = 1;
    tiny::write_tiny_model(o);
  }
  static void TearDownTestSuite() { delete dir_; }
  static std::vector<std::string> args() {
    return {
        "chat",      "--model", dir_->file("model.gguf"), "--temperature", "0", "--max-tokens", "3000", "--ctx", "4096",
        "--threads", "1"};
  }
  static testing::TempDir* dir_;
};
testing::TempDir* CliChatInterrupt::dir_ = nullptr;

TEST_F(CliChatInterrupt, CtrlCStopsTheReplyAndTheChatGoesOn) {
  PtyChat c(args());
  ASSERT_TRUE(c.started());
  ASSERT_TRUE(c.expect("> ", 60)) << c.output();
  ASSERT_TRUE(c.editing()) << c.output();
  c.type("Hi\r");
  ASSERT_TRUE(c.expect("Hi\r\n")) << c.output();  // the line was read
  ASSERT_TRUE(c.expect_more(8)) << c.output();    // the reply is streaming
  c.type("\x03");
  ASSERT_TRUE(c.expect("[interrupted]")) << c.output();
  ASSERT_TRUE(c.expect("new prompt tokens")) << c.output();
  ASSERT_TRUE(c.expect("> ")) << c.output();
  // The next message is answered, after the interrupted turn kept in the cache.
  c.type("Hello\r");
  ASSERT_TRUE(c.expect("Hello\r\n")) << c.output();
  ASSERT_TRUE(c.expect_more(8)) << c.output();
  c.type("\x03");
  ASSERT_TRUE(c.expect("[interrupted]")) << c.output();
  ASSERT_TRUE(c.expect("new prompt tokens")) << c.output();
  const auto stats = turn_stats(c.output());
  ASSERT_EQ(stats.size(), 2u) << c.output();
  EXPECT_GE(stats[1][1], stats[0][2]) << c.output();
  ASSERT_TRUE(c.expect("> ")) << c.output();
  ASSERT_TRUE(c.editing()) << c.output();
  c.type("/help\r");  // a line resets the count
  ASSERT_TRUE(c.expect("commands:")) << c.output();
  ASSERT_TRUE(c.expect("> ")) << c.output();
  // At the prompt, Ctrl-C once says how to leave; twice in a row ends the chat with 130.
  c.type("\x03");
  ASSERT_TRUE(c.expect("[Ctrl-C again")) << c.output();
  ASSERT_TRUE(c.expect("> ")) << c.output();
  ASSERT_TRUE(c.editing()) << c.output();
  c.type("\x03");
  EXPECT_EQ(c.exit_code(), 130) << c.output();
}

TEST_F(CliChatInterrupt, CtrlCDuringAReplyThenAtThePromptEndsTheChat) {
  PtyChat c(args());
  ASSERT_TRUE(c.started());
  ASSERT_TRUE(c.expect("> ", 60)) << c.output();
  ASSERT_TRUE(c.editing()) << c.output();
  c.type("Hi\r");
  ASSERT_TRUE(c.expect("Hi\r\n")) << c.output();
  ASSERT_TRUE(c.expect_more(8)) << c.output();
  c.type("\x03");
  ASSERT_TRUE(c.expect("[interrupted]")) << c.output();
  ASSERT_TRUE(c.expect("> ")) << c.output();
  ASSERT_TRUE(c.editing()) << c.output();
  c.type("\x03");
  EXPECT_EQ(c.exit_code(), 130) << c.output();
}

}  // namespace
}  // namespace ferry
