// A start that fails after the actor system is up returns its error and leaves nothing running:
// the actors it spawned are stopped, not waited for (docs/operations.md#startup).
#include <catch2/catch.hpp>

#include "tests/integration/harness.hpp"

using namespace kvrelay;
using namespace kvrelay::test;

namespace {

ingest_v1::TopologyFile workers_on_one_endpoint(std::initializer_list<std::uint64_t> worker_ids) {
  ingest_v1::TopologyFile file;
  file.set_version(1);
  auto* endpoint = file.add_endpoints();
  *endpoint->mutable_endpoint() = endpoint_ref("prod", "backend");
  for (std::uint64_t id : worker_ids) {
    const auto request = put_worker_request(endpoint->endpoint(), id);
    auto* worker = endpoint->add_workers();
    worker->set_worker_id(id);
    *worker->mutable_card() = request.card();
    *worker->mutable_kv_sources() = request.kv_sources();
  }
  return file;
}

}  // namespace

TEST_CASE("startup: a start that fails once the actors run returns its error", "[startup]") {
  TestRelay running;
  auto options = loopback_options();

  SECTION("the WAN address is taken") {
    options.listen = running.runtime().wan_address();
    const auto started = RelayRuntime::start(options);
    REQUIRE_FALSE(started.has_value());
    CHECK(started.error().message == "cannot listen on " + running.runtime().wan_address());
  }
  SECTION("the ingest address is taken") {
    options.ingest_listen = running.runtime().ingest_address();
    const auto started = RelayRuntime::start(options);
    REQUIRE_FALSE(started.has_value());
    CHECK(started.error().message == "cannot listen on " + running.runtime().ingest_address());
  }
  SECTION("the metrics address is taken") {
    auto with_metrics = loopback_options();
    with_metrics.metrics_listen = "127.0.0.1:0";
    TestRelay scraped(with_metrics);
    options.metrics_listen = scraped.runtime().metrics_address();
    const auto started = RelayRuntime::start(options);
    REQUIRE_FALSE(started.has_value());
    CHECK(started.error().message ==
          "--metrics-listen: cannot listen on " + scraped.runtime().metrics_address() + ": Address already in use");
  }
  SECTION("membership refuses the topology file") {
    options.max_workers_per_endpoint = 1;
    options.topology = workers_on_one_endpoint({1, 2});
    const auto started = RelayRuntime::start(options);
    REQUIRE_FALSE(started.has_value());
    CHECK_THAT(started.error().message, Catch::StartsWith("topology: "));
  }
  SECTION("a bad topology is a bad configuration, not a core failure") {
    options.max_workers_per_endpoint = 1;
    options.topology = workers_on_one_endpoint({1, 2});
    const auto started = RelayRuntime::start(options);
    REQUIRE_FALSE(started.has_value());
    CHECK_FALSE(started.error().core_failure);
  }
  SECTION("membership failing while the topology loads is a core failure, not a bad configuration") {
    options.topology = workers_on_one_endpoint({1, 2});
    options.crash_membership_at_start_for_test = true;
    const auto started = RelayRuntime::start(options);
    REQUIRE_FALSE(started.has_value());
    CHECK(started.error().core_failure);
    CHECK_THAT(started.error().message, Catch::StartsWith("core actor failed: membership exited") &&
                                            Catch::Contains("test hook: membership asked to crash"));
  }
  SECTION("the error is the topology's first refusal") {
    options.max_kv_sources = 1;  // each worker has one: worker 2 is the first refused, then worker 3
    options.topology = workers_on_one_endpoint({1, 2, 3});
    const auto started = RelayRuntime::start(options);
    REQUIRE_FALSE(started.has_value());
    CHECK_THAT(started.error().message, Catch::StartsWith("topology: ") && Catch::Contains(" worker 2: "));
  }
  // The relay that was running is untouched.
  CHECK(running.get_state().endpoints_size() == 0);
}
