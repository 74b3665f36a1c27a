// Contract hardening: admission limits (docs/protocol/limits.md#admission-limits), heartbeats
// (docs/protocol/rpcs.md#heartbeats, docs/protocol/decisions.md#d1), health and reflection
// (docs/protocol/rpcs.md#transport) and graceful drain (docs/protocol/rpcs.md#drain,
// docs/protocol/decisions.md#d6).
#include <catch2/catch.hpp>

#include <condition_variable>
#include <future>
#include <mutex>
#include <string_view>
#include <thread>

#include <google/protobuf/descriptor.h>
#include <google/protobuf/descriptor.pb.h>
#include <google/protobuf/descriptor_database.h>
#include <grpc/grpc.h>
#include <grpc/support/log.h>
#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/impl/codegen/client_unary_call.h>

#include "grpc/reflection/v1/reflection.grpc.pb.h"
#include "kvrelay_test/standard_services.pb.h"
#include "tests/integration/harness.hpp"
#include "tests/integration/scrape.hpp"
#include "tests/log_capture.hpp"

using namespace kvrelay::test;

namespace {

kvrelay::test::HealthCheckResponse::ServingStatus health(const std::shared_ptr<grpc::Channel>& channel,
                                                         const std::string& service) {
  grpc::ClientContext context;
  const grpc::internal::RpcMethod method("/grpc.health.v1.Health/Check", grpc::internal::RpcMethod::NORMAL_RPC,
                                         channel);
  kvrelay::test::HealthCheckRequest request;
  request.set_service(service);
  kvrelay::test::HealthCheckResponse response;
  const auto status = grpc::internal::BlockingUnaryCall(channel.get(), method, &context, request, &response);
  if (!status.ok()) return kvrelay::test::HealthCheckResponse::UNKNOWN;
  return response.status();
}

// A grpc.health.v1 Watch of the relay's WAN service: each read is its next status.
class HealthWatch {
 public:
  using Status = kvrelay::test::HealthCheckResponse;

  explicit HealthWatch(TestRelay& relay) {
    const grpc::internal::RpcMethod method("/grpc.health.v1.Health/Watch", grpc::internal::RpcMethod::SERVER_STREAMING,
                                           relay.wan_channel());
    kvrelay::test::HealthCheckRequest request;
    request.set_service("dynamo.kvrelay.v1.KvEventRelay");
    reader_.reset(
        grpc::internal::ClientReaderFactory<Status>::Create(relay.wan_channel().get(), method, &context_, request));
  }

  // The next status, or nullopt once the watch has ended.
  std::optional<Status::ServingStatus> next() {
    Status seen;
    if (!reader_->Read(&seen)) return std::nullopt;
    return seen.status();
  }
  void cancel() { context_.TryCancel(); }

 private:
  grpc::ClientContext context_;
  std::unique_ptr<grpc::ClientReader<Status>> reader_;
};

std::vector<std::string> reflected_services(const std::shared_ptr<grpc::Channel>& channel) {
  grpc::ClientContext context;
  const grpc::internal::RpcMethod method("/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo",
                                         grpc::internal::RpcMethod::BIDI_STREAMING, channel);
  std::unique_ptr<
      grpc::ClientReaderWriter<kvrelay::test::ServerReflectionRequest, kvrelay::test::ServerReflectionResponse>>
      stream(grpc::internal::ClientReaderWriterFactory<kvrelay::test::ServerReflectionRequest,
                                                       kvrelay::test::ServerReflectionResponse>::Create(channel.get(),
                                                                                                        method,
                                                                                                        &context));
  kvrelay::test::ServerReflectionRequest request;
  request.set_list_services("*");
  REQUIRE(stream->Write(request));
  stream->WritesDone();
  kvrelay::test::ServerReflectionResponse response;
  REQUIRE(stream->Read(&response));
  std::vector<std::string> names;
  for (const auto& service : response.list_services_response().service()) names.push_back(service.name());
  stream->Finish();
  return names;
}

}  // namespace

// With a limit of two: the third is refused; once one is cancelled, a new one is admitted.
template <class Open>
void check_limit_of_two(TestRelay& relay, std::string_view kind, Open open) {
  auto a = open("a");
  auto b = open("b");
  REQUIRE(a->next().has_value());
  REQUIRE(b->next().has_value());
  auto refused = open("c");
  CHECK(refused->ending() ==
        std::pair{grpc::StatusCode::RESOURCE_EXHAUSTED, std::string("RELAY_ERROR_REASON_RESOURCE_LIMIT")});
  a->cancel();
  a->ending();
  REQUIRE(relay.runtime().await_open_streams_at_most(kind, 1));  // the permit comes back with the cancel
  CHECK(open("d")->next().has_value());
}

TEST_CASE("admission: each stream kind refuses the N+1st and admits again after one ends", "[limits]") {
  kvrelay::RelayOptions options = loopback_options();
  options.max_catalog_subscribers = 2;
  options.max_readiness_subscribers = 2;
  options.max_load_subscribers = 2;
  TestRelay relay(options);
  SECTION("catalog") {
    check_limit_of_two(relay, "catalog", [&](const char* id) { return watch_catalog(relay, id); });
  }
  SECTION("readiness") {
    check_limit_of_two(relay, "readiness", [&](const char* id) { return watch_readiness(relay, id); });
  }
  SECTION("load") {
    check_limit_of_two(relay, "load", [&](const char* id) { return watch_load(relay, id); });
  }
}

TEST_CASE("admission: pool streams, in total and per pool, and withdrawal return permits", "[limits]") {
  kvrelay::RelayOptions options = loopback_options();
  options.max_pool_streams_total = 3;
  options.max_subscribers_per_pool = 2;
  TestRelay relay(options);
  auto catalog = watch_catalog(relay);
  relay.put_worker(put_worker_request(kBackend, 1));
  relay.put_worker(put_worker_request(endpoint_ref("prod", "other"), 2));
  const auto pools = await_catalog(*catalog, 2);
  // Pools are listed by PoolId: find the one each endpoint serves.
  auto producer_of = [&](const std::string& component) {
    for (const auto& pool : pools.snapshot().pools()) {
      if (pool.serving_endpoint().component() == component) return pool.producer();
    }
    FAIL("no pool for " << component);
    return v1::ProducerIdentity{};
  };
  const auto first = producer_of("backend");
  const auto second = producer_of("other");

  auto a = subscribe_pool(relay, first, "a");
  auto b = subscribe_pool(relay, first, "b");
  REQUIRE(a->next().has_value());
  REQUIRE(b->next().has_value());
  auto per_pool = subscribe_pool(relay, first, "c");  // a third on one pool
  CHECK(per_pool->ending() ==
        std::pair{grpc::StatusCode::RESOURCE_EXHAUSTED, std::string("RELAY_ERROR_REASON_RESOURCE_LIMIT")});

  auto c = subscribe_pool(relay, second, "d");
  REQUIRE(c->next().has_value());
  auto total = subscribe_pool(relay, second, "e");  // a fourth in all
  CHECK(total->ending().second == "RELAY_ERROR_REASON_RESOURCE_LIMIT");
  CHECK(relay.runtime().open_streams("pool") == 3);

  // A withdrawn pool ends its streams, and their permits come back.
  relay.remove_worker(endpoint_ref("prod", "other"), 2);
  CHECK(c->ending().second == "RELAY_ERROR_REASON_PUBLICATION_UNAVAILABLE");
  REQUIRE(relay.runtime().await_open_streams_at_most("pool", 2));
  auto again = subscribe_pool(relay, first, "f");
  CHECK(again->ending().second == "RELAY_ERROR_REASON_RESOURCE_LIMIT");  // still 2 on the first pool
  a->cancel();
  a->ending();
  REQUIRE(relay.runtime().await_open_streams_at_most("pool", 1));
  auto admitted = subscribe_pool(relay, first, "g");
  CHECK(admitted->next().has_value());
}

TEST_CASE("heartbeats: catalog and readiness re-send the same revision, pool streams send empty frames",
          "[heartbeat]") {
  kvrelay::RelayOptions options = loopback_options();
  options.catalog_heartbeat_ms = 20;
  options.readiness_heartbeat_ms = 20;
  options.pool_heartbeat_ms = 20;
  TestRelay relay(options);
  auto catalog = watch_catalog(relay);
  relay.put_worker(put_worker_request(kBackend, 1));
  const auto current = await_catalog(*catalog, 1);
  for (int beat = 0; beat < 3; ++beat) {
    const auto again = catalog->next();
    REQUIRE(again.has_value());
    CHECK(again->revision() == current.revision());
    CHECK(again->SerializeAsString() == current.SerializeAsString());
  }

  auto readiness = watch_readiness(relay);
  const auto first = readiness->next();
  REQUIRE(first.has_value());
  const auto beat = readiness->next();
  REQUIRE(beat.has_value());
  CHECK(beat->revision() == first->revision());

  auto pool = subscribe_pool(relay, current.snapshot().pools(0).producer());
  const auto snapshot = pool->next();
  REQUIRE(snapshot.has_value());
  REQUIRE(snapshot->kind() == v1::FILTER_UPDATE_KIND_SNAPSHOT_CHUNK);
  const auto heartbeat = pool->next();
  REQUIRE(heartbeat.has_value());
  CHECK(heartbeat->kind() == v1::FILTER_UPDATE_KIND_HEARTBEAT);
  CHECK(heartbeat->payload().empty());
  CHECK(heartbeat->sequence() == snapshot->sequence());
  CHECK(heartbeat->base_sequence() == snapshot->sequence());
  CHECK(heartbeat->producer().SerializeAsString() == snapshot->producer().SerializeAsString());
}

TEST_CASE("catalog heartbeat 0 disables it", "[heartbeat]") {
  kvrelay::RelayOptions options = loopback_options();
  options.catalog_heartbeat_ms = 0;
  options.readiness_heartbeat_ms = 10;
  TestRelay relay(options);
  auto catalog = watch_catalog(relay);
  REQUIRE(catalog->next().has_value());
  // Readiness heartbeats prove time passes; the catalog stream meanwhile stays silent until
  // a real change arrives.
  auto readiness = watch_readiness(relay);
  for (int i = 0; i < 5; ++i) REQUIRE(readiness->next().has_value());
  relay.put_worker(put_worker_request(kBackend, 1));
  const auto next = catalog->next();
  REQUIRE(next.has_value());
  CHECK(next->revision() == 1);
}

// gRPC's own log function, which its public headers do not declare (libgpr exports it): what
// gpr_set_log_function is given back once a test no longer reads the log.
void gpr_default_log(gpr_log_func_args* args);

namespace {

// The keepalive pings gRPC's transports in this process finish (acknowledged by their peer),
// counted from gRPC's own keepalive trace while an instance lives. Other log lines go on to
// gRPC's default log at its default severity, errors only.
class FinishedKeepalivePings {
 public:
  FinishedKeepalivePings() {
    {
      std::lock_guard lock(mutex_);
      count_ = 0;
    }
    grpc_tracer_set_enabled("http_keepalive", 1);
    gpr_set_log_verbosity(GPR_LOG_SEVERITY_DEBUG);
    gpr_set_log_function(&FinishedKeepalivePings::log);
  }
  ~FinishedKeepalivePings() {
    gpr_set_log_function(gpr_default_log);
    gpr_set_log_verbosity(GPR_LOG_SEVERITY_ERROR);
    grpc_tracer_set_enabled("http_keepalive", 0);
  }
  FinishedKeepalivePings(const FinishedKeepalivePings&) = delete;
  FinishedKeepalivePings& operator=(const FinishedKeepalivePings&) = delete;
  // Until `count` pings were answered; false if that takes a minute.
  bool await(int count) const {
    std::unique_lock lock(mutex_);
    return answered_.wait_for(lock, std::chrono::seconds(60), [&] { return count_ >= count; });
  }

 private:
  static void log(gpr_log_func_args* args) {
    if (std::string_view(args->message).find("Finish keepalive ping") != std::string_view::npos) {
      {
        std::lock_guard lock(mutex_);
        ++count_;
      }
      answered_.notify_all();
    }
    if (args->severity == GPR_LOG_SEVERITY_ERROR) gpr_default_log(args);
  }
  static inline std::mutex mutex_;
  static inline std::condition_variable answered_;
  static inline int count_ = 0;
};

}  // namespace

TEST_CASE("keepalive: a client that pings far more often than the relay's minimum keeps its connection",
          "[keepalive]") {
  // docs/protocol/decisions.md#d24. gRPC's default server answers the third ping in a row that
  // comes sooner than its minimum interval after its last data with GOAWAY (too_many_pings);
  // the relay counts no strikes. gRPC's client pings at most once a second; the catalog stream
  // stays quiet (no heartbeat) while four are answered, and then still delivers a change.
  kvrelay::RelayOptions options = loopback_options();
  options.catalog_heartbeat_ms = 0;
  TestRelay relay(options);
  grpc::ChannelArguments pinging;
  pinging.SetInt(GRPC_ARG_KEEPALIVE_TIME_MS, 1000);
  pinging.SetInt(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, 5000);
  pinging.SetInt(GRPC_ARG_HTTP2_MAX_PINGS_WITHOUT_DATA, 0);
  pinging.SetInt(GRPC_ARG_HTTP2_MIN_SENT_PING_INTERVAL_WITHOUT_DATA_MS, 0);
  auto stub = v1::KvEventRelay::NewStub(
      grpc::CreateCustomChannel(relay.runtime().wan_address(), grpc::InsecureChannelCredentials(), pinging));
  auto catalog = watch_catalog(relay, "pinging", stub.get());
  const auto snapshot = catalog->next();
  REQUIRE(snapshot.has_value());
  const FinishedKeepalivePings pings;
  // The relay answered them (its own pings are 20 s apart), past the third in a row.
  REQUIRE(pings.await(4));
  relay.put_worker(put_worker_request(kBackend, 1));
  const auto change = catalog->next();
  if (!change) FAIL("the stream ended: " << catalog->finish().error_message());
  CHECK(change->revision() > snapshot->revision());
}

TEST_CASE("health and reflection on both listeners, drain flips health and refuses new calls", "[health]") {
  TestRelay relay;
  using Status = kvrelay::test::HealthCheckResponse;
  CHECK(health(relay.wan_channel(), "dynamo.kvrelay.v1.KvEventRelay") == Status::SERVING);
  CHECK(health(relay.wan_channel(), "") == Status::SERVING);
  CHECK(health(relay.ingest_channel(), "kvrelay.ingest.v1.RelayIngest") == Status::SERVING);
  const auto wan_services = reflected_services(relay.wan_channel());
  CHECK(std::find(wan_services.begin(), wan_services.end(), "dynamo.kvrelay.v1.KvEventRelay") != wan_services.end());
  const auto ingest_services = reflected_services(relay.ingest_channel());
  CHECK(std::find(ingest_services.begin(), ingest_services.end(), "kvrelay.ingest.v1.RelayIngest") !=
        ingest_services.end());

  // Watch health during the drain; read the catalog stream as it ends. The relay itself is
  // shut down from the thread that started it.
  HealthWatch watch(relay);
  CHECK(watch.next() == Status::SERVING);

  auto catalog = watch_catalog(relay);
  REQUIRE(catalog->next().has_value());
  std::pair<grpc::StatusCode, std::string> catalog_end;
  std::vector<Status::ServingStatus> health_during_drain;
  std::thread readers([&] {
    catalog_end = catalog->ending();
    while (const auto status = watch.next()) health_during_drain.push_back(*status);
  });
  relay.shutdown();
  readers.join();
  CHECK(catalog_end ==
        std::pair{grpc::StatusCode::UNAVAILABLE, std::string("RELAY_ERROR_REASON_PUBLICATION_UNAVAILABLE")});
  REQUIRE_FALSE(health_during_drain.empty());
  CHECK(health_during_drain.front() == Status::NOT_SERVING);

  // After the drain nothing is accepted.
  grpc::ClientContext context;
  v1::RelayInfoRequest request;
  request.set_contract_marker(kMarker);
  v1::RelayInfo info;
  CHECK(relay.wan().GetRelayInfo(&context, request, &info).error_code() == grpc::StatusCode::UNAVAILABLE);
}

TEST_CASE("drain: while open streams end, new calls are refused with UNAVAILABLE, not cancelled", "[health]") {
  TestRelay relay;
  using Status = kvrelay::test::HealthCheckResponse;
  auto catalog = watch_catalog(relay);
  relay.put_worker(put_worker_request(kBackend, 1));
  const auto producer = await_single_pool(*catalog);
  // A feeder's stream, which the relay leaves to its feeder: it holds the drain open.
  grpc::ClientContext feeder_context;
  ingest_v1::PublishKvEventsResponse tally;
  auto feeder = relay.ingest().PublishKvEvents(&feeder_context, &tally);
  REQUIRE(relay.runtime().await_open_streams_at_least("ingest", 1));

  HealthWatch watch(relay);
  REQUIRE(watch.next() == Status::SERVING);

  // The relay is shut down from the thread that started it; the late client runs beside it.
  std::pair<grpc::StatusCode, std::string> late_end;
  bool feeder_closed = false;
  std::optional<Status::ServingStatus> seen;
  std::thread late_client([&] {
    while ((seen = watch.next()) && *seen != Status::NOT_SERVING) {
    }
    late_end = subscribe_pool(relay, producer, "late")->ending();
    feeder_closed = feeder->WritesDone();
    feeder->Finish();  // the drain can end now
  });
  relay.runtime().shutdown(std::chrono::seconds(60));  // ends once the feeder has closed its stream
  late_client.join();
  CHECK(seen == Status::NOT_SERVING);
  CHECK(late_end ==
        std::pair{grpc::StatusCode::UNAVAILABLE, std::string("RELAY_ERROR_REASON_PUBLICATION_UNAVAILABLE")});
  CHECK(feeder_closed);
}

TEST_CASE("drain: a stream still open at the deadline is cancelled, and the log says how many were", "[health]") {
  CapturedLog log;  // first: it outlives the relay's threads
  TestRelay relay;
  grpc::ClientContext feeder_context;
  ingest_v1::PublishKvEventsResponse tally;
  auto feeder = relay.ingest().PublishKvEvents(&feeder_context, &tally);  // never closed by its feeder
  REQUIRE(relay.runtime().await_open_streams_at_least("ingest", 1));
  relay.runtime().shutdown(std::chrono::milliseconds(200));
  CHECK(log.count({"[warning] drain: --drain-timeout-ms passed with 0 WAN and 1 ingest streams still open; they are "
                   "cancelled"}) == 1);
  CHECK_FALSE(feeder->Finish().ok());  // ended by the server, not by its feeder
}

TEST_CASE("drain: an open health watch does not hold the drain to its timeout", "[health]") {
  TestRelay relay;
  using Status = kvrelay::test::HealthCheckResponse;
  HealthWatch watch(relay);
  REQUIRE(watch.next() == Status::SERVING);
  bool cancelled_by_test = false;
  std::thread watcher([&] {
    auto ended = std::async(std::launch::async, [&] {
      while (watch.next()) {
      }
    });
    // Past this the drain would wait out its hour: the test cancels the watch to end it.
    if (ended.wait_for(std::chrono::seconds(60)) != std::future_status::ready) {
      cancelled_by_test = true;
      watch.cancel();
    }
  });
  relay.runtime().shutdown(std::chrono::hours(1));
  watcher.join();
  CHECK_FALSE(cancelled_by_test);
}

namespace {

// One pool whose snapshot is four 4 MiB chunks: a client that never reads stalls its stream
// before the last chunk (the transport buffers less than 12 MiB), so the stream keeps its
// encoder permit and the progress timeout guards it.
kvrelay::RelayOptions big_snapshot_options() {
  kvrelay::RelayOptions options = loopback_options();
  options.expected_unique_blocks = 1 << 22;
  return options;
}

}  // namespace

TEST_CASE("snapshot encoders: a queued subscriber waits its turn, or ends when the pool retires", "[limits]") {
  kvrelay::RelayOptions options = big_snapshot_options();
  options.snapshot_encoders = 1;
  options.max_subscribers_per_pool = 2;
  options.metrics_listen = "127.0.0.1:0";
  TestRelay relay(options);
  auto catalog = watch_catalog(relay);
  relay.put_worker(put_worker_request(kBackend, 1));
  const auto producer = await_single_pool(*catalog);

  auto stalled_client = relay.separate_wan_client();
  auto holder = subscribe_pool(relay, producer, "holder", stalled_client.get());  // never reads
  REQUIRE(relay.runtime().await_open_streams_at_least("hubs", 1));                // attached: it holds the permit
  auto queued = subscribe_pool(relay, producer, "queued");
  REQUIRE(relay.runtime().await_open_streams_at_least("pool", 2));

  SECTION("the permit passes on when the holder goes") {
    CHECK(only_pool(relay).subscribers() == 1);  // the queued stream is not attached while it waits
    holder->cancel();
    const auto snapshot = queued->next();  // arrives only once the holder's permit is back
    REQUIRE(snapshot.has_value());
    CHECK(snapshot->kind() == v1::FILTER_UPDATE_KIND_SNAPSHOT_CHUNK);
  }
  SECTION("one past the pool's limit is refused at once, not after a wait (decision 38)") {
    // The queued stream holds its per-pool permit once it is admitted (the total one comes first).
    const Labels admitted{{"rpc", "SubscribeKvPool"}, {"result", "admitted"}};
    const auto metrics = scrape_until(
        relay, [&](const Scrape& now) { return now.count("kv_relay_stream_admissions_total", admitted) >= 2; });
    REQUIRE(metrics.count("kv_relay_stream_admissions_total", admitted) == 2);
    auto third = subscribe_pool(relay, producer, "third");
    CHECK(third->ending() ==
          std::pair{grpc::StatusCode::RESOURCE_EXHAUSTED, std::string("RELAY_ERROR_REASON_RESOURCE_LIMIT")});
    holder->cancel();
  }
  SECTION("a waiting subscriber that goes away gives its permits back") {
    queued->cancel();
    queued->ending();
    REQUIRE(relay.runtime().await_open_streams_at_most("pool", 1));
    auto next = subscribe_pool(relay, producer, "next");
    REQUIRE(relay.runtime().await_open_streams_at_least("pool", 2));  // admitted, waiting in turn
    holder->cancel();
    const auto snapshot = next->next();
    REQUIRE(snapshot.has_value());
    CHECK(snapshot->kind() == v1::FILTER_UPDATE_KIND_SNAPSHOT_CHUNK);
  }
  SECTION("a waiting subscriber ends when its generation retires") {
    relay.remove_worker(kBackend, 1);
    const auto [code, reason] = queued->ending();
    CHECK(code == grpc::StatusCode::UNAVAILABLE);
    CHECK(reason == "RELAY_ERROR_REASON_PUBLICATION_UNAVAILABLE");
    holder->cancel();
  }
}

TEST_CASE("snapshot progress timeout ends a stalled subscriber alone, the generation goes on", "[limits]") {
  kvrelay::RelayOptions options = big_snapshot_options();
  // Long enough for the healthy reader below to take a 4 MiB chunk on a busy host (an ASan
  // build beside another test on two cores), as the timer runs for every stream.
  options.snapshot_progress_timeout_ms = 4000;
  options.snapshot_encoders = 1;
  TestRelay relay(options);
  auto catalog = watch_catalog(relay);
  relay.put_worker(put_worker_request(kBackend, 1));
  const auto producer = await_single_pool(*catalog);

  auto stalled_client = relay.separate_wan_client();
  auto stalled = subscribe_pool(relay, producer, "stalled", stalled_client.get());
  REQUIRE(relay.runtime().await_open_streams_at_least("pool", 1));
  REQUIRE(relay.runtime().await_serving_streams_at_most("pool", 0, std::chrono::seconds(60)));  // the timeout ended it
  CHECK(stalled->ending() ==
        std::pair{grpc::StatusCode::RESOURCE_EXHAUSTED, std::string("RELAY_ERROR_REASON_SNAPSHOT_PROGRESS_TIMEOUT")});
  // Its encoder permit came back, and the same generation still serves.
  auto healthy = subscribe_pool(relay, producer, "healthy");
  const auto snapshot = healthy->next();
  REQUIRE(snapshot.has_value());
  CHECK(snapshot->producer().layout_generation() == producer.layout_generation());
}

TEST_CASE("initialized hubs: pools with subscribers are limited, an idle pool frees its slot", "[limits]") {
  kvrelay::RelayOptions options = loopback_options();
  options.max_initialized_pool_hubs = 1;
  TestRelay relay(options);
  auto catalog = watch_catalog(relay);
  relay.put_worker(put_worker_request(kBackend, 1));
  relay.put_worker(put_worker_request(endpoint_ref("prod", "other"), 2));
  const auto pools = await_catalog(*catalog, 2);
  const auto first = pools.snapshot().pools(0).producer();
  const auto second = pools.snapshot().pools(1).producer();

  auto a = subscribe_pool(relay, first, "a");
  REQUIRE(a->next().has_value());
  auto b = subscribe_pool(relay, first, "b");  // the same pool needs no second slot
  REQUIRE(b->next().has_value());
  auto refused = subscribe_pool(relay, second, "c");
  CHECK(refused->ending() ==
        std::pair{grpc::StatusCode::RESOURCE_EXHAUSTED, std::string("RELAY_ERROR_REASON_RESOURCE_LIMIT")});
  a->cancel();
  b->cancel();
  a->ending();
  b->ending();
  REQUIRE(relay.runtime().await_open_streams_at_most("hubs", 0));
  auto admitted = subscribe_pool(relay, second, "d");
  CHECK(admitted->next().has_value());
}

TEST_CASE("a lagging stream returns its permit once its client has read the end", "[limits]") {
  kvrelay::RelayOptions options = big_snapshot_options();
  options.max_pool_streams_total = 1;
  options.stream_queue_frames = 1;
  options.publication_threshold = 1;
  TestRelay relay(options);
  auto catalog = watch_catalog(relay);
  relay.put_worker(put_worker_request(kBackend, 1));
  const auto producer = await_single_pool(*catalog);
  auto stalled_client = relay.separate_wan_client();
  auto stalled = subscribe_pool(relay, producer, "stalled", stalled_client.get());
  REQUIRE(relay.runtime().await_open_streams_at_least("hubs", 1));  // attached: it gets every delta
  // Deltas of a few hundred KiB in all while nothing is read: transport buffers fill, then
  // the outbox of one frame overflows.
  std::vector<ingest_v1::KvEventBatch> batches;
  for (std::uint64_t b = 0; b < 64; ++b) {
    std::vector<std::pair<std::uint64_t, std::uint64_t>> blocks;
    for (std::uint64_t i = 0; i < 500; ++i) blocks.emplace_back(b * 1000 + i + 1, b * 7919 + i * 104729 + 1);
    batches.push_back(stored_batch(kBackend, 1, 0, 1, b, blocks));
  }
  relay.publish(batches);
  REQUIRE(relay.runtime().await_serving_streams_at_most("pool", 0));  // the relay ended it
  // Its end waits behind the frame the client does not read: until the client reads, the call
  // holds that frame, and its permit (docs/protocol/limits.md#admission-limits).
  CHECK(relay.runtime().open_streams("pool") == 1);
  CHECK(subscribe_pool(relay, producer, "refused")->ending().second == "RELAY_ERROR_REASON_RESOURCE_LIMIT");
  CHECK(stalled->ending().second == "RELAY_ERROR_REASON_SUBSCRIBER_LAGGED");
  REQUIRE(relay.runtime().await_open_streams_at_most("pool", 0));
  auto next = subscribe_pool(relay, producer, "next");
  CHECK(next->next().has_value());
}

TEST_CASE("messages above --max-message-bytes are refused by the transport", "[limits]") {
  kvrelay::RelayOptions options = loopback_options();
  options.max_message_bytes = 4'259'904;  // the smallest allowed: one full chunk frame plus envelope
  TestRelay relay(options);
  auto request = put_worker_request(kBackend, 1);
  request.mutable_card()->set_source_path(std::string(5 << 20, 'x'));
  grpc::ClientContext context;
  ingest_v1::PutWorkerResponse response;
  CHECK(relay.ingest().PutWorker(&context, request, &response).error_code() == grpc::StatusCode::RESOURCE_EXHAUSTED);
  CHECK(relay.get_state().endpoints_size() == 0);  // nothing of it applied; the relay serves on
}

namespace {

namespace reflection = grpc::reflection::v1;

reflection::ServerReflectionResponse reflect(
    grpc::ClientReaderWriter<reflection::ServerReflectionRequest, reflection::ServerReflectionResponse>& stream,
    const reflection::ServerReflectionRequest& request) {
  REQUIRE(stream.Write(request));
  reflection::ServerReflectionResponse response;
  REQUIRE(stream.Read(&response));
  return response;
}

// A reflection stream the relay has answered once, held open (its server thread blocked in
// its next read), or the status of one it refused.
struct ReflectionStream {
  grpc::ClientContext context;
  std::unique_ptr<grpc::ClientReaderWriter<reflection::ServerReflectionRequest, reflection::ServerReflectionResponse>>
      stream;
  std::optional<grpc::Status> refused;

  explicit ReflectionStream(reflection::ServerReflection::Stub& stub) : stream(stub.ServerReflectionInfo(&context)) {
    reflection::ServerReflectionRequest list;
    list.set_list_services("*");
    reflection::ServerReflectionResponse response;
    if (!stream->Write(list) || !stream->Read(&response)) refused = stream->Finish();
  }

  bool close() {
    stream->WritesDone();
    return stream->Finish().ok();
  }
};

}  // namespace

TEST_CASE("reflection streams are bounded by the listener's threads, and the relay's services do not wait on them",
          "[limits][health]") {
  TestRelay relay;
  auto stub = reflection::ServerReflection::NewStub(relay.wan_channel());
  // Each answered stream holds one of the listener's 16 threads, and one thread always waits
  // for the next call: the 16th stream is refused.
  std::vector<std::unique_ptr<ReflectionStream>> held;
  std::unique_ptr<ReflectionStream> next;
  while (held.size() < 64 && !(next = std::make_unique<ReflectionStream>(*stub))->refused) {
    held.push_back(std::move(next));
  }
  REQUIRE(held.size() < 64);  // else `next` was held too
  REQUIRE(next->refused.has_value());
  CHECK(next->refused->error_code() == grpc::StatusCode::RESOURCE_EXHAUSTED);
  CHECK(held.size() == 15);
  // The relay's own calls and health run on other threads.
  grpc::ClientContext info_context;
  v1::RelayInfoRequest info_request;
  info_request.set_contract_marker(kMarker);
  v1::RelayInfo info;
  CHECK(relay.wan().GetRelayInfo(&info_context, info_request, &info).ok());
  CHECK(health(relay.wan_channel(), "dynamo.kvrelay.v1.KvEventRelay") == kvrelay::test::HealthCheckResponse::SERVING);
  // A stream that ends gives its thread back. The thread waits for calls again only after its
  // client has the status, so a call in between can still be refused: it is asked again.
  CHECK(held.back()->close());
  held.pop_back();
  std::unique_ptr<ReflectionStream> again;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (!(again && !again->refused) && std::chrono::steady_clock::now() < deadline) {
    again = std::make_unique<ReflectionStream>(*stub);
    if (again->refused) CHECK(again->refused->error_code() == grpc::StatusCode::RESOURCE_EXHAUSTED);
  }
  REQUIRE_FALSE(again->refused.has_value());
  CHECK(again->close());
  for (auto& stream : held) CHECK(stream->close());
}

TEST_CASE("reflection v1: the listener's services, and files that describe them whole", "[health]") {
  TestRelay relay;
  for (const auto& [channel, service] : {std::pair{relay.wan_channel(), "dynamo.kvrelay.v1.KvEventRelay"},
                                         std::pair{relay.ingest_channel(), "kvrelay.ingest.v1.RelayIngest"}}) {
    INFO(service);
    auto stub = reflection::ServerReflection::NewStub(channel);
    grpc::ClientContext context;
    auto stream = stub->ServerReflectionInfo(&context);

    reflection::ServerReflectionRequest list;
    list.set_list_services("*");
    const auto listing = reflect(*stream, list);
    std::vector<std::string> names;
    for (const auto& listed : listing.list_services_response().service()) names.push_back(listed.name());
    CHECK(names == std::vector<std::string>{service, "grpc.health.v1.Health", "grpc.reflection.v1.ServerReflection",
                                            "grpc.reflection.v1alpha.ServerReflection"});

    // The service's file and its imports are enough to build its descriptor.
    reflection::ServerReflectionRequest by_symbol;
    by_symbol.set_file_containing_symbol(service);
    const auto files = reflect(*stream, by_symbol);
    REQUIRE(files.has_file_descriptor_response());
    google::protobuf::SimpleDescriptorDatabase database;
    for (const std::string& bytes : files.file_descriptor_response().file_descriptor_proto()) {
      google::protobuf::FileDescriptorProto file;
      REQUIRE(file.ParseFromString(bytes));
      REQUIRE(database.Add(file));
    }
    google::protobuf::DescriptorPool pool(&database);
    const auto* described = pool.FindServiceByName(service);
    REQUIRE(described != nullptr);
    CHECK(described->method_count() > 0);

    reflection::ServerReflectionRequest unknown;
    unknown.set_file_containing_symbol("no.such.Symbol");
    const auto missing = reflect(*stream, unknown);
    REQUIRE(missing.has_error_response());
    CHECK(missing.error_response().error_code() == grpc::StatusCode::NOT_FOUND);
    CHECK(missing.original_request().file_containing_symbol() == "no.such.Symbol");

    stream->WritesDone();
    CHECK(stream->Finish().ok());
  }
}
