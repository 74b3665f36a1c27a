// /metrics (docs/metrics.md): a relay serving metrics is driven through a scripted scenario
// and every step is checked against a scrape.
//
// Almost every value is recorded before the client can observe the event it counts (a
// frame is counted before it is written, a stream's end before its permit is returned, an
// ingest batch before it is acknowledged), so a scrape right after the observation is
// exact. Only values an actor publishes on its own schedule are polled, with a deadline.
#include <catch2/catch.hpp>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <charconv>
#include <chrono>
#include <filesystem>
#include <map>
#include <string>

#include "ingest/http_scrape.hpp"
#include "metrics/page_server.hpp"
#include "tests/integration/documented_metrics.hpp"
#include "tests/integration/harness.hpp"
#include "tests/integration/replica.hpp"
#include "tests/integration/scrape.hpp"
#include "tests/log_capture.hpp"
#include "tests/skip.hpp"

using namespace kvrelay::test;

namespace {

const std::string kPool = "prod/backend/generate";

template <class Response>
std::string ending_reason(StreamReader<Response>& stream) {
  while (stream.next()) {
  }
  stream.finish();
  return stream.reason();
}

kvrelay::RelayOptions metrics_relay_options() {
  kvrelay::RelayOptions options = loopback_options();
  options.metrics_listen = "127.0.0.1:0";
  // As in the hardening lag test: a 4 MiB snapshot chunk that a client that never reads
  // cannot take, an outbox of one frame, and one delta per batch.
  options.expected_unique_blocks = 1 << 20;
  options.stream_queue_frames = 1;
  options.publication_threshold = 1;
  return options;
}

Labels rpc(const std::string& name, const std::string& key = "", const std::string& value = "") {
  Labels labels{{"rpc", name}};
  if (!key.empty()) labels[key] = value;
  return labels;
}

ingest_v1::LoadReport load_report(const ingest_v1::EndpointRef& endpoint, std::uint32_t rank) {
  ingest_v1::LoadReport report;
  *report.mutable_endpoint() = endpoint;
  report.set_worker_id(1);
  report.set_dp_rank(rank);
  report.set_kv_used_blocks(40);
  return report;
}

// Reads `stream` until the replica reaches the pool's published sequence with nothing left
// pending (a change waiting for the delay would be published, and counted, after the check).
void follow(TestRelay& relay, StreamReader<v1::FilterUpdate>& stream, Replica& replica) {
  for (;;) {
    const auto pool = relay.get_state().pools(0);
    if (replica.sequence() == pool.sequence() && !pool.publication_pending()) return;
    auto frame = stream.next();
    REQUIRE(frame.has_value());
    replica.apply(*frame);
  }
}

// 500 distinct blocks per batch, as one stored event: enough to overflow a stalled stream.
std::vector<ingest_v1::KvEventBatch> big_batches(std::uint64_t first_sequence, std::uint64_t count) {
  std::vector<ingest_v1::KvEventBatch> batches;
  for (std::uint64_t b = 0; b < count; ++b) {
    std::vector<std::pair<std::uint64_t, std::uint64_t>> blocks;
    for (std::uint64_t i = 0; i < 500; ++i) blocks.emplace_back(100'000 + b * 1000 + i, b * 7919 + i * 104729 + 1);
    batches.push_back(stored_batch(kBackend, 1, 0, 1, first_sequence + b, blocks));
  }
  return batches;
}

}  // namespace

TEST_CASE("metrics: a scripted scenario is reflected in /metrics", "[metrics]") {
  TestRelay relay(metrics_relay_options());
  REQUIRE_FALSE(relay.runtime().metrics_address().empty());

  // ---- identity, before anything happened ----
  {
    const Scrape s = scrape(relay);
    CHECK(s.value("kv_relay_identity_info", {{"dc_id", std::to_string(relay.runtime().dc_id())},
                                             {"incarnation", std::to_string(relay.runtime().relay_incarnation())},
                                             {"instance_id", "7"}}) == 1);
    REQUIRE(s.series("kv_relay_build_info").size() == 1);
    CHECK(s.series("kv_relay_build_info")[0].contains("revision"));
    CHECK(s.count("kv_relay_process_start_time_seconds") > 1.6e9);
    CHECK(s.value("kv_relay_pools_materialized") == 0);
    CHECK(s.value("kv_relay_open_streams", rpc("SubscribeKvPool")) == 0);
    CHECK(s.value("kv_relay_mailbox_depth", {{"actor_kind", "membership"}}).has_value());
    CHECK(s.series("kv_relay_pool_sequence").empty());
  }

  // ---- a pool, its load coverage and readiness ----
  auto catalog = watch_catalog(relay, "catalog");
  WorkerShape shape;
  shape.total_kv_blocks = 100;
  relay.put_worker(put_worker_request(kBackend, 1, shape));
  relay.set_availability(kBackend, {1});
  const auto producer = await_single_pool(*catalog);
  // One that does not parse (a namespace that is not UTF-8), one accepted after it, one for an
  // undeclared rank, one without an endpoint.
  ingest_v1::LoadReport not_utf8 = load_report(endpoint_ref("\xc3\x28", "backend"), 0);
  ingest_v1::LoadReport malformed;
  const auto load = relay.report_load({not_utf8, load_report(kBackend, 0), load_report(kBackend, 5), malformed});
  CHECK(load.reports_applied() == 1);
  CHECK(load.reports_rejected() == 3);
  auto readiness = watch_readiness(relay, "readiness");  // left open: the drain ends it
  REQUIRE(readiness
              ->until([](const v1::ServingReadinessUpdate& u) {
                return u.entries_size() == 1 && u.entries(0).state() == v1::SERVING_READINESS_STATE_READY;
              })
              .has_value());
  {
    const Scrape s = scrape(relay);
    CHECK(s.value("kv_relay_pools_materialized") == 1);
    CHECK(s.value("kv_relay_generations_created_total") == 1);
    CHECK(s.value("kv_relay_pool_active_sources", {{"pool", kPool}}) == 1);
    CHECK(s.value("kv_relay_pool_load_expected_ranks", {{"pool", kPool}}) == 1);
    CHECK(s.value("kv_relay_pool_load_observed_ranks", {{"pool", kPool}}) == 1);
    CHECK(s.value("kv_relay_load_reports_total", {{"result", "accepted"}}) == 1);
    CHECK(s.value("kv_relay_load_reports_total", {{"result", "unknown_rank"}}) == 1);
    CHECK(s.value("kv_relay_load_reports_total", {{"result", "malformed"}}) == 2);
    CHECK(s.value("kv_relay_readiness_entries", {{"state", "READY"}}) == 1);
    CHECK(s.value("kv_relay_readiness_entries", {{"state", "UNKNOWN"}}) == 0);
    CHECK(s.count("kv_relay_frames_sent_total", {{"kind", "readiness"}}) >= 1);
  }

  // ---- serving load: reports by source and outcome, and its stream ----
  auto serving = watch_serving_load(relay, "serving");
  REQUIRE(serving->next().has_value());
  ingest_v1::FrontendLoadReport frontend;
  frontend.set_namespace_("prod");
  frontend.set_frontend_id(7);
  frontend.set_incarnation(1);
  frontend.set_sequence(1);
  CHECK(relay.report_frontend(frontend) == ingest_v1::REPORT_OUTCOME_APPLIED);
  CHECK(relay.report_frontend(frontend) == ingest_v1::REPORT_OUTCOME_DUPLICATE);
  {
    grpc::ClientContext context;
    ingest_v1::FrontendLoadReport invalid = frontend;
    invalid.set_frontend_id(0);
    ingest_v1::ReportFrontendLoadResponse response;
    CHECK(relay.ingest().ReportFrontendLoad(&context, invalid, &response).error_code() ==
          grpc::StatusCode::INVALID_ARGUMENT);
  }
  ingest_v1::SchedulerLoadReport router;
  *router.mutable_endpoint() = endpoint_ref("prod", "elsewhere");
  router.set_router_id(1);
  router.set_sequence(1);
  CHECK(relay.report_scheduler(router).outcome() == ingest_v1::REPORT_OUTCOME_NO_POOL);
  {
    const Scrape s = scrape(relay);
    const auto reports = [&](const char* source, const char* outcome) {
      return s.value("kv_relay_serving_load_reports_total", {{"source", source}, {"outcome", outcome}});
    };
    CHECK(reports("frontend", "applied") == 1);
    CHECK(reports("frontend", "duplicate") == 1);
    CHECK(reports("frontend", "invalid") == 1);
    CHECK(reports("frontend", "restarted") == 0);
    CHECK(reports("scheduler", "no_pool") == 1);
    CHECK(s.value("kv_relay_open_streams", rpc("SubscribeServingLoad")) == 1);
    CHECK(s.value("kv_relay_mailbox_depth", {{"actor_kind", "serving_load_window"}}).has_value());
  }
  serving->cancel();
  ending_reason(*serving);

  // ---- a pool stream follows three batches of four distinct blocks ----
  auto healthy = subscribe_pool(relay, producer, "healthy");
  Replica replica(producer);
  replica.apply(*healthy->next());
  REQUIRE(replica.installed());
  for (std::uint64_t b = 0; b < 3; ++b) {
    std::vector<std::pair<std::uint64_t, std::uint64_t>> blocks;
    for (std::uint64_t i = 0; i < 4; ++i) blocks.emplace_back(b * 10 + i + 1, b * 100 + i + 1);
    REQUIRE(relay.publish({stored_batch(kBackend, 1, 0, 1, b, blocks)}).batches_applied() == 1);
    follow(relay, *healthy, replica);
  }
  {
    const auto pool = relay.get_state().pools(0);
    REQUIRE(pool.unique_blocks() == 12);
    const Scrape s = scrape(relay);
    CHECK(s.value("kv_relay_pool_sequence", {{"pool", kPool}}) == replica.sequence());
    CHECK(s.value("kv_relay_pool_unique_blocks", {{"pool", kPool}}) == 12);
    CHECK(s.count("kv_relay_pool_load_factor", {{"pool", kPool}}) ==
          Approx(static_cast<double>(pool.occupied_slots()) / (pool.bucket_count() * 4.0)));
    CHECK(s.value("kv_relay_pool_capacity_failures_total", {{"pool", kPool}}) == 0);
    CHECK(s.value("kv_relay_pool_subscribers", {{"pool", kPool}}) == 1);
    CHECK(s.count("kv_relay_pool_publication_gap_seconds", {{"pool", kPool}}) == Approx(0.001));
    CHECK(s.value("kv_relay_open_streams", rpc("SubscribeKvPool")) == 1);
    CHECK(s.value("kv_relay_open_streams", rpc("WatchKvPoolCatalog")) == 1);
    CHECK(s.value("kv_relay_stream_admissions_total", rpc("SubscribeKvPool", "result", "admitted")) == 1);
    for (const char* kind : {"snapshot_chunk", "delta", "catalog"}) {
      INFO(kind);
      CHECK(s.count("kv_relay_frames_sent_total", {{"kind", kind}}) > 0);
      CHECK(s.count("kv_relay_bytes_sent_total", {{"kind", kind}}) > 0);
    }
    CHECK(s.value("kv_relay_frames_sent_total", {{"kind", "snapshot_chunk"}}) == 1);
    CHECK(s.value("kv_relay_frames_sent_total", {{"kind", "delta"}}) == replica.sequence());
    CHECK(s.value("kv_relay_snapshot_encode_seconds_count") == 1);
    CHECK(s.value("kv_relay_event_to_wire_seconds_count") == replica.sequence());
    CHECK(s.value("kv_relay_ingest_batches_total", {{"kind", "PublishKvEvents"}, {"result", "accepted"}}) == 3);
    CHECK(s.value("kv_relay_ingest_events_total", {{"kind", "stored"}, {"result", "accepted"}}) == 3);
  }

  // ---- both streams close: client cancels ----
  healthy->cancel();
  catalog->cancel();
  ending_reason(*healthy);
  ending_reason(*catalog);
  REQUIRE(relay.runtime().await_open_streams_at_most("pool", 0));
  REQUIRE(relay.runtime().await_open_streams_at_most("catalog", 0));
  {
    const Scrape s = scrape(relay);
    CHECK(s.value("kv_relay_open_streams", rpc("SubscribeKvPool")) == 0);
    CHECK(s.value("kv_relay_open_streams", rpc("WatchKvPoolCatalog")) == 0);
    CHECK(s.value("kv_relay_stream_terminations_total", rpc("SubscribeKvPool", "reason", "client_cancel")) == 1);
    CHECK(s.value("kv_relay_stream_terminations_total", rpc("WatchKvPoolCatalog", "reason", "client_cancel")) == 1);
  }
  // The publisher learns of the stream's end from its own monitor, on its own time.
  CHECK(scrape_until(relay, [](const Scrape& s) {
          return s.value("kv_relay_pool_subscribers", {{"pool", kPool}}) == 0;
        }).value("kv_relay_pool_subscribers", {{"pool", kPool}}) == 0);

  // ---- a subscriber that never reads lags ----
  auto stalled_client = relay.separate_wan_client();
  auto stalled = subscribe_pool(relay, producer, "stalled", stalled_client.get());
  REQUIRE(relay.runtime().await_open_streams_at_least("hubs", 1));  // attached: it gets every delta
  relay.publish(big_batches(3, 64));
  REQUIRE(relay.runtime().await_serving_streams_at_most("pool", 0));
  CHECK(ending_reason(*stalled) == "RELAY_ERROR_REASON_SUBSCRIBER_LAGGED");
  {
    const Scrape s = scrape(relay);
    CHECK(s.value("kv_relay_stream_terminations_total", rpc("SubscribeKvPool", "reason", "SUBSCRIBER_LAGGED")) == 1);
    CHECK(s.value("kv_relay_stream_terminations_total",
                  rpc("SubscribeKvPool", "reason", "SNAPSHOT_PROGRESS_TIMEOUT")) == 0);
    CHECK(s.value("kv_relay_open_streams", rpc("SubscribeKvPool")) == 0);
    CHECK(s.value("kv_relay_ingest_batches_total", {{"kind", "PublishKvEvents"}, {"result", "accepted"}}) == 67);
  }

  // ---- rejected and resetting batches, a refused subscription ----
  ingest_v1::KvEventBatch no_data = stored_batch(kBackend, 1, 0, 1, 67, {{1, 1}});
  no_data.add_events();  // an event without data: the whole batch is malformed
  // Read by the relay, not by gRPC: gRPC would end the stream there, as if the feeder had closed it.
  ingest_v1::KvEventBatch unparsable = stored_batch(endpoint_ref("prod", "\xff"), 1, 0, 1, 67, {{1, 1}});
  const auto tally =
      relay.publish({unparsable, no_data, stored_batch(endpoint_ref("prod", "nowhere"), 9, 0, 1, 0, {{1, 1}}),
                     stored_batch(kBackend, 1, 0, 1, 0, {{2, 2}}),      // sequence 0 again: stale
                     stored_batch(kBackend, 1, 0, 1, 100, {{3, 3}})});  // a gap: reset, applied
  CHECK(tally.batches_rejected() == 4);
  CHECK(tally.batches_applied() == 1);
  auto moved_on = producer;
  moved_on.set_layout_generation(producer.layout_generation() + 1);
  CHECK(ending_reason(*subscribe_pool(relay, moved_on, "refused")) == "RELAY_ERROR_REASON_PRODUCER_CHANGED");
  {
    const Scrape s = scrape(relay);
    const Labels batches{{"kind", "PublishKvEvents"}};
    auto result = [&](const char* r) {
      Labels labels = batches;
      labels["result"] = r;
      return s.value("kv_relay_ingest_batches_total", labels);
    };
    CHECK(result("accepted") == 68);
    CHECK(result("malformed") == 2);
    CHECK(result("unknown_source") == 1);
    CHECK(result("stale_sequence") == 1);
    CHECK(s.value("kv_relay_ingest_events_total", {{"kind", "stored"}, {"result", "accepted"}}) == 68);
    CHECK(s.value("kv_relay_source_resets_total", {{"reason", "sequence_gap"}}) == 1);
    CHECK(s.value("kv_relay_stream_admissions_total", rpc("SubscribeKvPool", "result", "PRODUCER_CHANGED")) == 1);
    CHECK(s.value("kv_relay_stream_admissions_total", rpc("SubscribeKvPool", "result", "admitted")) == 2);
  }

  // ---- the pool is withdrawn: its series go ----
  relay.remove_worker(kBackend, 1);
  {
    const Scrape s = scrape(relay);
    CHECK(s.value("kv_relay_pools_materialized") == 0);
    CHECK(s.value("kv_relay_generations_retired_total") == 1);
    CHECK(s.value("kv_relay_source_resets_total", {{"reason", "worker_removed"}}) == 1);
    for (const char* family :
         {"kv_relay_pool_sequence", "kv_relay_pool_unique_blocks", "kv_relay_pool_load_factor",
          "kv_relay_pool_capacity_failures_total", "kv_relay_pool_subscribers", "kv_relay_pool_publication_gap_seconds",
          "kv_relay_pool_active_sources", "kv_relay_pool_load_observed_ranks", "kv_relay_pool_load_expected_ranks"}) {
      INFO(family);
      CHECK(s.series(family).empty());
    }
  }

  // ---- the drain ends the readiness stream cleanly; /metrics still answers ----
  relay.shutdown();
  CHECK(ending_reason(*readiness) == "RELAY_ERROR_REASON_PUBLICATION_UNAVAILABLE");
  {
    const Scrape s = scrape(relay);
    CHECK(s.value("kv_relay_stream_terminations_total", rpc("SubscribeServingReadiness", "reason", "clean_end")) == 1);
    CHECK(s.value("kv_relay_open_streams", rpc("SubscribeServingReadiness")) == 0);
  }
}

namespace {

// Whether this host can bind IPv6 loopback at all (a container may have IPv6 off).
bool ipv6_loopback() {
  const int fd = socket(AF_INET6, SOCK_STREAM, 0);
  if (fd < 0) return false;
  sockaddr_in6 address{};
  address.sin6_family = AF_INET6;
  address.sin6_addr = in6addr_loopback;
  const bool bound = bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof address) == 0;
  close(fd);
  return bound;
}

}  // namespace

TEST_CASE("metrics: the listener binds an IPv6 address", "[metrics]") {
  if (!ipv6_loopback()) KVRELAY_SKIP("this host cannot bind ::1");
  kvrelay::RelayOptions options = loopback_options();
  options.metrics_listen = "[::1]:0";
  TestRelay relay(options);
  const std::string& address = relay.runtime().metrics_address();
  REQUIRE(address.starts_with("[::1]:"));
  CHECK(address != "[::1]:0");
  CHECK(scrape(relay).value("kv_relay_pools_materialized") == 0);
}

TEST_CASE("docs/metrics.md documents every family a relay with a pool serves", "[metrics]") {
  TestRelay relay(metrics_relay_options());
  relay.put_worker(put_worker_request(kBackend, 1));
  relay.publish({stored_batch(kBackend, 1, 0, 1, 0, {{1, 11}})});
  // Per-pool families appear once the pool's collector has it.
  const Scrape pool_seen = scrape_until(relay, [](const Scrape& s) {
    return s.value("kv_relay_pool_unique_blocks", {{"pool", kPool}}).has_value();
  });
  REQUIRE(pool_seen.value("kv_relay_pool_unique_blocks", {{"pool", kPool}}).has_value());

  const auto families = undocumented_families(http_get(relay.runtime().metrics_address(), "/metrics"));
  CHECK(families.undocumented == std::vector<std::string>{});
  CHECK(families.served > 20);
}

TEST_CASE("metrics: connections that send nothing do not keep a scrape waiting", "[metrics]") {
  kvrelay::RelayOptions options = loopback_options();
  options.metrics_listen = "127.0.0.1:0";
  TestRelay relay(options);
  // Clients that connect and send nothing, as a stalled scraper or a TCP health check does.
  std::vector<int> idle;
  for (int i = 0; i < 4; ++i) idle.push_back(connect_to(relay.runtime().metrics_address()));
  // Each held a thread for httplib's 5 s read timeout, all of them behind one another.
  const auto page =
      kvrelay::engine_io::http_get("http://" + relay.runtime().metrics_address() + "/metrics", std::chrono::seconds(4));
  for (const int fd : idle) close(fd);
  INFO(page.error);
  CHECK(page.ok);
  CHECK_THAT(page.body, Catch::Contains("kv_relay_build_info"));
}

namespace {

// The listening socket of this process bound to `port`, or -1.
int listening_socket(int port) {
  for (const auto& entry : std::filesystem::directory_iterator("/proc/self/fd")) {
    int fd = -1;
    const std::string name = entry.path().filename().string();
    if (std::from_chars(name.data(), name.data() + name.size(), fd).ec != std::errc{}) continue;
    int accepting = 0;
    socklen_t length = sizeof accepting;
    if (getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &accepting, &length) != 0 || accepting == 0) continue;
    sockaddr_in bound{};
    length = sizeof bound;
    if (getsockname(fd, reinterpret_cast<sockaddr*>(&bound), &length) == 0 && bound.sin_family == AF_INET &&
        ntohs(bound.sin_port) == port) {
      return fd;
    }
  }
  return -1;
}

}  // namespace

TEST_CASE("metrics: the listener listens again after its socket fails", "[metrics]") {
  const CapturedLog log;
  auto server = kvrelay::PageServer::start(
      "127.0.0.1", 0, "/page", [] { return std::string("served\n"); }, "text/plain");
  REQUIRE(server.has_value());
  const std::string url = "http://127.0.0.1:" + std::to_string((*server)->port()) + "/page";
  REQUIRE(kvrelay::engine_io::http_get(url, std::chrono::seconds(4)).ok);
  // accept() then fails (EINVAL), as it does with a client's pending network error: httplib
  // closes the socket and stops listening.
  const int listener = listening_socket((*server)->port());
  REQUIRE(listener >= 0);
  REQUIRE(shutdown(listener, SHUT_RDWR) == 0);
  // Refused until the server has bound the port again, a second later, which it logs.
  REQUIRE(log.await({"HTTP listener", "listening again"}, std::chrono::seconds(30)));
  const auto page = kvrelay::engine_io::http_get(url, std::chrono::seconds(30));
  INFO(page.error);
  CHECK(page.ok);
  CHECK(page.body == "served\n");
}

TEST_CASE("metrics: endpoints whose names join to the same text keep series of their own", "[metrics]") {
  TestRelay relay(metrics_relay_options());
  const auto slash_in_namespace = endpoint_ref("prod/a", "backend");
  const auto slash_in_component = endpoint_ref("prod", "a/backend");  // both "prod/a/backend/generate" joined
  const Labels namespace_pool{{"pool", "prod%2Fa/backend/generate"}};
  const Labels component_pool{{"pool", "prod/a%2Fbackend/generate"}};
  relay.put_worker(put_worker_request(slash_in_namespace, 1));
  relay.put_worker(put_worker_request(slash_in_component, 2));
  relay.publish({stored_batch(slash_in_namespace, 1, 0, 1, 0, {{1, 11}})});
  const Scrape both = scrape_until(relay, [&](const Scrape& s) {
    return s.value("kv_relay_pool_unique_blocks", namespace_pool) == 1 &&
           s.value("kv_relay_pool_unique_blocks", component_pool).has_value();
  });
  CHECK(both.value("kv_relay_pool_unique_blocks", namespace_pool) == 1);
  CHECK(both.value("kv_relay_pool_unique_blocks", component_pool) == 0);

  relay.remove_worker(slash_in_component, 2);  // its pool is withdrawn, the other stays
  const Scrape one = scrape_until(
      relay, [&](const Scrape& s) { return !s.value("kv_relay_pool_unique_blocks", component_pool).has_value(); });
  CHECK_FALSE(one.value("kv_relay_pool_unique_blocks", component_pool).has_value());
  CHECK(one.value("kv_relay_pool_unique_blocks", namespace_pool) == 1);
}
