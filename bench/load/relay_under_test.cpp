#include "bench/load/relay_under_test.hpp"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/inotify.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>

namespace kvrelay::bench {
namespace {

constexpr auto kReadyTimeout = std::chrono::seconds(30);

pid_t spawn_logged(const std::string& binary, std::vector<std::string> args, const std::string& log_path) {
  const int log = open(log_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (log < 0) return -1;
  args.insert(args.begin(), binary);
  std::vector<char*> argv;  // built before the fork: the child of a threaded process must not allocate
  for (auto& arg : args) argv.push_back(arg.data());
  argv.push_back(nullptr);
  const pid_t parent = getpid();
  const pid_t pid = fork();
  if (pid == 0) {
    // A relay started here ends with this program, however it ends (a crash, a SIGTERM, a
    // cancelled CI job): it drains on the SIGTERM the kernel sends it.
    prctl(PR_SET_PDEATHSIG, SIGTERM);
    if (getppid() != parent) _exit(127);  // gone before the request took effect
    dup2(log, 1);
    dup2(log, 2);
    execv(argv[0], argv.data());
    _exit(127);
  }
  close(log);
  return pid;
}

// One string value of the ready file's flat JSON object.
std::string ready_value(const std::string& text, const std::string& key) {
  const std::string marker = "\"" + key + "\": \"";
  const auto start = text.find(marker);
  if (start == std::string::npos) return {};
  const auto from = start + marker.size();
  return text.substr(from, text.find('"', from) - from);
}

std::string read_file(const std::filesystem::path& path) {
  std::stringstream content;
  content << std::ifstream(path).rdbuf();
  return content.str();
}

// Waits, without polling the file system, until the relay renames its ready file into `dir`;
// fails early when the relay exits first. On failure the relay is gone (stopped and reaped).
std::expected<std::string, std::string> await_ready_file(pid_t pid, const std::filesystem::path& dir,
                                                         const std::filesystem::path& file) {
  const int watch = inotify_init1(IN_CLOEXEC);
  if (watch < 0 || inotify_add_watch(watch, dir.c_str(), IN_MOVED_TO | IN_CLOSE_WRITE) < 0) {
    return std::unexpected("inotify: cannot watch " + dir.string());
  }
  const auto deadline = std::chrono::steady_clock::now() + kReadyTimeout;
  std::expected<std::string, std::string> outcome = std::unexpected("the relay was not ready within 30 s");
  while (std::chrono::steady_clock::now() < deadline) {
    if (std::filesystem::exists(file)) {
      outcome = read_file(file);
      break;
    }
    int status = 0;
    if (waitpid(pid, &status, WNOHANG) == pid) {
      outcome = std::unexpected("the relay exited before it was ready (exit status " +
                                std::to_string(WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status)) + ")");
      break;
    }
    pollfd events{watch, POLLIN, 0};
    if (poll(&events, 1, 250) > 0) {
      char buffer[4096];
      [[maybe_unused]] const auto drained = read(watch, buffer, sizeof buffer);
    }
  }
  close(watch);
  if (!outcome && outcome.error().starts_with("the relay was not ready")) {
    kill(pid, SIGKILL);
    waitpid(pid, nullptr, 0);
  }
  return outcome;
}

}  // namespace

std::expected<RelayUnderTest, std::string> RelayUnderTest::start(const std::string& binary,
                                                                 const std::vector<std::string>& extra_args,
                                                                 const std::string& log_path) {
  char dir_template[] = "/tmp/kvrelay-bench-XXXXXX";
  if (mkdtemp(dir_template) == nullptr) return std::unexpected("cannot create a temporary directory");
  const std::filesystem::path dir(dir_template);
  const auto ready = dir / "ready.json";
  std::vector<std::string> args = {"--listen",     "127.0.0.1:0",  "--ingest-listen", "127.0.0.1:0",
                                   "--ready-file", ready.string(), "--dc-id",         "kvrelay-bench"};
  args.insert(args.end(), extra_args.begin(), extra_args.end());
  const pid_t pid = spawn_logged(binary, std::move(args), log_path);
  if (pid < 0) return std::unexpected("cannot start " + binary + " (log " + log_path + ")");
  const auto text = await_ready_file(pid, dir, ready);
  std::filesystem::remove_all(dir);
  if (!text) return std::unexpected(text.error() + "; its log: " + log_path);
  return RelayUnderTest(ready_value(*text, "wan"), ready_value(*text, "ingest"), pid, true);
}

RelayUnderTest RelayUnderTest::attach(std::string wan, std::string ingest, pid_t pid) {
  return RelayUnderTest(std::move(wan), std::move(ingest), pid, false);
}

RelayUnderTest::RelayUnderTest(RelayUnderTest&& other) noexcept
    : wan_(std::move(other.wan_)), ingest_(std::move(other.ingest_)), pid_(other.pid_), owned_(other.owned_) {
  other.owned_ = false;
}

RelayUnderTest::~RelayUnderTest() {
  if (!owned_) return;
  kill(pid_, SIGTERM);
  int status = 0;
  waitpid(pid_, &status, 0);
}

std::optional<ProcessUsage> RelayUnderTest::usage() const {
  if (pid_ <= 0) return std::nullopt;
  return process_usage(pid_);
}

}  // namespace kvrelay::bench
