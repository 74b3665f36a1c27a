#pragma once
// Child processes for the binary tests: spawn with merged stdout/stderr, read until a line
// appears, collect the exit code.
#include <catch2/catch.hpp>

#include <poll.h>
#include <signal.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>

#include <fstream>
#include <sstream>
#include <string>
#include <vector>

namespace kvrelay::test {

struct Child {
  pid_t pid = -1;
  int output = -1;  // stdout + stderr
};

inline Child spawn(const char* program, std::vector<std::string> args) {
  int pipe_fds[2];
  REQUIRE(pipe(pipe_fds) == 0);
  args.insert(args.begin(), program);
  const pid_t pid = fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    dup2(pipe_fds[1], 1);
    dup2(pipe_fds[1], 2);
    close(pipe_fds[0]);
    std::vector<char*> argv;
    for (auto& arg : args) argv.push_back(arg.data());
    argv.push_back(nullptr);
    execv(argv[0], argv.data());
    _exit(127);
  }
  close(pipe_fds[1]);
  return {pid, pipe_fds[0]};
}

// Every wait on a child is bounded: a child that never prints what a test waits for, or never
// exits, fails that test instead of hanging the suite.
inline constexpr std::chrono::seconds kChildDeadline{90};

// Reads the child's output until `needle` appears, the output ends or the deadline passes (a
// failed check); returns what was read.
inline std::string read_until(int fd, const std::string& needle) {
  const auto deadline = std::chrono::steady_clock::now() + kChildDeadline;
  std::string text;
  char buffer[4096];
  while (text.find(needle) == std::string::npos) {
    const auto left = std::chrono::ceil<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    pollfd readable{fd, POLLIN, 0};
    const int ready = left.count() > 0 ? poll(&readable, 1, static_cast<int>(left.count())) : 0;
    if (ready < 0 && errno == EINTR) continue;
    if (ready <= 0) {
      FAIL_CHECK("the child did not print '" << needle << "' within " << kChildDeadline.count() << " s; it printed:\n"
                                             << text);
      break;
    }
    const ssize_t n = read(fd, buffer, sizeof buffer);
    if (n <= 0) break;
    text.append(buffer, static_cast<std::size_t>(n));
  }
  return text;
}

inline Child spawn_relay(std::vector<std::string> args) { return spawn(KVRELAY_BINARY, std::move(args)); }

// The child's exit code (128 + the signal that ended it). A child still running at the deadline
// is killed and fails the test.
inline int wait_exit(pid_t pid) {
  const int exited = static_cast<int>(syscall(SYS_pidfd_open, pid, 0));
  REQUIRE(exited >= 0);
  pollfd done{exited, POLLIN, 0};
  int ready = 0;
  do {
    ready = poll(&done, 1, static_cast<int>(std::chrono::milliseconds(kChildDeadline).count()));
  } while (ready < 0 && errno == EINTR);
  close(exited);
  if (ready <= 0) kill(pid, SIGKILL);
  int status = 0;
  REQUIRE(waitpid(pid, &status, 0) == pid);
  if (ready <= 0) FAIL("the child did not exit within " << kChildDeadline.count() << " s: killed");
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

inline std::pair<std::string, int> run_to_end(const char* program, std::vector<std::string> args) {
  Child child = spawn(program, std::move(args));
  const std::string output = read_until(child.output, std::string(1, '\0'));  // until EOF
  close(child.output);
  return {output, wait_exit(child.pid)};
}

// One address ("wan", "ingest") from a relay's ready file.
inline std::string address_in(const std::string& ready_file, const std::string& key) {
  std::stringstream content;
  content << std::ifstream(ready_file).rdbuf();
  const std::string text = content.str();
  const std::string marker = "\"" + key + "\": \"";
  const auto start = text.find(marker) + marker.size();
  return text.substr(start, text.find('"', start) - start);
}
inline std::string wan_of(const std::string& ready_file) { return address_in(ready_file, "wan"); }

// The lines of `text` that contain every one of `words`.
inline std::size_t lines_with(const std::string& text, const std::vector<std::string>& words) {
  std::size_t count = 0;
  std::istringstream lines(text);
  for (std::string line; std::getline(lines, line);) {
    bool all = true;
    for (const auto& word : words) all = all && line.find(word) != std::string::npos;
    count += all ? 1 : 0;
  }
  return count;
}

}  // namespace kvrelay::test
