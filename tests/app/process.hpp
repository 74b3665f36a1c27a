#pragma once
// Child processes for the binary tests: spawn with merged stdout/stderr, read until a line
// appears, collect the exit code.
#include <catch2/catch.hpp>

#include <sys/wait.h>
#include <unistd.h>

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

// Reads the child's output until `needle` appears (or the output ends); returns what was read.
inline std::string read_until(int fd, const std::string& needle) {
  std::string text;
  char buffer[4096];
  while (text.find(needle) == std::string::npos) {
    const ssize_t n = read(fd, buffer, sizeof buffer);
    if (n <= 0) break;
    text.append(buffer, static_cast<std::size_t>(n));
  }
  return text;
}

inline Child spawn_relay(std::vector<std::string> args) { return spawn(KVRELAY_BINARY, std::move(args)); }

inline int wait_exit(pid_t pid) {
  int status = 0;
  REQUIRE(waitpid(pid, &status, 0) == pid);
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
