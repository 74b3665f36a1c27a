// SubscribeServingLoad and the ingest calls that feed it, through real gRPC
// (docs/protocol/serving-load.md): admission, windows, coverage, the worked examples, bad
// reports, lag and drain. Freshness and retention over time are pinned on virtual time in
// tests/actors/serving_load_window_test.cpp.
#include <catch2/catch.hpp>

#include <algorithm>
#include <limits>

#include "core/wire_validation.hpp"
#include "tests/integration/harness.hpp"
#include "tests/integration/scrape.hpp"

using namespace kvrelay::test;

namespace {

constexpr std::uint64_t kBase = 1'000'000;  // the examples' published_ms clock

kvrelay::RelayOptions fast_windows() {
  auto options = loopback_options();
  options.load_window_ms = 20;
  return options;
}

// Example fixture: w1 (dp 2, max_num_seqs 8) and w2 (dp 0 = 1, max_num_seqs 16) serving llama.
void put_example_workers(TestRelay& relay) {
  WorkerShape w1;
  w1.dp_size = 2;
  w1.max_num_seqs = 8;
  relay.put_worker(put_worker_request(kBackend, 1, w1));
  WorkerShape w2;
  w2.dp_size = 0;
  w2.max_num_seqs = 16;
  w2.push_sources = false;
  auto request = put_worker_request(kBackend, 2, w2);
  request.add_kv_sources()->mutable_push();  // rank 0
  relay.put_worker(request);
}

ingest_v1::SchedulerLoadReport scheduler_report(
    std::uint64_t router, std::uint64_t epoch, std::uint64_t sequence,
    std::vector<std::tuple<std::uint64_t, std::uint32_t, std::uint64_t, std::uint64_t>> ranks,
    std::uint64_t published_ms = 0, std::string group = "") {
  ingest_v1::SchedulerLoadReport report;
  *report.mutable_endpoint() = kBackend;
  report.set_router_id(router);
  report.set_router_epoch(epoch);
  report.set_sequence(sequence);
  report.set_replica_group(std::move(group));
  report.set_published_ms(published_ms);
  for (const auto& [worker, rank, decode, prefill] : ranks) {
    auto* r = report.add_ranks();
    r->set_worker_id(worker);
    r->set_dp_rank(rank);
    r->set_active_decode_blocks(decode);
    r->set_active_prefill_tokens(prefill);
  }
  return report;
}

ingest_v1::FrontendLoadReport frontend_report(std::uint64_t frontend, std::uint64_t incarnation, std::uint64_t sequence,
                                              std::uint64_t published_ms = 0) {
  ingest_v1::FrontendLoadReport report;
  report.set_namespace_("prod");
  report.set_frontend_id(frontend);
  report.set_incarnation(incarnation);
  report.set_sequence(sequence);
  report.set_serving_ready(true);
  report.set_published_ms(published_ms);
  return report;
}

ingest_v1::FrontendModelLoad* add_model(ingest_v1::FrontendLoadReport& report, const std::string& model,
                                        std::array<std::uint64_t, 4> gauges, std::array<std::uint64_t, 6> totals) {
  auto* m = report.add_models();
  m->set_canonical_model_id(model);
  auto* g = m->mutable_gauges();
  g->set_requests_awaiting_first_token(gauges[0]);
  g->set_requests_generating(gauges[1]);
  g->set_awaiting_first_token_input_tokens(gauges[2]);
  g->set_inflight_input_tokens(gauges[3]);
  auto* t = m->mutable_totals();
  t->set_requests_started(totals[0]);
  t->set_requests_completed(totals[1]);
  t->set_requests_failed(totals[2]);
  t->set_requests_cancelled(totals[3]);
  t->set_input_tokens(totals[4]);
  t->set_output_tokens(totals[5]);
  return m;
}

// Every check a consumer makes of a window and its entries.
void check_window(const v1::ServingLoadUpdate& update) {
  const auto fault = [](const kvrelay::wire::Status& status) {
    return status ? status->field + ": " + status->message : std::string();
  };
  CHECK(fault(kvrelay::wire::check_response(update)).empty());
  for (const auto& pool : update.pools()) CHECK(fault(kvrelay::wire::check_pool_serving_load(pool)).empty());
  for (const auto& model : update.models()) CHECK(fault(kvrelay::wire::check_model_serving_load(model)).empty());
}

// The next window accepted by `accept`; every window read on the way must pass the
// consumer's wire checks and follow its predecessor.
v1::ServingLoadUpdate await_window(StreamReader<v1::ServingLoadUpdate>& stream,
                                   const std::function<bool(const v1::ServingLoadUpdate&)>& accept) {
  std::optional<std::uint64_t> previous;
  const auto window = stream.until([&](const v1::ServingLoadUpdate& update) {
    check_window(update);
    if (previous) CHECK(update.window_sequence() == *previous + 1);
    previous = update.window_sequence();
    return accept(update);
  });
  REQUIRE(window.has_value());
  return *window;
}

const v1::ModelServingLoad* model_of(const v1::ServingLoadUpdate& update, const std::string& ns,
                                     const std::string& model) {
  for (const auto& m : update.models()) {
    if (m.namespace_() == ns && m.canonical_model_id() == model) return &m;
  }
  return nullptr;
}

bool pool_status_is(const v1::ServingLoadUpdate& update, v1::DataStatus status) {
  return update.pools_size() == 1 && update.pools(0).load().status() == status;
}

bool model_status_is(const v1::ServingLoadUpdate& update, v1::DataStatus status) {
  const auto* model = model_of(update, "prod", "llama");
  return model != nullptr && model->load().status() == status;
}

std::pair<grpc::StatusCode, std::string> open_refused(TestRelay& relay, std::uint32_t marker, std::string id) {
  v1::SubscribeServingLoadRequest request;
  request.set_subscriber_id(std::move(id));
  request.set_contract_marker(marker);
  StreamReader<v1::ServingLoadUpdate> stream(
      request, [&](grpc::ClientContext* c, const auto& r) { return relay.wan().SubscribeServingLoad(c, r); });
  return stream.ending();
}

}  // namespace

TEST_CASE("serving load: admission checks the marker, then the subscriber id, then its own limit", "[serving_load]") {
  auto options = fast_windows();
  options.max_serving_load_subscribers = 1;
  options.max_load_subscribers = 1;
  TestRelay relay(options);
  const auto mismatch =
      std::pair{grpc::StatusCode::FAILED_PRECONDITION, std::string("RELAY_ERROR_REASON_CONTRACT_MISMATCH")};
  const auto invalid = std::pair{grpc::StatusCode::INVALID_ARGUMENT, std::string("RELAY_ERROR_REASON_INVALID_REQUEST")};
  CHECK(open_refused(relay, 0, "ok") == mismatch);
  CHECK(open_refused(relay, 0, "") == mismatch);
  CHECK(open_refused(relay, kMarker, "") == invalid);
  CHECK(open_refused(relay, kMarker, std::string(129, 'a')) == invalid);
  CHECK(open_refused(relay, kMarker, "tab\there") == invalid);

  auto first = watch_serving_load(relay, "first");
  REQUIRE(first->next().has_value());
  CHECK(open_refused(relay, kMarker, "second") ==
        std::pair{grpc::StatusCode::RESOURCE_EXHAUSTED, std::string("RELAY_ERROR_REASON_RESOURCE_LIMIT")});
  auto pool_load = watch_load(relay, "pool-load");  // its own limit, not the serving-load one
  CHECK(pool_load->next().has_value());
  first->cancel();
  first->ending();
  REQUIRE(relay.runtime().await_open_streams_at_most("serving_load", 0));
  CHECK(watch_serving_load(relay, "third")->next().has_value());
}

TEST_CASE("serving load: windows are complete, contiguous and carry the relay's identity", "[serving_load]") {
  TestRelay relay(fast_windows());
  grpc::ClientContext context;
  v1::RelayInfoRequest info_request;
  info_request.set_contract_marker(kMarker);
  v1::RelayInfo info;
  REQUIRE(relay.wan().GetRelayInfo(&context, info_request, &info).ok());

  auto stream = watch_serving_load(relay);
  std::uint64_t last = 0;
  for (int i = 0; i < 5; ++i) {
    const auto window = stream->next();
    REQUIRE(window.has_value());
    check_window(*window);
    CHECK(window->protocol_version() == 1);
    CHECK(window->relay().SerializeAsString() == info.relay().SerializeAsString());
    CHECK(window->window_ms() == 20);
    CHECK(window->contract_marker() == kMarker);
    CHECK(window->observed_ms() > 0);
    if (i > 0) CHECK(window->window_sequence() == last + 1);
    last = window->window_sequence();
  }
  // A second subscriber starts at the current window.
  auto second = watch_serving_load(relay, "second");
  const auto first_of_second = second->next();
  REQUIRE(first_of_second.has_value());
  CHECK(first_of_second->window_sequence() >= last);
}

TEST_CASE("serving load: worked example A, every source reporting, is COMPLETE", "[serving_load]") {
  TestRelay relay(fast_windows());
  auto stream = watch_serving_load(relay);
  put_example_workers(relay);
  relay.set_schedulers(kBackend, {100});
  relay.set_frontends("prod", {7});
  const auto recorded =
      relay.report_scheduler(scheduler_report(100, 1, 1, {{1, 0, 10, 100}, {1, 1, 5, 0}, {2, 0, 20, 50}}, kBase + 200));
  CHECK(recorded.outcome() == ingest_v1::REPORT_OUTCOME_APPLIED);
  CHECK(recorded.ranks_recorded() == 3);
  auto fe = frontend_report(7, 42, 1, kBase + 300);
  add_model(fe, "llama", {2, 5, 300, 900}, {40, 30, 1, 2, 5000, 7000});
  CHECK(relay.report_frontend(fe) == ingest_v1::REPORT_OUTCOME_APPLIED);

  const auto window = await_window(*stream, [](const auto& u) {
    return pool_status_is(u, v1::DATA_STATUS_COMPLETE) && model_status_is(u, v1::DATA_STATUS_COMPLETE);
  });
  const auto& pool = window.pools(0);
  CHECK_FALSE(pool.load().has_requests());
  CHECK(pool.load().tokens().active_prefill_tokens() == 150);
  CHECK(pool.load().tokens().active_decode_blocks() == 35);
  CHECK(pool.load().source_observed_ms() == kBase + 200);
  CHECK(pool.deployment().live_workers() == 2);
  CHECK(pool.deployment().max_concurrency() == 32);
  REQUIRE(window.models_size() == 1);
  const auto& model = window.models(0);
  const auto& requests = model.load().requests();
  CHECK(requests.requests_started_total() == 40);
  CHECK(requests.requests_completed_total() == 30);
  CHECK(requests.requests_failed_total() == 1);
  CHECK(requests.requests_cancelled_total() == 2);
  CHECK(requests.requests_awaiting_first_token() == 2);
  CHECK(requests.requests_generating() == 5);
  const auto& tokens = model.load().tokens();
  CHECK(tokens.awaiting_first_token_input_tokens() == 300);
  CHECK(tokens.inflight_input_tokens() == 900);
  CHECK(tokens.input_tokens_total() == 5000);
  CHECK(tokens.output_tokens_total() == 7000);
  CHECK_FALSE(tokens.has_active_prefill_tokens());
  CHECK(model.load().source_observed_ms() == kBase + 300);
  CHECK(model.deployment().expected_frontends() == 1);
  CHECK(model.deployment().observed_frontends() == 1);
  CHECK(model.deployment().ready_frontends() == 1);
  REQUIRE(model.deployment().serving_pools_size() == 1);
  CHECK(model.deployment().serving_pools(0).SerializeAsString() == pool.producer().pool_id().SerializeAsString());

  SECTION("a declared router that is silent degrades the pool (example B)") {
    relay.set_schedulers(kBackend, {100, 101});
    const auto degraded =
        await_window(*stream, [](const auto& u) { return pool_status_is(u, v1::DATA_STATUS_DEGRADED); });
    CHECK_FALSE(degraded.pools(0).load().tokens().has_active_decode_blocks());
    CHECK(degraded.pools(0).load().source_observed_ms() == kBase + 200);
  }
  SECTION("an undeclared rank is ignored and never changes the sum") {
    const auto ignored = relay.report_scheduler(
        scheduler_report(100, 1, 2, {{1, 0, 10, 100}, {1, 1, 5, 0}, {2, 0, 20, 50}, {9, 0, 1000, 1000}}, kBase + 400));
    CHECK(ignored.ranks_recorded() == 3);
    CHECK(ignored.ranks_ignored() == 1);
    // The first window built from this report: the one that observed it.
    const auto next = await_window(*stream, [](const auto& u) {
      return u.pools_size() == 1 && u.pools(0).load().source_observed_ms() == kBase + 400;
    });
    CHECK(next.pools(0).load().tokens().active_decode_blocks() == 35);
  }
  SECTION("a router missing one declared rank degrades the pool") {
    relay.report_scheduler(scheduler_report(101, 1, 1, {{1, 0, 1, 1}}));
    relay.set_schedulers(kBackend, {100, 101});
    await_window(*stream, [](const auto& u) { return pool_status_is(u, v1::DATA_STATUS_DEGRADED); });
  }
}

TEST_CASE("serving load: example C, no reports, lists every pool and model UNAVAILABLE", "[serving_load]") {
  TestRelay relay(fast_windows());
  auto stream = watch_serving_load(relay);
  auto catalog = watch_catalog(relay);
  put_example_workers(relay);
  const auto producer = await_single_pool(*catalog);
  // Both workers' cards are in (the pool materializes with the first one).
  const auto window = await_window(*stream, [](const auto& u) {
    return u.pools_size() == 1 && u.models_size() == 1 && u.pools(0).deployment().live_workers() == 2;
  });
  const auto& pool = window.pools(0);
  CHECK(pool.producer().SerializeAsString() == producer.SerializeAsString());
  CHECK(pool.load().status() == v1::DATA_STATUS_UNAVAILABLE);
  CHECK(pool.load().has_tokens());
  CHECK_FALSE(pool.load().tokens().has_active_decode_blocks());
  CHECK(pool.load().source_observed_ms() == 0);
  CHECK(pool.deployment().live_workers() == 2);
  CHECK(pool.deployment().max_concurrency() == 32);
  const auto& model = window.models(0);
  CHECK(model.load().status() == v1::DATA_STATUS_UNAVAILABLE);
  CHECK(model.load().requests().requests_started_total() == 0);
  CHECK_FALSE(model.load().requests().has_requests_generating());
  CHECK(model.load().tokens().has_input_tokens_total());
  CHECK(model.deployment().expected_frontends() == 0);

  relay.set_frontends("prod", {7});
  await_window(*stream, [](const auto& u) {
    const auto* m = model_of(u, "prod", "llama");
    return m != nullptr && m->deployment().expected_frontends() == 1 &&
           m->load().status() == v1::DATA_STATUS_UNAVAILABLE;
  });

  SECTION("a withdrawn pool leaves the next window, a new generation comes back UNAVAILABLE") {
    relay.report_scheduler(scheduler_report(100, 1, 1, {{1, 0, 1, 1}, {1, 1, 1, 1}, {2, 0, 1, 1}}));
    await_window(*stream, [](const auto& u) { return pool_status_is(u, v1::DATA_STATUS_COMPLETE); });
    relay.remove_worker(kBackend, 1);
    relay.remove_worker(kBackend, 2);
    await_window(*stream, [](const auto& u) { return u.pools_size() == 0 && u.models_size() == 0; });
    put_example_workers(relay);
    const auto back = await_window(*stream, [](const auto& u) { return u.pools_size() == 1; });
    CHECK(back.pools(0).load().status() == v1::DATA_STATUS_UNAVAILABLE);
    CHECK(back.pools(0).producer().layout_generation() > producer.layout_generation());
  }
}

TEST_CASE("serving load: a scheduler report before the pool exists is NO_POOL, then reports count", "[serving_load]") {
  TestRelay relay(fast_windows());
  const auto early = relay.report_scheduler(scheduler_report(100, 1, 1, {{1, 0, 4, 4}}));
  CHECK(early.outcome() == ingest_v1::REPORT_OUTCOME_NO_POOL);
  CHECK(early.ranks_recorded() == 0);
  auto stream = watch_serving_load(relay);
  relay.put_worker(put_worker_request(kBackend, 1));
  await_window(*stream, [](const auto& u) { return u.pools_size() == 1; });
  const auto counted = relay.report_scheduler(scheduler_report(100, 1, 1, {{1, 0, 4, 4}}));
  CHECK(counted.outcome() == ingest_v1::REPORT_OUTCOME_APPLIED);
  const auto window = await_window(*stream, [](const auto& u) { return pool_status_is(u, v1::DATA_STATUS_COMPLETE); });
  CHECK(window.pools(0).load().tokens().active_decode_blocks() == 4);
  // One worker without max_num_seqs: the pool's concurrency is not known.
  CHECK(window.pools(0).deployment().live_workers() == 1);
  CHECK_FALSE(window.pools(0).deployment().has_max_concurrency());
}

TEST_CASE("serving load: report outcomes for duplicates, restarts and replaced incarnations (example E)",
          "[serving_load]") {
  TestRelay relay(fast_windows());
  auto stream = watch_serving_load(relay);
  const auto started = [](std::uint64_t incarnation, std::uint64_t sequence, std::uint64_t value) {
    auto report = frontend_report(7, incarnation, sequence);
    add_model(report, "llama", {0, 0, 0, 0}, {value, 0, 0, 0, 0, 0});
    return report;
  };
  CHECK(relay.report_frontend(started(42, 5, 50)) == ingest_v1::REPORT_OUTCOME_APPLIED);
  CHECK(relay.report_frontend(started(42, 5, 99)) == ingest_v1::REPORT_OUTCOME_DUPLICATE);
  CHECK(relay.report_frontend(started(42, 4, 99)) == ingest_v1::REPORT_OUTCOME_DUPLICATE);
  CHECK(relay.report_frontend(started(43, 1, 3)) == ingest_v1::REPORT_OUTCOME_RESTARTED);
  CHECK(relay.report_frontend(started(42, 6, 51)) == ingest_v1::REPORT_OUTCOME_REPLACED_INCARNATION);
  CHECK(relay.report_frontend(started(43, 2, 4)) == ingest_v1::REPORT_OUTCOME_APPLIED);
  const auto window = await_window(*stream, [](const auto& u) {
    const auto* m = model_of(u, "prod", "llama");
    return m != nullptr && m->load().requests().requests_started_total() == 54;
  });
  CHECK(model_of(window, "prod", "llama")->load().status() == v1::DATA_STATUS_COMPLETE);  // undeclared, fresh

  // The same rules for routers.
  relay.put_worker(put_worker_request(kBackend, 1));
  await_window(*stream, [](const auto& u) { return u.pools_size() == 1; });
  CHECK(relay.report_scheduler(scheduler_report(100, 1, 3, {{1, 0, 1, 1}})).outcome() ==
        ingest_v1::REPORT_OUTCOME_APPLIED);
  CHECK(relay.report_scheduler(scheduler_report(100, 1, 3, {{1, 0, 1, 1}})).outcome() ==
        ingest_v1::REPORT_OUTCOME_DUPLICATE);
  CHECK(relay.report_scheduler(scheduler_report(100, 2, 1, {{1, 0, 2, 2}})).outcome() ==
        ingest_v1::REPORT_OUTCOME_RESTARTED);
  CHECK(relay.report_scheduler(scheduler_report(100, 1, 4, {{1, 0, 9, 9}})).outcome() ==
        ingest_v1::REPORT_OUTCOME_REPLACED_INCARNATION);
  // A window built after every router report: one that shows a frontend report sent after them
  // (windows built between the reports show 1, the applied report before the restart).
  CHECK(relay.report_frontend(started(43, 3, 5)) == ingest_v1::REPORT_OUTCOME_APPLIED);
  const auto routers = await_window(*stream, [](const auto& u) {
    const auto* m = model_of(u, "prod", "llama");
    return m != nullptr && m->load().requests().requests_started_total() == 55 &&
           pool_status_is(u, v1::DATA_STATUS_COMPLETE);
  });
  CHECK(routers.pools(0).load().tokens().active_decode_blocks() == 2);  // not the replaced incarnation's 9
}

TEST_CASE("serving load: replica groups take the maximum, groups and standalone routers add up (example F)",
          "[serving_load]") {
  TestRelay relay(fast_windows());
  auto stream = watch_serving_load(relay);
  WorkerShape shape;
  shape.dp_size = 2;
  relay.put_worker(put_worker_request(kBackend, 9, shape));
  relay.set_schedulers(kBackend, {1, 2, 3});
  await_window(*stream, [](const auto& u) { return u.pools_size() == 1; });
  relay.report_scheduler(scheduler_report(1, 1, 1, {{9, 0, 12, 30}, {9, 1, 4, 5}}, kBase + 1, "a"));
  relay.report_scheduler(scheduler_report(2, 1, 1, {{9, 0, 10, 34}, {9, 1, 6, 7}}, kBase + 2, "a"));
  relay.report_scheduler(scheduler_report(3, 1, 1, {{9, 0, 1, 2}, {9, 1, 3, 4}}, kBase + 3));
  const auto window = await_window(*stream, [](const auto& u) { return pool_status_is(u, v1::DATA_STATUS_COMPLETE); });
  CHECK(window.pools(0).load().tokens().active_decode_blocks() == 12 + 6 + 1 + 3);
  CHECK(window.pools(0).load().tokens().active_prefill_tokens() == 34 + 7 + 2 + 4);
  CHECK(window.pools(0).load().source_observed_ms() == kBase + 1);

  SECTION("sums saturate") {
    constexpr auto kMax = std::numeric_limits<std::uint64_t>::max();
    relay.set_schedulers(kBackend, {4, 5});
    relay.report_scheduler(scheduler_report(4, 1, 1, {{9, 0, kMax, kMax}, {9, 1, 0, 0}}));
    relay.report_scheduler(scheduler_report(5, 1, 1, {{9, 0, kMax, 1}, {9, 1, 0, 0}}));
    const auto saturated = await_window(*stream, [](const auto& u) {
      return pool_status_is(u, v1::DATA_STATUS_COMPLETE) && u.pools(0).load().tokens().active_decode_blocks() == kMax;
    });
    CHECK(saturated.pools(0).load().tokens().active_prefill_tokens() == kMax);
  }
}

TEST_CASE("serving load: frontend coverage is per namespace and counts only fresh, listing, ready frontends",
          "[serving_load]") {
  TestRelay relay(fast_windows());
  auto stream = watch_serving_load(relay);
  relay.put_worker(put_worker_request(kBackend, 1));
  relay.set_frontends("prod", {7, 8});
  auto lab = frontend_report(5, 1, 1);
  lab.set_namespace_("lab");
  add_model(lab, "mistral", {1, 1, 1, 1}, {1, 1, 0, 0, 1, 1});
  relay.report_frontend(lab);  // covers lab only
  auto seven = frontend_report(7, 1, 1);
  add_model(seven, "llama", {1, 2, 3, 4}, {5, 0, 0, 0, 0, 0});
  relay.report_frontend(seven);
  auto eight = frontend_report(8, 1, 1);
  eight.set_serving_ready(false);
  add_model(eight, "other", {0, 0, 0, 0}, {0, 0, 0, 0, 0, 0});
  relay.report_frontend(eight);
  const auto window = await_window(*stream, [](const auto& u) { return model_status_is(u, v1::DATA_STATUS_COMPLETE); });
  // (lab, mistral), (prod, llama), (prod, other): sorted by namespace, then id.
  REQUIRE(window.models_size() == 3);
  CHECK(window.models(0).namespace_() == "lab");
  CHECK(window.models(1).canonical_model_id() == "llama");
  CHECK(window.models(2).canonical_model_id() == "other");
  const auto* llama = model_of(window, "prod", "llama");
  CHECK(llama->deployment().expected_frontends() == 2);
  CHECK(llama->deployment().observed_frontends() == 2);
  CHECK(llama->deployment().ready_frontends() == 1);
  CHECK(llama->load().requests().requests_generating() == 2);
  const auto* other = model_of(window, "prod", "other");
  CHECK(other->deployment().ready_frontends() == 0);  // not ready
  CHECK(other->deployment().serving_pools_size() == 0);
  CHECK(model_of(window, "lab", "mistral")->deployment().expected_frontends() == 1);
}

TEST_CASE("serving load: invalid reports answer INVALID_ARGUMENT naming the field and change nothing",
          "[serving_load]") {
  TestRelay relay(fast_windows());
  auto stream = watch_serving_load(relay);
  // A pool and its model, which every refused request below would change if it applied.
  relay.put_worker(put_worker_request(kBackend, 1));
  await_window(*stream, [](const auto& u) { return u.pools_size() == 1; });
  const auto refused = [&](auto call) {
    grpc::ClientContext context;
    const grpc::Status status = call(context);
    CHECK(status.error_code() == grpc::StatusCode::INVALID_ARGUMENT);
    return status.error_message();
  };
  const auto frontend = [&](const ingest_v1::FrontendLoadReport& report) {
    return refused([&](grpc::ClientContext& c) {
      ingest_v1::ReportFrontendLoadResponse response;
      return relay.ingest().ReportFrontendLoad(&c, report, &response);
    });
  };
  auto good = frontend_report(7, 1, 1);
  add_model(good, "llama", {1, 1, 1, 1}, {1, 1, 1, 1, 1, 1});
  auto bad = good;
  bad.set_namespace_(" prod");
  CHECK_THAT(frontend(bad), Catch::StartsWith("namespace:"));
  bad = good;
  bad.set_frontend_id(0);
  CHECK_THAT(frontend(bad), Catch::StartsWith("frontend_id:"));
  bad = good;
  bad.set_sequence(0);
  CHECK_THAT(frontend(bad), Catch::StartsWith("sequence:"));
  bad = good;
  add_model(bad, "llama", {0, 0, 0, 0}, {0, 0, 0, 0, 0, 0});
  CHECK_THAT(frontend(bad), Catch::StartsWith("models[1].canonical_model_id:"));
  bad = good;
  bad.mutable_models(0)->add_aliases("");
  CHECK_THAT(frontend(bad), Catch::StartsWith("models[0].aliases[0]:"));

  const auto scheduler = [&](const ingest_v1::SchedulerLoadReport& report) {
    return refused([&](grpc::ClientContext& c) {
      ingest_v1::ReportSchedulerLoadResponse response;
      return relay.ingest().ReportSchedulerLoad(&c, report, &response);
    });
  };
  auto router = scheduler_report(100, 1, 1, {{1, 0, 1, 1}, {1, 0, 2, 2}});
  CHECK_THAT(scheduler(router), Catch::StartsWith("ranks[1]:"));
  router = scheduler_report(0, 1, 1, {});
  CHECK_THAT(scheduler(router), Catch::StartsWith("router_id:"));
  router = scheduler_report(100, 1, 1, {});
  router.clear_endpoint();
  CHECK_THAT(scheduler(router), Catch::StartsWith("endpoint:"));
  router = scheduler_report(100, 1, 1, {}, 0, "group ");
  CHECK_THAT(scheduler(router), Catch::StartsWith("replica_group:"));

  CHECK_THAT(refused([&](grpc::ClientContext& c) {
               ingest_v1::SetFrontendsRequest request;
               request.set_namespace_("prod");
               request.add_frontend_ids(7);
               request.add_frontend_ids(0);
               ingest_v1::SetFrontendsResponse response;
               return relay.ingest().SetFrontends(&c, request, &response);
             }),
             Catch::StartsWith("frontend_ids[1]:"));
  CHECK_THAT(refused([&](grpc::ClientContext& c) {
               ingest_v1::SetSchedulersRequest request;
               *request.mutable_endpoint() = kBackend;
               request.add_router_ids(0);
               ingest_v1::SetSchedulersResponse response;
               return relay.ingest().SetSchedulers(&c, request, &response);
             }),
             Catch::StartsWith("router_ids[0]:"));

  // Nothing was applied: valid reports sent after them show in a window as if the refused
  // ones never came. Router 100 alone covers the pool (no router 0 was declared), the
  // refused report's decode blocks are not in it, no frontend was declared for prod, and the
  // refused frontend reports left no model behind.
  CHECK(relay.report_scheduler(scheduler_report(100, 1, 1, {{1, 0, 3, 3}})).outcome() ==
        ingest_v1::REPORT_OUTCOME_APPLIED);
  auto sentinel = frontend_report(8, 1, 1);
  sentinel.set_namespace_("sentinel");
  add_model(sentinel, "probe", {1, 1, 1, 1}, {1, 1, 1, 1, 1, 1});
  relay.report_frontend(sentinel);
  const auto later = await_window(*stream, [](const auto& u) {
    return model_of(u, "sentinel", "probe") != nullptr && pool_status_is(u, v1::DATA_STATUS_COMPLETE);
  });
  CHECK(later.pools(0).load().tokens().active_decode_blocks() == 3);
  CHECK(later.models_size() == 2);  // prod/llama, the worker's, and the sentinel's
  REQUIRE(model_of(later, "prod", "llama") != nullptr);
  CHECK(model_of(later, "prod", "llama")->deployment().expected_frontends() == 0);
  CHECK(model_of(later, "prod", "llama")->load().requests().requests_started_total() == 0);

  // A report of 1 000 models with 256-byte ids is accepted.
  auto big = frontend_report(9, 1, 1);
  big.set_namespace_("big");  // apart from prod, which holds the worker's model
  for (int i = 0; i < 1000; ++i) {
    std::string id = std::to_string(i);
    id.resize(256, 'x');
    add_model(big, id, {0, 0, 0, 0}, {0, 0, 0, 0, 0, 0});
  }
  CHECK(relay.report_frontend(big) == ingest_v1::REPORT_OUTCOME_APPLIED);
  // Counted in its own namespace: the sentinel stays in the windows until it goes stale, and a
  // window without it and with the big report need not exist on a slow machine (both expire
  // 3 s after their reports, which were sent moments apart).
  await_window(*stream, [&](const auto& u) {
    return std::count_if(u.models().begin(), u.models().end(),
                         [&](const auto& m) { return m.namespace_() == big.namespace_(); }) == 1000;
  });
}

TEST_CASE("serving load: a new source or new models past the limits are RESOURCE_EXHAUSTED and keep nothing",
          "[serving_load][limits]") {
  auto options = fast_windows();
  options.max_serving_load_sources = 1;
  options.max_serving_load_models = 1;
  options.metrics_listen = "127.0.0.1:0";
  TestRelay relay(options);
  auto stream = watch_serving_load(relay);
  auto first = frontend_report(7, 1, 1);
  add_model(first, "llama", {1, 0, 0, 0}, {1, 0, 0, 0, 0, 0});
  CHECK(relay.report_frontend(first) == ingest_v1::REPORT_OUTCOME_APPLIED);
  const auto refused = [&](const ingest_v1::FrontendLoadReport& report) {
    grpc::ClientContext context;
    ingest_v1::ReportFrontendLoadResponse response;
    const grpc::Status status = relay.ingest().ReportFrontendLoad(&context, report, &response);
    CHECK(status.error_code() == grpc::StatusCode::RESOURCE_EXHAUSTED);
    return status.error_message();
  };
  auto second = frontend_report(8, 1, 1);
  add_model(second, "llama", {5, 0, 0, 0}, {5, 0, 0, 0, 0, 0});
  CHECK(refused(second) ==
        "frontend 8 of namespace prod: the relay holds the reports of 1 frontends and routers, the most "
        "--max-serving-load-sources (1) allows");
  auto more_models = frontend_report(7, 1, 2);
  add_model(more_models, "llama", {2, 0, 0, 0}, {2, 0, 0, 0, 0, 0});
  add_model(more_models, "mistral", {1, 0, 0, 0}, {1, 0, 0, 0, 0, 0});
  CHECK(refused(more_models) ==
        "frontend 7 of namespace prod: its new models (1) would make 2 models in all, above "
        "--max-serving-load-models (1)");
  // Nothing of either was kept: a report of frontend 7 after them applies as its next.
  auto next = frontend_report(7, 1, 2);
  add_model(next, "llama", {3, 0, 0, 0}, {3, 0, 0, 0, 0, 0});
  CHECK(relay.report_frontend(next) == ingest_v1::REPORT_OUTCOME_APPLIED);
  const auto window = await_window(*stream, [](const auto& u) {
    const auto* m = model_of(u, "prod", "llama");
    return m != nullptr && m->load().requests().requests_started_total() == 3;
  });
  CHECK(window.models_size() == 1);
  CHECK(model_of(window, "prod", "llama")->deployment().observed_frontends() == 1);
  const Scrape metrics = scrape(relay);
  CHECK(metrics.value("kv_relay_ingest_limit_refusals_total", {{"limit", "serving_load_sources"}}) == 1);
  CHECK(metrics.value("kv_relay_ingest_limit_refusals_total", {{"limit", "serving_load_models"}}) == 1);
}

TEST_CASE("serving load: new models whose names would not fit half of --max-message-bytes are RESOURCE_EXHAUSTED",
          "[serving_load][limits]") {
  auto options = fast_windows();
  options.max_message_bytes = 4'259'904;  // the smallest allowed: model names may take 2 129 952 bytes
  TestRelay relay(options);
  auto stream = watch_serving_load(relay);
  const auto model_name = [](int i) { return std::to_string(1000 + i) + std::string(3996, 'm'); };
  auto first = frontend_report(7, 1, 1);
  for (int i = 0; i < 500; ++i) add_model(first, model_name(i), {1, 0, 0, 0}, {1, 0, 0, 0, 0, 0});
  CHECK(relay.report_frontend(first) == ingest_v1::REPORT_OUTCOME_APPLIED);  // 500 x (4 + 4 000) bytes

  auto more = frontend_report(7, 1, 2);
  for (int i = 500; i < 532; ++i) add_model(more, model_name(i), {1, 0, 0, 0}, {1, 0, 0, 0, 0, 0});
  grpc::ClientContext context;
  ingest_v1::ReportFrontendLoadResponse response;
  const grpc::Status status = relay.ingest().ReportFrontendLoad(&context, more, &response);
  CHECK(status.error_code() == grpc::StatusCode::RESOURCE_EXHAUSTED);
  CHECK(status.error_message() ==
        "frontend 7 of namespace prod: its new models' names (128128 bytes) would make 2130128 bytes of model names "
        "in all, above half of --max-message-bytes (2129952): a window may carry them all");
  // Every window still fits one message and reaches the subscriber with the 500 models kept.
  const auto window = await_window(*stream, [](const auto& u) { return u.models_size() == 500; });
  CHECK(window.ByteSizeLong() < options.max_message_bytes);
}

TEST_CASE("serving load: deployment follows the workers' cards", "[serving_load]") {
  TestRelay relay(fast_windows());
  auto stream = watch_serving_load(relay);
  put_example_workers(relay);
  await_window(*stream, [](const auto& u) {
    return u.pools_size() == 1 && u.pools(0).deployment().has_max_concurrency() &&
           u.pools(0).deployment().max_concurrency() == 32;
  });
  // A third worker without max_num_seqs: the pool's concurrency is no longer known.
  auto undeclared = put_worker_request(kBackend, 3);
  undeclared.clear_kv_sources();
  relay.put_worker(undeclared);
  await_window(*stream, [](const auto& u) {
    return u.pools_size() == 1 && u.pools(0).deployment().live_workers() == 3 &&
           !u.pools(0).deployment().has_max_concurrency();
  });
  relay.remove_worker(kBackend, 3);
  await_window(*stream, [](const auto& u) {
    return u.pools_size() == 1 && u.pools(0).deployment().live_workers() == 2 &&
           u.pools(0).deployment().has_max_concurrency();
  });
}

TEST_CASE("serving load: a client that never reads ends SUBSCRIBER_LAGGED and frees its permit once it reads the end",
          "[serving_load]") {
  auto options = loopback_options();
  options.load_window_ms = 2;
  options.load_queue_windows = 2;
  options.max_serving_load_subscribers = 1;
  options.serving_load_freshness_ms = 600000;  // the frontend's models stay in every window
  TestRelay relay(options);
  // Windows of about 300 KiB fill the transport's buffers within a few windows.
  auto big = frontend_report(9, 1, 1);
  big.set_namespace_("big");  // apart from prod, which holds the worker's model
  for (int i = 0; i < 1000; ++i) {
    std::string id = std::to_string(i);
    id.resize(256, 'x');
    add_model(big, id, {0, 0, 0, 0}, {0, 0, 0, 0, 0, 0});
  }
  relay.report_frontend(big);
  auto stalled_client = relay.separate_wan_client();
  auto stalled = watch_serving_load(relay, "stalled", stalled_client.get());
  REQUIRE(relay.runtime().await_open_streams_at_least("serving_load", 1));
  REQUIRE(relay.runtime().await_serving_streams_at_most("serving_load", 0, std::chrono::seconds(30)));
  CHECK(stalled->ending() ==
        std::pair{grpc::StatusCode::RESOURCE_EXHAUSTED, std::string("RELAY_ERROR_REASON_SUBSCRIBER_LAGGED")});
  REQUIRE(relay.runtime().await_open_streams_at_most("serving_load", 0));  // the call is over: its permit is back
  auto next = watch_serving_load(relay, "next");
  const auto window = next->next();
  REQUIRE(window.has_value());
  CHECK(window->models_size() == 1000);
}

TEST_CASE("serving load: drain ends open streams with PUBLICATION_UNAVAILABLE", "[serving_load]") {
  TestRelay relay(fast_windows());
  auto stream = watch_serving_load(relay);
  REQUIRE(stream->next().has_value());
  relay.shutdown();
  CHECK(stream->ending() ==
        std::pair{grpc::StatusCode::UNAVAILABLE, std::string("RELAY_ERROR_REASON_PUBLICATION_UNAVAILABLE")});
}

TEST_CASE("serving load: the topology file declares frontends and routers, and checks them", "[serving_load]") {
  auto options = fast_windows();
  ingest_v1::TopologyFile file;
  file.set_version(1);
  auto* endpoint = file.add_endpoints();
  *endpoint->mutable_endpoint() = kBackend;
  auto* worker = endpoint->add_workers();
  const auto request = put_worker_request(kBackend, 1);
  worker->set_worker_id(1);
  *worker->mutable_card() = request.card();
  *worker->mutable_kv_sources() = request.kv_sources();
  endpoint->add_scheduler_router_ids(100);
  endpoint->add_scheduler_router_ids(101);
  auto* frontends = file.add_frontends();
  frontends->set_namespace_("prod");
  frontends->add_frontend_ids(7);

  SECTION("declared at start, replaced by a later call") {
    options.topology = file;
    TestRelay relay(options);
    auto stream = watch_serving_load(relay);
    const auto window = await_window(*stream, [](const auto& u) { return u.models_size() == 1; });
    CHECK(window.models(0).deployment().expected_frontends() == 1);
    // Router 101 is declared too: while it is silent the pool is DEGRADED (an undeclared
    // router covering every rank would make it COMPLETE).
    relay.report_scheduler(scheduler_report(100, 1, 1, {{1, 0, 3, 3}}));
    await_window(*stream, [](const auto& u) { return pool_status_is(u, v1::DATA_STATUS_DEGRADED); });
    relay.report_scheduler(scheduler_report(101, 1, 1, {{1, 0, 3, 3}}));
    await_window(*stream, [](const auto& u) { return pool_status_is(u, v1::DATA_STATUS_COMPLETE); });
    relay.set_frontends("prod", {});
    await_window(*stream, [](const auto& u) {
      return u.models_size() == 1 && u.models(0).deployment().expected_frontends() == 0;
    });
  }
  SECTION("a zero id fails the start, naming the field") {
    file.mutable_frontends(0)->add_frontend_ids(0);
    options.topology = file;
    const auto started = kvrelay::RelayRuntime::start(options);
    REQUIRE_FALSE(started.has_value());
    CHECK_THAT(started.error().message, Catch::Contains("frontends[0].frontend_ids[1]"));
  }
  SECTION("a namespace listed twice fails the start") {
    *file.add_frontends() = file.frontends(0);
    options.topology = file;
    const auto started = kvrelay::RelayRuntime::start(options);
    REQUIRE_FALSE(started.has_value());
    CHECK_THAT(started.error().message, Catch::Contains("frontends[1].namespace"));
  }
  SECTION("a zero router id fails the start") {
    file.mutable_endpoints(0)->add_scheduler_router_ids(0);
    options.topology = file;
    const auto started = kvrelay::RelayRuntime::start(options);
    REQUIRE_FALSE(started.has_value());
    CHECK_THAT(started.error().message, Catch::Contains("endpoints[0].scheduler_router_ids[2]"));
  }
}
