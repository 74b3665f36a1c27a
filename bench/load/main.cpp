// kvrelay-bench: a load generator for one kv-relay process. N sources (pushed over gRPC, or
// fake vLLM engines on ZeroMQ) feed KV events at a target rate, M consumer-library routers replicate every pool over
// real gRPC, and each run prints one row: event-to-replica latency, deltas received, lagged streams, and the relay's
// own CPU and resident memory (its pid's CPU clock, and /proc/PID/status). Lists of rates and consumer counts make
// a sweep, one fresh relay per run. docs/benchmarks.md#the-load-generator-issue-15 says how
// each column is measured.
#include <absl/synchronization/mutex.h>
#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "bench/load/consumer_fleet.hpp"
#include "bench/load/raw_fleet.hpp"
#include "bench/load/relay_under_test.hpp"
#include "bench/load/sources.hpp"
#include "core/bearer_token.hpp"
#include "core/quantile.hpp"

using namespace kvrelay::bench;

namespace {

constexpr const char* kUsage = R"(usage: kvrelay-bench [options]
Starts kv-relay on loopback (or attaches to one), feeds it, replicates it, prints one row per run.

  --rate LIST             block stores/s, all sources together (default 100000)
  --consumers LIST        consumer-library routers (default 64)
  --sources N             sources, one worker each (default 1)
  --transport push|zmq    push: PublishKvEvents streams; zmq: fake vLLM engines the relay
                          subscribes to (on 127.0.0.1: the relay must run on this machine)
  --pools N               pools the sources are spread over (default 1)
  --duration S            measured seconds per run (default 10)
  --warmup S              unmeasured seconds before each run (default 1)
  --live-blocks N         blocks each source holds before it removes its oldest (default 65536)
  --relay-binary PATH     the kv-relay to start (default: kv-relay beside this program)
  --relay-arg ARG         one more flag for the started relay (repeatable)
  --relay-log FILE        the started relay's output (default /tmp/kvrelay-bench-relay.log)
  --target ADDR --ingest ADDR [--relay-pid PID]
                          drive a running relay instead (WAN and ingest addresses; with its
                          pid, its CPU and memory are read too)
  --ingest-token-file F   the relay's ingest bearer token
  --baseline              after each run, kvrelay-raw-server (beside this program) streams frames
                          of the run's mean delta size at its delta rate to as many plain gRPC
                          clients: the transport's own cost, one more row
LIST is one value or several separated by commas: every rate runs with every consumer count.
)";

struct Options {
  std::vector<double> rates{100'000};
  std::vector<std::size_t> consumers{64};
  LoadShape shape;
  double duration_s = 10;
  double warmup_s = 1;
  std::string relay_binary;
  std::vector<std::string> relay_args;
  std::string relay_log = "/tmp/kvrelay-bench-relay.log";
  std::string target, ingest;
  pid_t relay_pid = 0;
  std::optional<std::string> token;
  bool baseline = false;
};

// `text` as a whole number (or, for double, a finite decimal) in [min, max]; anything else
// names the flag: "100k" is not 100 000 stores/s, and "-1" is not a huge count.
template <class T>
T number_of(const std::string& flag, const std::string& text, T min, T max) {
  T value{};
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (text.empty() || error != std::errc{} || end != text.data() + text.size() || !std::isfinite(double(value)) ||
      value < min || value > max) {
    throw std::invalid_argument(fmt::format("{} takes a number from {} to {}, not '{}'", flag, min, max, text));
  }
  return value;
}

template <class T>
std::vector<T> list_of(const std::string& flag, const std::string& text, T min, T max) {
  std::vector<T> values;
  std::stringstream items(text);
  for (std::string item; std::getline(items, item, ',');) values.push_back(number_of<T>(flag, item, min, max));
  return values;
}

Transport transport_of(const std::string& name) {
  if (name == "push") return Transport::kPush;
  if (name == "zmq") return Transport::kZmq;
  throw std::invalid_argument("--transport is push or zmq, not " + name);
}

std::string beside_this_program(const std::string& name) {
  return (std::filesystem::read_symlink("/proc/self/exe").parent_path() / name).string();
}

std::optional<Options> parse(int argc, char** argv) {
  Options o;
  o.relay_binary = beside_this_program("kv-relay");
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    if (flag == "--help" || flag == "-h") return std::nullopt;
    if (flag == "--baseline") {
      o.baseline = true;
      continue;
    }
    if (i + 1 >= argc) throw std::invalid_argument(flag + " needs a value");
    const std::string value = argv[++i];
    if (flag == "--rate")
      o.rates = list_of<double>(flag, value, 1, 1e9);
    else if (flag == "--consumers")
      o.consumers = list_of<std::size_t>(flag, value, 1, 100'000);
    else if (flag == "--sources")
      o.shape.sources = number_of<std::size_t>(flag, value, 1, 100'000);
    else if (flag == "--transport")
      o.shape.transport = transport_of(value);
    else if (flag == "--pools")
      o.shape.pools = number_of<std::size_t>(flag, value, 1, 100'000);
    else if (flag == "--duration")
      o.duration_s = number_of<double>(flag, value, 0.1, 86'400);
    else if (flag == "--warmup")
      o.warmup_s = number_of<double>(flag, value, 0, 86'400);
    else if (flag == "--live-blocks")
      o.shape.live_blocks = number_of<std::size_t>(flag, value, 1, std::size_t{1} << 32);
    else if (flag == "--relay-binary")
      o.relay_binary = value;
    else if (flag == "--relay-arg")
      o.relay_args.push_back(value);
    else if (flag == "--relay-log")
      o.relay_log = value;
    else if (flag == "--target")
      o.target = value;
    else if (flag == "--ingest")
      o.ingest = value;
    else if (flag == "--relay-pid")
      o.relay_pid = number_of<pid_t>(flag, value, 1, std::numeric_limits<pid_t>::max());
    else if (flag == "--ingest-token-file") {
      std::stringstream content;
      content << std::ifstream(value).rdbuf();
      auto token = kvrelay::bearer::token_of_file(content.str());
      if (!token) throw std::invalid_argument("--ingest-token-file " + value + " " + token.error());
      o.token = std::move(*token);
    } else {
      throw std::invalid_argument("unknown flag " + flag);
    }
  }
  if (o.target.empty() != o.ingest.empty()) throw std::invalid_argument("--target and --ingest go together");
  if (o.shape.pools > o.shape.sources) throw std::invalid_argument("--pools must be between 1 and --sources");
  if (o.rates.empty() || o.consumers.empty()) throw std::invalid_argument("--rate and --consumers need a value");
  return o;
}

// A started relay admits every consumer's streams, with room for each to reconnect once, as
// docs/operations.md#cpu-and-streams sizes them; --relay-arg flags come last and win.
std::expected<RelayUnderTest, std::string> relay_for_run(const Options& o, std::size_t consumers) {
  if (!o.target.empty()) return RelayUnderTest::attach(o.target, o.ingest, o.relay_pid);
  const std::string per_kind = std::to_string(2 * consumers);
  const std::string pool_streams = std::to_string(2 * consumers * o.shape.pools);
  std::vector<std::string> args = {"--metrics-listen",
                                   "off",
                                   "--log-level",
                                   "warn",
                                   "--max-catalog-subscribers",
                                   per_kind,
                                   "--max-readiness-subscribers",
                                   per_kind,
                                   "--max-load-subscribers",
                                   per_kind,
                                   "--max-serving-load-subscribers",
                                   per_kind,
                                   "--max-subscribers-per-pool",
                                   per_kind,
                                   "--max-pool-streams-total",
                                   pool_streams};
  args.insert(args.end(), o.relay_args.begin(), o.relay_args.end());
  return RelayUnderTest::start(o.relay_binary, args, o.relay_log);
}

// A process's usage at the start and at the end of the measured seconds.
struct UsageSpan {
  std::optional<ProcessUsage> before, after;
  bool known() const { return before && after; }
  double cpu_seconds() const { return after->cpu_seconds - before->cpu_seconds; }
};

struct RunFigures {
  double stores_per_second = 0;
  FleetTotals fleet;
  SourceTotals sources;
  UsageSpan relay;  // the relay, or the raw server of a baseline row
  UsageSpan bench;  // this process: the sources and every consumer
  double seconds = 0;
};

// The measured seconds: both processes' usage around them, and a progress line each second
// when a person is watching (`frames` counts the deltas all consumers, or the baseline's clients,
// took so far; the CPU is the server's: the relay's, or the raw server's).
void measure(const Options& o, const RelayUnderTest& relay, const std::function<std::uint64_t()>& frames,
             RunFigures& figures) {
  figures.relay.before = relay.usage();
  figures.bench.before = process_usage(getpid());
  const auto start = Clock::now();
  for (double elapsed = 0; elapsed < o.duration_s;) {
    std::this_thread::sleep_until(start +
                                  std::chrono::duration<double>(std::min(o.duration_s, std::floor(elapsed) + 1)));
    elapsed = std::chrono::duration<double>(Clock::now() - start).count();
    const auto usage = relay.usage();
    if (!isatty(STDERR_FILENO) || !usage || !figures.relay.before) continue;
    std::fprintf(stderr, "\r  %4.0f/%.0f s  %8.1f k deltas/s (all consumers)  server CPU %5.1f %%   ", elapsed,
                 o.duration_s, static_cast<double>(frames()) / elapsed / 1e3,
                 100 * (usage->cpu_seconds - figures.relay.before->cpu_seconds) / elapsed);
  }
  figures.relay.after = relay.usage();
  figures.bench.after = process_usage(getpid());
  figures.seconds = std::chrono::duration<double>(Clock::now() - start).count();
  if (isatty(STDERR_FILENO)) std::fputs("\r\033[K", stderr);
}

std::expected<RunFigures, std::string> run_once(const Options& o, double rate, std::size_t consumers,
                                                std::uint64_t epoch) {
  auto relay = relay_for_run(o, consumers);
  if (!relay) return std::unexpected(relay.error());
  LoadShape shape = o.shape;
  shape.stores_per_second = rate;
  auto sources = Sources::declare(relay->ingest_address(), o.token, shape);
  if (!sources) return std::unexpected(sources.error());
  ConsumerFleet fleet(relay->wan_address(), consumers);
  if (!fleet.await_installed(shape.pools, std::chrono::seconds(60))) {
    return std::unexpected("the consumers did not all install every pool within 60 s: " +
                           fleet.install_problem(shape.pools));
  }
  std::atomic<bool> stop{false};
  std::atomic<std::uint64_t> stores{0};
  RunFigures figures;
  std::thread writer([&] {
    figures.sources = sources->run(
        epoch, stop, [&](const Probe& p) { fleet.expect(p); }, stores);
  });
  std::this_thread::sleep_for(std::chrono::duration<double>(o.warmup_s));
  fleet.start_measuring();
  const std::uint64_t stores_at_start = stores.load();
  measure(
      o, *relay, [&] { return fleet.deltas_so_far(); }, figures);
  fleet.end_window();
  figures.stores_per_second = static_cast<double>(stores.load() - stores_at_start) / figures.seconds;
  stop = true;
  writer.join();
  figures.fleet = fleet.finish(std::chrono::seconds(2));
  return figures;
}

// The transport's own limit beside a relay run: kvrelay-raw-server streams frames of the run's
// mean delta size, at the rate each consumer received deltas, to as many plain gRPC clients.
std::expected<RunFigures, std::string> run_baseline(const Options& o, std::size_t consumers,
                                                    const RunFigures& relay_run) {
  if (relay_run.fleet.deltas == 0) return std::unexpected("the relay run received no deltas to imitate");
  const double per_consumer =
      static_cast<double>(relay_run.fleet.deltas) / relay_run.seconds / static_cast<double>(consumers);
  const auto payload = relay_run.fleet.delta_bytes / relay_run.fleet.deltas;
  const auto interval_us = static_cast<std::uint64_t>(1e6 / per_consumer);
  auto server = RelayUnderTest::start(
      beside_this_program("kvrelay-raw-server"),
      {"--payload-bytes", std::to_string(payload), "--interval-us", std::to_string(interval_us)}, o.relay_log);
  if (!server) return std::unexpected("kvrelay-raw-server: " + server.error());
  RawFleet fleet(server->wan_address(), consumers);
  if (!fleet.await_flowing(std::chrono::seconds(30))) {
    return std::unexpected("kvrelay-raw-server: not every client received a frame within 30 s");
  }
  std::this_thread::sleep_for(std::chrono::duration<double>(o.warmup_s));
  fleet.start_measuring();
  RunFigures figures;
  measure(
      o, *server, [&] { return fleet.frames_so_far(); }, figures);
  figures.fleet = fleet.finish();
  return figures;
}

// The first three cells of a row: what was sent, and by whom.
struct RowLabel {
  std::string target, sent, sources;
};

RowLabel relay_label(const Options& o, double rate, const RunFigures& f) {
  return {
      fmt::format("{:.0f} k", rate / 1e3), fmt::format("{:.1f} k", f.stores_per_second / 1e3),
      fmt::format("{} {} / {}", o.shape.sources, o.shape.transport == Transport::kZmq ? "zmq" : "push", o.shape.pools)};
}

void print_row(const RowLabel& label, std::size_t consumers, const RunFigures& f) {
  const auto& l = f.fleet.latencies_ms;
  const double deltas_per_consumer = static_cast<double>(f.fleet.deltas) / f.seconds / static_cast<double>(consumers);
  std::string cpu = "n/a", cpu_per_frame = "n/a", resident = "n/a", bench_cpu = "n/a";
  if (f.relay.known()) {
    const double cpu_s = f.relay.cpu_seconds();
    cpu = fmt::format("{:.0f} %", 100 * cpu_s / f.seconds);
    if (f.fleet.deltas > 0) cpu_per_frame = fmt::format("{:.1f}", 1e6 * cpu_s / static_cast<double>(f.fleet.deltas));
    resident = fmt::format("{:.0f}", static_cast<double>(f.relay.after->resident_bytes) / (1 << 20));
  }
  if (f.bench.known()) bench_cpu = fmt::format("{:.0f} %", 100 * f.bench.cpu_seconds() / f.seconds);
  fmt::print("| {} | {} | {} | {} | {:.2f} | {:.2f} | {:.2f} | {} | {} | {:.0f} | {} | {} | {} | {} | {} |\n",
             label.target, label.sent, label.sources, consumers, kvrelay::nearest_rank_quantile(l, 0.5),
             kvrelay::nearest_rank_quantile(l, 0.99), kvrelay::nearest_rank_quantile(l, 0.999), l.size(),
             f.fleet.probes_unseen, deltas_per_consumer, f.fleet.lagged_streams, cpu, cpu_per_frame, resident,
             bench_cpu);
  std::fflush(stdout);
  if (!f.sources.failure.empty() || f.sources.batches_rejected > 0) {
    std::fprintf(stderr, "kvrelay-bench: %llu batches rejected; %s\n",
                 static_cast<unsigned long long>(f.sources.batches_rejected), f.sources.failure.c_str());
  }
}

// One relay run and, with --baseline, the raw server imitating it; false when a run failed.
bool run_and_print(const Options& o, double rate, std::size_t consumers, std::uint64_t epoch) {
  const auto figures = run_once(o, rate, consumers, epoch);
  if (!figures) {
    std::fprintf(stderr, "kvrelay-bench: %.0f stores/s, %zu consumers: %s\n", rate, consumers, figures.error().c_str());
    return false;
  }
  print_row(relay_label(o, rate, *figures), consumers, *figures);
  if (!o.baseline) return true;
  const auto baseline = run_baseline(o, consumers, *figures);
  if (!baseline) {
    std::fprintf(stderr, "kvrelay-bench: baseline of %.0f stores/s, %zu consumers: %s\n", rate, consumers,
                 baseline.error().c_str());
    return false;
  }
  const auto bytes = figures->fleet.delta_bytes / std::max<std::uint64_t>(1, figures->fleet.deltas);
  print_row({"raw gRPC", fmt::format("{} B frames", bytes), "kvrelay-raw-server"}, consumers, *baseline);
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  // As in kv-relay: Debian's abseil checks every Mutex acquisition (gRPC's included) for
  // lock-order cycles, CPU the consumers here would take from the relay they share a host with.
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
  std::optional<Options> options;
  try {
    options = parse(argc, argv);
  } catch (const std::exception& error) {
    std::fprintf(stderr, "kvrelay-bench: %s\n%s", error.what(), kUsage);
    return 2;
  }
  if (!options) {
    std::fputs(kUsage, stdout);
    return 0;
  }
  fmt::print(
      "| Target | Sent | Sources / pools | Consumers | p50 ms | p99 ms | p999 ms | Timed | Unseen | Deltas/s per "
      "consumer | Lagged streams | Relay CPU | Relay CPU µs per delta | Relay RSS MiB | Bench CPU |\n"
      "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |\n");
  std::fflush(stdout);
  std::uint64_t epoch = static_cast<std::uint64_t>(std::chrono::system_clock::now().time_since_epoch().count());
  int failures = 0;
  for (const double rate : options->rates) {
    for (const std::size_t consumers : options->consumers) {
      failures += run_and_print(*options, rate, consumers, ++epoch) ? 0 : 1;
    }
  }
  return failures == 0 ? 0 : 1;
}
