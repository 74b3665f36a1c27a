#pragma once
// Child processes for the binary tests: spawn with merged stdout/stderr, read until a line
// appears, collect the exit code.
#include <catch2/catch.hpp>

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <fstream>
#include <mutex>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

namespace kvrelay::test {

struct Child {
  pid_t pid = -1;
  int output = -1;  // stdout + stderr
};

inline Child spawn(const char* program, std::vector<std::string> args) {
  int pipe_fds[2];
  REQUIRE(pipe2(pipe_fds, O_CLOEXEC) == 0);  // no later child inherits this one's output
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

// Waits until `fd` is readable or `deadline` passes: poll's result (1, 0 at the deadline, or
// -1 on an error other than an interruption).
inline int poll_until(int fd, std::chrono::steady_clock::time_point deadline) noexcept {
  pollfd readable{fd, POLLIN, 0};
  for (;;) {
    const auto left = std::chrono::ceil<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) return 0;
    const int ready = poll(&readable, 1, static_cast<int>(left.count()));
    if (ready >= 0 || errno != EINTR) return ready;
  }
}

// Reads the child's output until `needle` appears, the output ends or the deadline passes (a
// failed check); returns what was read.
inline std::string read_until(int fd, const std::string& needle) {
  const auto deadline = std::chrono::steady_clock::now() + kChildDeadline;
  std::string text;
  char buffer[4096];
  while (text.find(needle) == std::string::npos) {
    const int ready = poll_until(fd, deadline);
    if (ready < 0) {
      FAIL_CHECK("reading the child's output failed: errno " << errno);
      break;
    }
    if (ready == 0) {
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

// How a child ended: its exit code (128 + the signal that ended it; -1 if it could not be
// reaped), and whether it was killed for still running at the deadline.
struct Exit {
  int code = -1;
  bool killed_at_deadline = false;
};

// Waits for the child until the deadline, then kills it; reaps it either way. Never throws, so
// that a destructor may call it.
inline Exit reap(pid_t pid) noexcept {
  Exit exit;
  const int handle = static_cast<int>(syscall(SYS_pidfd_open, pid, 0));
  if (handle >= 0) {  // without pidfds (Linux before 5.3) the wait below has no deadline
    const int ready = poll_until(handle, std::chrono::steady_clock::now() + kChildDeadline);
    close(handle);
    if (ready <= 0) {
      kill(pid, SIGKILL);
      exit.killed_at_deadline = true;
    }
  }
  int status = 0;
  if (waitpid(pid, &status, 0) == pid) exit.code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return exit;
}

// The child's exit code; a child still running at the deadline is killed and fails the test.
inline int wait_exit(pid_t pid) {
  const Exit exit = reap(pid);
  if (exit.killed_at_deadline) FAIL("the child did not exit within " << kChildDeadline.count() << " s: killed");
  return exit.code;
}

inline std::pair<std::string, int> run_to_end(const char* program, std::vector<std::string> args) {
  Child child = spawn(program, std::move(args));
  const std::string output = read_until(child.output, std::string(1, '\0'));  // until EOF
  close(child.output);
  return {output, wait_exit(child.pid)};
}

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

// One address ("wan", "ingest", "metrics") from a relay's ready file.
inline std::string address_in(const std::string& ready_file, const std::string& key) {
  std::stringstream content;
  content << std::ifstream(ready_file).rdbuf();
  const std::string text = content.str();
  const std::string marker = "\"" + key + "\": \"";
  const auto start = text.find(marker) + marker.size();
  return text.substr(start, text.find('"', start) - start);
}

// A kv-relay process on loopback listeners, up once it has said so. Its output after that is
// read as it comes, kept for wait_for_output and copied into a file: a pipe nobody reads fills
// at 64 KiB and then blocks every thread of the relay that logs. Stopped with SIGTERM and
// reaped when it goes, unless the test stopped it, however the test ends.
class RelayChild {
 public:
  // `name` keeps its files apart from another test's; `args` (--dc-id and --metrics-listen
  // among them), then a test's `extra_args`, follow the WAN and ingest listeners and the ready
  // file.
  RelayChild(const std::string& name, std::vector<std::string> args, const std::vector<std::string>& extra_args = {})
      : ready_(std::string(KVRELAY_TEST_TMP_DIR) + "/" + name + ".ready"),
        log_path_(std::string(KVRELAY_TEST_TMP_DIR) + "/" + name + ".log") {
    unlink(ready_.c_str());
    args.insert(args.begin(), {"--listen", "127.0.0.1:0", "--ingest-listen", "127.0.0.1:0", "--ready-file", ready_});
    args.insert(args.end(), extra_args.begin(), extra_args.end());
    child_ = spawn_relay(std::move(args));
    output_ = read_until(child_.output, "ready: ");
    if (output_.find("ready: ") == std::string::npos) {
      stop();
      close(child_.output);
      FAIL("kv-relay did not start:\n" << output_);
    }
    log_reader_ = std::thread([this] { copy_output(); });
  }
  ~RelayChild() {
    stop();
    log_reader_.join();  // the output ended with the process
    close(child_.output);
  }
  RelayChild(const RelayChild&) = delete;
  RelayChild& operator=(const RelayChild&) = delete;

  // `signal` (SIGTERM: a drain), then the exit code; the same code when asked again. A relay
  // the test stopped (SIGSTOP) is continued, so that it can act on it. Never throws (the
  // destructor calls it).
  int stop(int signal = SIGTERM) {
    if (!exit_code_) {
      kill(child_.pid, signal);
      kill(child_.pid, SIGCONT);
      const Exit exit = reap(child_.pid);
      exit_code_ = exit.code;
      if (exit.killed_at_deadline)
        FAIL_CHECK("kv-relay did not exit within " << kChildDeadline.count() << " s: killed");
    }
    return *exit_code_;
  }
  // The relay's output once it holds `needle`, or once it ended (a failed check, as at the
  // deadline).
  std::string wait_for_output(const std::string& needle) {
    std::unique_lock lock(output_mutex_);
    const bool found = output_grew_.wait_until(lock, std::chrono::steady_clock::now() + kChildDeadline, [&] {
      return output_.find(needle) != std::string::npos || output_ended_;
    }) && output_.find(needle) != std::string::npos;
    if (!found) FAIL_CHECK("kv-relay did not print '" << needle << "'; it printed:\n" << output_);
    return output_;
  }
  pid_t pid() const { return child_.pid; }
  std::string address(const std::string& key) const { return address_in(ready_, key); }
  const std::string& ready_file() const { return ready_; }
  const std::string& log_path() const { return log_path_; }

 private:
  void copy_output() {
    std::ofstream log(log_path_);
    log << output_;
    char buffer[4096];
    for (ssize_t n; (n = read(child_.output, buffer, sizeof buffer)) > 0;) {
      log.write(buffer, n).flush();
      std::lock_guard lock(output_mutex_);
      output_.append(buffer, static_cast<std::size_t>(n));
      output_grew_.notify_all();
    }
    std::lock_guard lock(output_mutex_);
    output_ended_ = true;
    output_grew_.notify_all();
  }

  Child child_;
  std::string ready_, log_path_;
  std::optional<int> exit_code_;
  std::mutex output_mutex_;
  std::condition_variable output_grew_;
  std::string output_;  // all the relay printed so far
  bool output_ended_ = false;
  std::thread log_reader_;
};

// Writes `content` to `name` in the test build's scratch folder and returns its path.
inline std::string write_file(const std::string& name, const std::string& content) {
  const std::string path = std::string(KVRELAY_TEST_TMP_DIR) + "/" + name;
  std::ofstream(path, std::ios::binary) << content;
  return path;
}

}  // namespace kvrelay::test
