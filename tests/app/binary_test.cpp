// The kv-relay binary as an operator runs it: flags, ready file, SIGTERM, exit codes.
#include <catch2/catch.hpp>

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fmt/format.h>
#include <grpcpp/grpcpp.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "dynamo/kvrelay/v1/relay.grpc.pb.h"
#include "kvrelay/ingest/v1/ingest.grpc.pb.h"
#include "tests/app/demo_topology.hpp"
#include "tests/app/process.hpp"

using namespace kvrelay::test;

TEST_CASE("kv-relay writes its ready file, drains on SIGTERM, SIGINT or SIGHUP and exits 0", "[binary]") {
  const auto [stop_signal, name] = GENERATE(table<int, std::string>(
      {{SIGTERM, std::string("SIGTERM")}, {SIGINT, std::string("SIGINT")}, {SIGHUP, std::string("SIGHUP")}}));
  CAPTURE(name);
  RelayChild relay("binary-" + name, {"--metrics-listen", "127.0.0.1:0", "--dc-id", "dc-binary-test"});
  std::stringstream content;
  content << std::ifstream(relay.ready_file()).rdbuf();
  CHECK_THAT(content.str(), Catch::Matches(R"(\{"wan": "127\.0\.0\.1:[0-9]+", "ingest": "127\.0\.0\.1:[0-9]+", )"
                                           R"("metrics": "127\.0\.0\.1:[0-9]+"\}\s*)"));
  CHECK(relay.stop(stop_signal) == 0);
  CHECK_THAT(relay.wait_for_output("relay stopped"),
             Catch::Contains(name + " received: draining") && Catch::Contains("relay stopped"));
  CHECK_FALSE(std::filesystem::exists(relay.ready_file()));  // gone with the drain
}

TEST_CASE("kv-relay removes a previous run's ready file before it starts, serving or not", "[binary]") {
  RelayChild running("ready-file-running", {"--metrics-listen", "off", "--dc-id", "dc-binary-test"});
  const std::string stale = std::string(KVRELAY_TEST_TMP_DIR) + "/ready-file-stale.ready";
  std::ofstream(stale) << "{\"wan\": \"127.0.0.1:1\", \"ingest\": \"127.0.0.1:2\", \"metrics\": null}\n";
  REQUIRE(std::filesystem::exists(stale));
  // A start that fails (its WAN address is taken) leaves no file that says it is up.
  const auto [output, exit_code] =
      run_to_end(KVRELAY_BINARY, {"--listen", running.address("wan"), "--ingest-listen", "127.0.0.1:0",
                                  "--metrics-listen", "off", "--dc-id", "dc-binary-test", "--ready-file", stale});
  CHECK(exit_code == 2);
  CHECK_THAT(output, Catch::Contains("cannot listen on " + running.address("wan")));
  CHECK_FALSE(std::filesystem::exists(stale));
}

TEST_CASE("kv-relay and kvrelay-cli --version print the project's version and its commit", "[binary]") {
  // The version CMake's project() declares, handed to this test apart from the binaries.
  const std::string version = KVRELAY_PROJECT_VERSION;
  const std::string revision = R"( \(revision ([0-9a-f]{12}|unknown)\)\n)";
  for (const auto& [binary, name] : {std::pair{KVRELAY_BINARY, "kv-relay"}, std::pair{KVRELAY_CLI, "kvrelay-cli"}}) {
    const auto [output, exit_code] = run_to_end(binary, {"--version"});
    CHECK(exit_code == 0);
    CHECK_THAT(output, Catch::StartsWith(std::string(name) + " " + version + " (revision ") &&
                           Catch::Matches(std::string(name) + " [0-9.]+" + revision));
  }
}

TEST_CASE("kv-relay refuses a bad value with one message and exit code 2", "[binary]") {
  Child child = spawn_relay({"--load-window-ms", "zero"});
  const std::string output = read_until(child.output, "\n");
  CHECK(wait_exit(child.pid) == 2);
  CHECK(output == "kv-relay: --load-window-ms: 'zero' is not a non-negative integer\n");
  close(child.output);
}

TEST_CASE("kv-relay refuses to start without --dc-id, with exit code 2", "[binary]") {
  Child child = spawn_relay({"--listen", "127.0.0.1:0", "--ingest-listen", "127.0.0.1:0", "--metrics-listen", "off"});
  const std::string output = read_until(child.output, "\n");
  CHECK(wait_exit(child.pid) == 2);
  CHECK_THAT(output, Catch::StartsWith("kv-relay: --dc-id is required: this data center's id"));
  close(child.output);
}

TEST_CASE("kv-relay refuses to start without a usable --ingest-token-file, with exit code 2", "[binary]") {
  const std::string token = std::string(KVRELAY_TEST_TMP_DIR) + "/binary-test-token";
  unlink(token.c_str());
  Child missing = spawn_relay({"--listen", "127.0.0.1:0", "--ingest-listen", "127.0.0.1:0", "--metrics-listen", "off",
                               "--dc-id", "dc-binary-test", "--ingest-token-file", token});
  const std::string missing_output = read_until(missing.output, "\n");
  CHECK(wait_exit(missing.pid) == 2);
  CHECK_THAT(missing_output, Catch::StartsWith("kv-relay: --ingest-token-file: cannot read " + token));
  close(missing.output);

  std::ofstream(token) << "\n";
  Child empty = spawn_relay({"--listen", "127.0.0.1:0", "--ingest-listen", "127.0.0.1:0", "--metrics-listen", "off",
                             "--dc-id", "dc-binary-test", "--ingest-token-file", token});
  const std::string empty_output = read_until(empty.output, "\n");
  CHECK(wait_exit(empty.pid) == 2);
  CHECK(empty_output ==
        "kv-relay: --ingest-token-file: " + token + " holds no token (it is empty or only whitespace)\n");
  close(empty.output);
}

namespace {

namespace v1 = dynamo::kvrelay::v1;

// A relay of three push-fed pools, each with a pool stream whose 4 MiB snapshot chunks nobody
// reads: its drain lasts until --drain-timeout-ms cancels them.
class StalledRelay {
 public:
  StalledRelay(const std::string& name, const std::string& drain_timeout_ms)
      : relay_(name, {"--metrics-listen", "off", "--dc-id", "dc-binary-test", "--drain-timeout-ms", drain_timeout_ms,
                      "--topology", write_demo_topology(name, fed_by_push)}) {
    grpc::ChannelArguments args;
    args.SetMaxReceiveMessageSize(8 << 20);
    stub_ = v1::KvEventRelay::NewStub(
        grpc::CreateCustomChannel(relay_.address("wan"), grpc::InsecureChannelCredentials(), args));
    ingest_ = kvrelay::ingest::v1::RelayIngest::NewStub(
        grpc::CreateChannel(relay_.address("ingest"), grpc::InsecureChannelCredentials()));
    stall_every_pool();
  }
  // The stalled streams go before the relay is stopped, should the test not have stopped it.
  ~StalledRelay() {
    for (auto& context : contexts_) context->TryCancel();
  }

  RelayChild& process() { return relay_; }

 private:
  void stall_every_pool() {
    auto& catalog_context = *contexts_.emplace_back(std::make_unique<grpc::ClientContext>());
    v1::WatchKvPoolCatalogRequest watch;
    watch.set_subscriber_id("drain-test");
    watch.set_contract_marker(0x4B565231);
    catalog_ = stub_->WatchKvPoolCatalog(&catalog_context, watch);
    v1::KvPoolCatalogUpdate update;
    while (catalog_->Read(&update) && update.snapshot().pools_size() == 0) {
    }
    REQUIRE(update.snapshot().pools_size() == 3);
    for (const auto& pool : update.snapshot().pools()) {
      v1::SubscribeKvPoolRequest request;
      request.set_subscriber_id("stalled");
      *request.mutable_expected_producer() = pool.producer();
      request.set_contract_marker(0x4B565231);
      contexts_.push_back(std::make_unique<grpc::ClientContext>());
      stalled_.push_back(stub_->SubscribeKvPool(contexts_.back().get(), request));
    }
    // The drain must meet all three: each is subscribed to its pool before the test signals.
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    while (subscribers() < 3) REQUIRE(std::chrono::steady_clock::now() < deadline);
  }
  std::uint32_t subscribers() {
    grpc::ClientContext context;
    kvrelay::ingest::v1::RelayState state;
    REQUIRE(ingest_->GetState(&context, {}, &state).ok());
    std::uint32_t count = 0;
    for (const auto& pool : state.pools()) count += pool.subscribers();
    return count;
  }

  RelayChild relay_;  // outlives the calls below
  std::unique_ptr<v1::KvEventRelay::Stub> stub_;
  std::unique_ptr<kvrelay::ingest::v1::RelayIngest::Stub> ingest_;
  std::vector<std::unique_ptr<grpc::ClientContext>> contexts_;  // outlive the readers below
  std::unique_ptr<grpc::ClientReader<v1::KvPoolCatalogUpdate>> catalog_;
  std::vector<std::unique_ptr<grpc::ClientReader<v1::FilterUpdate>>> stalled_;
};

// A topology file of one live worker with a push source, on an endpoint of namespace
// `namespace_yaml` (as YAML writes it): its path.
std::string one_worker_topology(const std::string& file, const std::string& namespace_yaml) {
  return write_file(file, fmt::format(R"(
version: 1
endpoints:
  - endpoint: {{namespace: {}, component: backend, endpoint: generate}}
    workers:
      - workerId: 7
        card: {{displayName: m, kvCacheBlockSize: 16, workerType: WORKER_TYPE_AGGREGATED,
               runtimeConfig: {{totalKvBlocks: 100}}}}
        kvSources: [{{dpRank: 0, push: {{}}}}]
    liveWorkers: {{workerIds: [7]}}
)",
                                      namespace_yaml));
}

}  // namespace

TEST_CASE("SIGTERM drains even when clients stop reading, and exits 0", "[binary]") {
  StalledRelay relay("drain", "500");
  CHECK(relay.process().stop(SIGTERM) == 0);
  CHECK_THAT(relay.process().wait_for_output("relay stopped"), Catch::Contains("relay stopped"));
}

TEST_CASE("a second signal while kv-relay drains ends it at once, with 128 + the signal", "[binary]") {
  StalledRelay relay("impatient", "600000");  // a drain that would wait ten minutes for its stalled streams
  REQUIRE(kill(relay.process().pid(), SIGTERM) == 0);
  REQUIRE_THAT(relay.process().wait_for_output("SIGTERM received: draining"),
               Catch::Contains("SIGTERM received: draining"));
  const int exit_code = relay.process().stop(SIGINT);
  const std::string output = relay.process().wait_for_output("exiting now");
  CHECK_THAT(output, Catch::Contains("SIGINT received again while draining: exiting now"));
  INFO("the relay's output:\n" << output);
  CHECK(exit_code == 128 + SIGINT);
}

namespace {

// Fills the pipe behind `read_end` through a description of its own, opened non-blocking, so
// that the child's writes, still blocking, stall from here on.
void fill_pipe(int read_end) {
  const int writer = open(("/proc/self/fd/" + std::to_string(read_end)).c_str(), O_WRONLY | O_NONBLOCK);
  REQUIRE(writer >= 0);
  const std::string page(4096, '#');
  while (write(writer, page.data(), page.size()) > 0) {
  }
  while (write(writer, page.data(), 1) > 0) {  // what is left of a partly filled page
  }
  const int error = errno;
  close(writer);
  REQUIRE(error == EAGAIN);
}

}  // namespace

TEST_CASE("a second signal ends kv-relay even while its log cannot be written", "[binary]") {
  Child child = spawn_relay({"--listen", "127.0.0.1:0", "--ingest-listen", "127.0.0.1:0", "--metrics-listen", "off",
                             "--dc-id", "dc-full-log"});
  REQUIRE_THAT(read_until(child.output, "ready: "), Catch::Contains("ready: "));
  fill_pipe(child.output);  // and nobody reads the relay's output any more: its log lines block
  REQUIRE(kill(child.pid, SIGTERM) == 0);
  REQUIRE(kill(child.pid, SIGINT) == 0);
  const Exit exit = reap(child.pid);
  close(child.output);
  CHECK_FALSE(exit.killed_at_deadline);
  // Both may be pending when the relay takes the first; it takes the lower-numbered first.
  CHECK((exit.code == 128 + SIGINT || exit.code == 128 + SIGTERM));
}

TEST_CASE("a core actor's failure stops kv-relay with exit code 3 and the reason in its log", "[binary][supervision]") {
  Child child = spawn_relay({"--listen", "127.0.0.1:0", "--ingest-listen", "127.0.0.1:0", "--metrics-listen", "off",
                             "--dc-id", "dc-binary-test", "--crash-membership-for-test"});
  const std::string log = read_until(child.output, "relay stopped");
  CHECK(wait_exit(child.pid) == 3);
  CHECK_THAT(log, Catch::Contains("core actor failed: membership exited"));
  CHECK_THAT(log, Catch::Contains("test hook: membership asked to crash"));
  CHECK_THAT(log, Catch::Contains("relay stopped"));
  close(child.output);
}

TEST_CASE("a core actor that fails while kv-relay starts exits 3, not as a bad configuration",
          "[binary][supervision]") {
  const std::string topology = one_worker_topology("crash-at-start.yaml", "prod");
  Child child = spawn_relay({"--listen", "127.0.0.1:0", "--ingest-listen", "127.0.0.1:0", "--metrics-listen", "off",
                             "--dc-id", "dc-binary-test", "--topology", topology, "--crash-membership-for-test=start"});
  const std::string log = read_until(child.output, "the relay did not start: core actor failed: membership exited");
  CHECK(wait_exit(child.pid) == 3);
  CHECK_THAT(log, !Catch::Contains("ready: "));
  close(child.output);
}

TEST_CASE("kv-relay logs a name with a line break inside on one line", "[binary]") {
  // Valid text (a name only may not begin or end with whitespace), meant to forge a log line.
  const std::string topology =
      one_worker_topology("forging-name.yaml", R"("prod\n[2026-01-01 00:00:00.000] [error] forged")");
  RelayChild relay("forging-name", {"--metrics-listen", "off", "--dc-id", "dc-binary-test", "--topology", topology});
  CHECK(relay.stop() == 0);
  const std::string log = relay.wait_for_output("relay stopped");
  CHECK_THAT(log, Catch::Contains("pool materialized: endpoint=prod\\x0a[2026-01-01 00:00:00.000] [error] forged"));
  CHECK_THAT(log, !Catch::Contains("\n[2026-01-01 00:00:00.000] [error] forged"));
}
