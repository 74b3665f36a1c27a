#pragma once
// The Python fake vLLM engine (tools/fake_engine.py) as a child process: its stdin takes one
// JSON command per line and its stdout answers each with one line, so a test drives every
// batch, gap and restart and awaits each answer.
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <optional>
#include <string>
#include <vector>

namespace kvrelay::test {

class FakeEngineProcess {
 public:
  explicit FakeEngineProcess(std::vector<std::string> args) {
    // Close-on-exec: a later child (another engine, a relay) must not hold this one's stdin
    // open, or stopping this engine (closing its stdin) would never reach it.
    int to_child[2], from_child[2];
    REQUIRE(pipe2(to_child, O_CLOEXEC) == 0);
    REQUIRE(pipe2(from_child, O_CLOEXEC) == 0);
    args.insert(args.begin(), {"/usr/bin/python3", KVRELAY_FAKE_ENGINE});
    pid_ = fork();
    REQUIRE(pid_ >= 0);
    if (pid_ == 0) {
      dup2(to_child[0], 0);
      dup2(from_child[1], 1);
      close(to_child[1]);
      close(from_child[0]);
      std::vector<char*> argv;
      for (auto& arg : args) argv.push_back(arg.data());
      argv.push_back(nullptr);
      execv(argv[0], argv.data());
      _exit(127);
    }
    close(to_child[0]);
    close(from_child[1]);
    input_ = fdopen(to_child[1], "w");
    output_ = fdopen(from_child[0], "r");
    const std::string ready = line();
    INFO(ready);
    REQUIRE(ready.starts_with("ready "));
    pub_ = field(ready, "pub");
    replay_ = field(ready, "replay");
    metrics_ = field(ready, "metrics");
  }

  ~FakeEngineProcess() { stop(); }
  FakeEngineProcess(const FakeEngineProcess&) = delete;
  FakeEngineProcess& operator=(const FakeEngineProcess&) = delete;

  const std::string& pub() const { return pub_; }
  const std::string& replay() const { return replay_; }  // "-" without --replay
  const std::string& metrics() const { return metrics_; }

  // One command; REQUIREs an "ok" answer and returns it.
  std::string command(const nlohmann::json& command) {
    REQUIRE(input_ != nullptr);
    const std::string text = command.dump() + "\n";
    REQUIRE(std::fputs(text.c_str(), input_) >= 0);
    REQUIRE(std::fflush(input_) == 0);
    std::string answer = line();
    INFO(command.dump() + " -> " + answer);
    REQUIRE(answer.starts_with("ok"));
    return answer;
  }

  // Publishes one batch of events (for another dp rank than its own, if given); returns its seq.
  std::uint64_t batch(const nlohmann::json& events, std::optional<int> dp_rank = std::nullopt) {
    nlohmann::json request = {{"op", "batch"}, {"events", events}};
    if (dp_rank) request["dp_rank"] = *dp_rank;
    return seq_of(command(request));
  }

  // The seq an "ok seq=<n>" answer names.
  static std::uint64_t seq_of(const std::string& answer) { return std::stoull(field(answer, "seq")); }

  void await_subscribers(int count) { command({{"op", "await_subscribers"}, {"count", count}, {"timeout_ms", 30000}}); }
  // Until `count` subscriptions have been made since the engine started, reconnections' included.
  void await_subscriptions_made(int count) {
    command({{"op", "await_subscribers"}, {"count", count}, {"timeout_ms", 30000}, {"ever", true}});
  }

  // Ends the process as a crash would (its sockets close).
  void kill_now() {
    if (pid_ <= 0) return;
    ::kill(pid_, SIGKILL);
    reap();
  }

  void stop() {
    if (pid_ <= 0) return;
    if (input_ != nullptr) std::fclose(input_);  // end of stdin: the engine exits
    input_ = nullptr;
    reap();
  }

 private:
  void reap() {
    int status = 0;
    waitpid(pid_, &status, 0);
    pid_ = -1;
    if (input_ != nullptr) std::fclose(input_);
    input_ = nullptr;
    if (output_ != nullptr) std::fclose(output_);
    output_ = nullptr;
  }

  std::string line() {
    std::string text;
    for (int c; (c = std::fgetc(output_)) != EOF && c != '\n';) text.push_back(static_cast<char>(c));
    return text;
  }

  static std::string field(const std::string& line, const std::string& key) {
    const auto start = line.find(key + "=");
    if (start == std::string::npos) return "";
    const auto from = start + key.size() + 1;
    return line.substr(from, line.find(' ', from) - from);
  }

  pid_t pid_ = -1;
  FILE* input_ = nullptr;
  FILE* output_ = nullptr;
  std::string pub_, replay_, metrics_;
};

}  // namespace kvrelay::test
