// kv-relay: the KV DC relay service.
#include <absl/synchronization/mutex.h>
#include <fmt/format.h>
#include <pthread.h>
#include <spdlog/spdlog.h>

#include <atomic>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <future>
#include <memory>
#include <optional>
#include <system_error>
#include <thread>

#include "app/log_format.hpp"
#include "app/options.hpp"
#include "app/relay_runtime.hpp"
#include "core/build_info.hpp"
#include "ingest/demo_workload.hpp"
#include "ingest/topology_file.hpp"

namespace {

constexpr int kBadConfiguration = 2;
constexpr int kCoreFailure = 3;  // a core actor failed: the orchestrator should restart the relay

int fail(const std::string& message) {
  std::fprintf(stderr, "kv-relay: %s\n", message.c_str());
  return kBadConfiguration;
}

// Written to a temporary name and renamed, so a reader never sees half a file.
bool write_ready_file(const std::string& path, const kvrelay::RelayRuntime& relay, const std::string& metrics) {
  const std::string temporary = path + ".tmp";
  std::error_code error;
  std::ofstream out(temporary);
  out << "{\"wan\": \"" << relay.wan_address() << "\", \"ingest\": \"" << relay.ingest_address()
      << "\", \"metrics\": " << (metrics.empty() ? "null" : "\"" + metrics + "\"") << "}\n";
  out.close();  // all of it written, before the file has its name
  if (out) std::filesystem::rename(temporary, path, error);
  if (!out || error) {
    std::filesystem::remove(temporary, error);
    return false;
  }
  return true;
}

// The ready file exists only while the relay serves: a previous run's goes before this one
// starts (a restarted container keeps its emptyDir), and this run's as its drain begins.
void remove_ready_file(const std::optional<std::string>& path) {
  std::error_code ignored;  // absent already, or nothing this run could do about it
  if (path) std::filesystem::remove(*path, ignored);
}

// A second signal ends the process whatever its log does. The warning is written on a thread of
// its own and the process exits once it is flushed, or after a second at most: a full stdout
// that nobody reads blocks every write to it, and the drain may be blocked in one holding the
// sink's lock. Flushed, not shut down: other threads may be logging at this moment (streams
// ending in the drain), and spdlog::shutdown() would free the logger under them.
[[noreturn]] void exit_at_once(const char* signal_name, int received) {
  auto logged = std::make_shared<std::promise<void>>();
  std::future<void> flushed = logged->get_future();
  try {
    std::thread([signal_name, logged] {
      spdlog::warn("{} received again while draining: exiting now", signal_name);
      spdlog::default_logger()->flush();
      logged->set_value();
    }).detach();
    flushed.wait_for(std::chrono::seconds(1));
  } catch (const std::system_error&) {  // no thread to be had (a pids limit): exit unlogged
  }
  std::_Exit(128 + received);
}

}  // namespace

int main(int argc, char** argv) {
  // Debian's abseil checks every Mutex acquisition, gRPC's included, for lock-order cycles:
  // about 1 % of the relay's CPU under fan-out load (docs/benchmarks.md). kv-relay's own
  // locking is checked at build time instead (clang -Wthread-safety, tests/thread_safety/).
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
  spdlog::set_formatter(kvrelay::one_line_formatter());
  auto options = kvrelay::parse_options({argv + 1, argv + argc}, kvrelay::process_environment());
  if (!options) return fail(options.error());
  if (options->help) {
    std::fputs(kvrelay::usage().c_str(), stdout);
    return 0;
  }
  if (options->version) {
    fmt::print("{}\n", kvrelay::version_line("kv-relay"));
    return 0;
  }
  spdlog::set_level(spdlog::level::from_str(options->log_level));
  if (options->topology_path) {
    auto topology = kvrelay::load_topology_file(*options->topology_path);
    if (!topology) return fail("--topology: " + topology.error());
    options->relay.topology = std::move(*topology);
  }

  // A peer that hangs up (or a closed pipe on stdout) fails that write with EPIPE, never ends
  // the relay, whichever library writes (core/sigpipe_blocked.hpp covers the HTTP code in every
  // other process).
  std::signal(SIGPIPE, SIG_IGN);

  // Every thread started from here on inherits the mask; the main thread waits for the signal.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGTERM);
  sigaddset(&stop_signals, SIGINT);
  sigaddset(&stop_signals, SIGHUP);  // a closed terminal: the relay has nothing to reload
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);

  // The demo's engines come up first, as real engines would be running before their relay.
  std::unique_ptr<kvrelay::DemoWorkload> demo;
  if (options->demo) {
    kvrelay::DemoOptions demo_options;
    demo_options.topology = options->relay.topology.value_or(kvrelay::ingest::v1::TopologyFile{});
    demo_options.events_per_second = options->demo_events_per_second;
    demo = std::make_unique<kvrelay::DemoWorkload>(std::move(demo_options));
    demo->start();
  }

  if (options->metrics_listen != "off") options->relay.metrics_listen = options->metrics_listen;
  remove_ready_file(options->ready_file);
  using Crash = kvrelay::AppOptions::CrashMembership;
  options->relay.crash_membership_at_start_for_test = options->crash_membership_for_test == Crash::at_start;
  auto relay = kvrelay::RelayRuntime::start(options->relay);
  if (!relay && relay.error().core_failure) {
    spdlog::critical("the relay did not start: {}", relay.error().message);
    return kCoreFailure;
  }
  if (!relay) return fail(relay.error().message);
  // The demo's engines outlive the drain, as a fleet's would: closing them first disconnected
  // every source mid-drain, and its pool with it.
  auto stop_relay = [&](std::optional<std::chrono::milliseconds> drain) {
    if (demo) demo->stop_traffic();
    (*relay)->shutdown(drain);
    if (demo) demo->stop();
  };
  const std::string& metrics = (*relay)->metrics_address();
  if (options->ready_file && !write_ready_file(*options->ready_file, **relay, metrics)) {
    // Nothing has been told the relay is up: it stops at once, with no drain to wait out.
    stop_relay(std::chrono::milliseconds(0));
    return fail("--ready-file: cannot write " + *options->ready_file);
  }
  spdlog::info("ready: wan={} ingest={} metrics={}", (*relay)->wan_address(), (*relay)->ingest_address(),
               metrics.empty() ? "off" : metrics);
  if (demo) demo->report_serving_load_to((*relay)->ingest_address(), options->relay.ingest_token_file);

  // A signal asks the relay to stop; so does a core actor's failure (the supervisor). A second
  // signal while it drains ends the process at once, as an impatient operator's second Ctrl-C
  // expects. The thread is joined before the runtime goes: main wakes it with a signal of its own.
  std::atomic<bool> exiting{false};
  std::thread signal_waiter([&stop_signals, &exiting, runtime = relay->get()] {
    for (bool asked = false;;) {
      int received = 0;
      sigwait(&stop_signals, &received);
      if (exiting) return;
      const char* name = received == SIGTERM ? "SIGTERM" : received == SIGINT ? "SIGINT" : "SIGHUP";
      if (asked) exit_at_once(name, received);
      asked = true;
      runtime->request_stop(fmt::format("{} received", name));
    }
  });
  if (options->crash_membership_for_test == Crash::when_ready) (*relay)->crash_membership_for_test();

  std::optional<kvrelay::RelayRuntime::StopReason> stop;
  while (!(stop = (*relay)->wait_for_stop(std::chrono::hours(1)))) {
  }
  if (stop->failed) {
    spdlog::critical("stopping after a failure: {}", stop->why);
  } else {
    spdlog::info("{}: draining", stop->why);
  }
  remove_ready_file(options->ready_file);
  stop_relay(std::nullopt);
  exiting = true;
  pthread_kill(signal_waiter.native_handle(), SIGTERM);
  signal_waiter.join();
  // Read again: a core actor that failed after the signal woke main, before the drain told the
  // supervisor to expect exits, still makes this a failed stop.
  stop = (*relay)->wait_for_stop(std::chrono::milliseconds(0));
  return stop->failed ? kCoreFailure : 0;
}
