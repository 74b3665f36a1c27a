// Serving-load windows: the worked examples of docs/protocol/serving-load.md#examples and the
// rules around them. Every window is checked by the consumer's validator first.
#include <catch2/catch.hpp>

#include <google/protobuf/text_format.h>

#include <array>
#include <chrono>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "core/serving_load.hpp"
#include "core/wire_validation.hpp"

using namespace kvrelay;
using namespace kvrelay::serving_load;

namespace {

constexpr std::uint64_t kMax = std::numeric_limits<std::uint64_t>::max();
constexpr std::uint64_t kWallBase = 1'000'000;  // published_ms = kWallBase + relay time (ms)
const EndpointKey kEndpoint{"prod", "backend", "generate"};
const TimePoint kStart = TimePoint{} + std::chrono::hours(1);

TimePoint at(std::uint64_t ms) { return kStart + std::chrono::milliseconds(ms); }

// ---- pools

v1::KvPoolId pool_id(char tag) {
  v1::KvPoolId pool;
  pool.set_identity_version(wire::kPoolIdentityVersion);
  auto* cache = pool.mutable_indexer_domain()->mutable_cache_semantics();
  cache->set_digest(std::string(16, tag));
  cache->set_source(v1::IDENTITY_SOURCE_DEFAULT_DERIVED);
  auto* routing = pool.mutable_indexer_domain()->mutable_routing_scope();
  routing->set_digest(std::string(16, '\x22'));
  routing->set_source(v1::IDENTITY_SOURCE_DEFAULT_DERIVED);
  pool.set_dc_id(1);
  return pool;
}

v1::ProducerIdentity producer(char tag, std::uint64_t incarnation = 1) {
  v1::ProducerIdentity identity;
  *identity.mutable_pool_id() = pool_id(tag);
  identity.set_producer_incarnation(incarnation);
  identity.set_layout_generation(1);
  auto* format = identity.mutable_ckf_format();
  format->set_format_version(1);
  format->set_seed(0x5DEECE66D1B54A33);
  format->set_bucket_count(524288);
  format->set_fingerprint_bits(16);
  format->set_slots_per_bucket(4);
  return identity;
}

RuntimeConfig worker(std::uint32_t dp_size, std::optional<std::uint64_t> max_num_seqs, std::uint32_t dp_start = 0) {
  RuntimeConfig config;
  config.data_parallel_start_rank = dp_start;
  config.data_parallel_size = dp_size;
  config.max_num_seqs = max_num_seqs;
  return config;
}

// The fixture of the examples: w1 (dp 2, max_num_seqs 8) and w2 (dp 1, max_num_seqs 16), so
// D(P) = {(1,0), (1,1), (2,0)} and max_concurrency 32.
PoolFacts pool_facts(char tag = 'P', EndpointKey endpoint = kEndpoint, std::vector<std::string> models = {"llama"}) {
  return PoolFacts{std::move(endpoint), producer(tag), {{1, worker(2, 8)}, {2, worker(1, 16)}}, std::move(models)};
}

// ---- reports; the relay receives each at published_ms - kWallBase

struct RankLoad {
  std::uint64_t worker_id;
  std::uint32_t dp_rank;
  std::uint64_t decode;
  std::uint64_t prefill;
};

const std::vector<RankLoad> kAllRanks = {{1, 0, 10, 100}, {1, 1, 5, 0}, {2, 0, 20, 50}};

ingest_v1::SchedulerLoadReport scheduler_report(std::uint64_t ms, std::uint64_t router, std::uint64_t epoch,
                                                std::uint64_t sequence, const std::vector<RankLoad>& ranks,
                                                const std::string& group = "",
                                                const EndpointKey& endpoint = kEndpoint) {
  ingest_v1::SchedulerLoadReport report;
  report.mutable_endpoint()->set_namespace_(endpoint.ns);
  report.mutable_endpoint()->set_component(endpoint.component);
  report.mutable_endpoint()->set_endpoint(endpoint.endpoint);
  report.set_router_id(router);
  report.set_router_epoch(epoch);
  report.set_sequence(sequence);
  report.set_replica_group(group);
  for (const RankLoad& rank : ranks) {
    auto* out = report.add_ranks();
    out->set_worker_id(rank.worker_id);
    out->set_dp_rank(rank.dp_rank);
    out->set_active_decode_blocks(rank.decode);
    out->set_active_prefill_tokens(rank.prefill);
  }
  report.set_published_ms(kWallBase + ms);
  return report;
}

struct ModelLoad {
  ModelLoad(std::string model_id, std::array<std::uint64_t, 4> model_gauges = {},
            std::array<std::uint64_t, 6> model_totals = {})
      : id(std::move(model_id)), gauges(model_gauges), totals(model_totals) {}
  std::string id;
  std::array<std::uint64_t, 4> gauges;  // awaiting, generating, awaiting input, inflight input
  std::array<std::uint64_t, 6> totals;  // started, completed, failed, cancelled, input, output
};

ingest_v1::FrontendLoadReport frontend_report(std::uint64_t ms, const std::string& ns, std::uint64_t frontend,
                                              std::uint64_t incarnation, std::uint64_t sequence, bool ready,
                                              const std::vector<ModelLoad>& models) {
  ingest_v1::FrontendLoadReport report;
  report.set_namespace_(ns);
  report.set_frontend_id(frontend);
  report.set_incarnation(incarnation);
  report.set_sequence(sequence);
  report.set_serving_ready(ready);
  for (const ModelLoad& model : models) {
    auto* out = report.add_models();
    out->set_canonical_model_id(model.id);
    auto* gauges = out->mutable_gauges();
    gauges->set_requests_awaiting_first_token(model.gauges[0]);
    gauges->set_requests_generating(model.gauges[1]);
    gauges->set_awaiting_first_token_input_tokens(model.gauges[2]);
    gauges->set_inflight_input_tokens(model.gauges[3]);
    auto* totals = out->mutable_totals();
    totals->set_requests_started(model.totals[0]);
    totals->set_requests_completed(model.totals[1]);
    totals->set_requests_failed(model.totals[2]);
    totals->set_requests_cancelled(model.totals[3]);
    totals->set_input_tokens(model.totals[4]);
    totals->set_output_tokens(model.totals[5]);
  }
  report.set_published_ms(kWallBase + ms);
  return report;
}

// One started-requests counter, the only one example E follows.
ingest_v1::FrontendLoadReport started(std::uint64_t ms, std::uint64_t incarnation, std::uint64_t sequence,
                                      std::uint64_t requests_started) {
  return frontend_report(ms, "prod", 7, incarnation, sequence, true, {{"llama", {}, {requests_started}}});
}

SchedulerOutcome send(ServingLoad& load, const ingest_v1::SchedulerLoadReport& report) {
  const std::uint64_t ms = report.published_ms() - kWallBase;
  return load.report_scheduler(report, at(ms), report.published_ms());
}

ingest_v1::ReportOutcome send(ServingLoad& load, const ingest_v1::FrontendLoadReport& report) {
  const std::uint64_t ms = report.published_ms() - kWallBase;
  return load.report_frontend(report, at(ms), report.published_ms());
}

// "<outcome> recorded <n> ignored <m>": one string asserts all three and reads well when it fails.
std::string outcome(ingest_v1::ReportOutcome report_outcome, std::uint32_t recorded, std::uint32_t ignored) {
  return ingest_v1::ReportOutcome_Name(report_outcome) + " recorded " + std::to_string(recorded) + " ignored " +
         std::to_string(ignored);
}

std::string describe(const SchedulerOutcome& result) {
  return outcome(result.outcome, result.ranks_recorded, result.ranks_ignored);
}

// ---- windows

std::string describe(const wire::Status& status) {
  if (!status) return "ok";
  return std::string(wire::to_string(status->code)) + " @ " + status->field;
}

// A window as the publisher sends it, required to pass the consumer's validator.
v1::ServingLoadUpdate window(ServingLoad& load, std::uint64_t ms) {
  v1::ServingLoadUpdate update;
  update.set_protocol_version(wire::kProtocolVersion);
  update.mutable_relay()->set_drt_instance_id(7);
  update.mutable_relay()->set_relay_incarnation(9);
  update.set_contract_marker(wire::kContractMarker);
  load.build(at(ms), update);
  REQUIRE(describe(wire::check_response(update)) == "ok");
  for (const auto& pool : update.pools()) REQUIRE(describe(wire::check_pool_serving_load(pool)) == "ok");
  for (const auto& model : update.models()) REQUIRE(describe(wire::check_model_serving_load(model)) == "ok");
  return update;
}

std::string text(const google::protobuf::Message& message) {
  google::protobuf::TextFormat::Printer printer;
  printer.SetSingleLineMode(true);
  std::string out;
  printer.PrintToString(message, &out);
  return out;
}

// Expected text, normalised through the same printer so presence and field order compare exactly.
template <typename Message>
std::string expected(const std::string& text_proto) {
  Message message;
  REQUIRE(google::protobuf::TextFormat::ParseFromString(text_proto, &message));
  return text(message);
}

// A pool entry without its producer (checked with producer_key where it matters).
std::string content(v1::PoolServingLoad pool) {
  pool.clear_producer();
  return text(pool);
}

// A model entry without its serving pools (checked with pool_keys where they matter).
std::string content(v1::ModelServingLoad model) {
  model.mutable_deployment()->clear_serving_pools();
  return text(model);
}

std::vector<wire::PoolKey> pool_keys(const v1::ModelServingLoad& model) {
  std::vector<wire::PoolKey> keys;
  for (const auto& id : model.deployment().serving_pools()) keys.push_back(wire::pool_key(id));
  return keys;
}

std::vector<std::pair<std::string, std::string>> model_keys(const v1::ServingLoadUpdate& update) {
  std::vector<std::pair<std::string, std::string>> keys;
  for (const auto& model : update.models()) keys.emplace_back(model.namespace_(), model.canonical_model_id());
  return keys;
}

v1::DataStatus pool_status(ServingLoad& load, std::uint64_t ms) {
  const auto update = window(load, ms);
  REQUIRE(update.pools_size() == 1);
  return update.pools(0).load().status();
}

v1::ModelServingLoad only_model(const v1::ServingLoadUpdate& update) {
  REQUIRE(update.models_size() == 1);
  return update.models(0);
}

constexpr auto kApplied = ingest_v1::REPORT_OUTCOME_APPLIED;
constexpr auto kRestarted = ingest_v1::REPORT_OUTCOME_RESTARTED;
constexpr auto kDuplicate = ingest_v1::REPORT_OUTCOME_DUPLICATE;
constexpr auto kReplaced = ingest_v1::REPORT_OUTCOME_REPLACED_INCARNATION;

const char* const kPoolUnavailable =
    "load { tokens { } status: DATA_STATUS_UNAVAILABLE } deployment { live_workers: 2 max_concurrency: 32 }";

// Example A's state at t0.3: every source reported.
ServingLoad example_a() {
  ServingLoad load;
  load.set_pools({pool_facts()});
  load.set_schedulers(kEndpoint, {100});
  load.set_frontends("prod", {7});
  REQUIRE(describe(send(load, scheduler_report(200, 100, 1, 1, kAllRanks))) == outcome(kApplied, 3, 0));
  REQUIRE(send(load, frontend_report(300, "prod", 7, 42, 1, true,
                                     {{"llama", {2, 5, 300, 900}, {40, 30, 1, 2, 5000, 7000}}})) == kApplied);
  return load;
}

}  // namespace

TEST_CASE("serving load: example A, every source reported is COMPLETE", "[serving_load]") {
  ServingLoad load = example_a();
  const auto update = window(load, 1000);
  REQUIRE(update.pools_size() == 1);
  CHECK(wire::producer_key(update.pools(0).producer()) == wire::producer_key(producer('P')));
  CHECK(content(update.pools(0)) ==
        expected<v1::PoolServingLoad>(
            "load { tokens { active_prefill_tokens: 150 active_decode_blocks: 35 } status: DATA_STATUS_COMPLETE "
            "source_observed_ms: 1000200 } deployment { live_workers: 2 max_concurrency: 32 }"));
  const auto& model = only_model(update);
  CHECK(content(model) ==
        expected<v1::ModelServingLoad>(
            "namespace: 'prod' canonical_model_id: 'llama' load { requests { requests_started_total: 40 "
            "requests_completed_total: 30 requests_failed_total: 1 requests_cancelled_total: 2 "
            "requests_awaiting_first_token: 2 requests_generating: 5 } tokens { awaiting_first_token_input_tokens: 300 "
            "inflight_input_tokens: 900 input_tokens_total: 5000 output_tokens_total: 7000 } status: "
            "DATA_STATUS_COMPLETE source_observed_ms: 1000300 } deployment { expected_frontends: 1 "
            "observed_frontends: 1 ready_frontends: 1 }"));
  CHECK(pool_keys(model) == std::vector{wire::pool_key(pool_id('P'))});
}

TEST_CASE("serving load: example B, a declared silent router and a stale declared frontend degrade", "[serving_load]") {
  ServingLoad load = example_a();
  const ModelLoad fe7{"llama", {2, 5, 300, 900}, {45, 34, 1, 2, 5600, 7800}};
  const ModelLoad fe8{"llama", {1, 0, 50, 50}, {1, 0, 0, 0, 50, 0}};
  REQUIRE(describe(send(load, scheduler_report(1200, 100, 1, 2, kAllRanks))) == outcome(kApplied, 3, 0));
  REQUIRE(send(load, frontend_report(1300, "prod", 7, 42, 2, true, {fe7})) == kApplied);
  load.set_schedulers(kEndpoint, {100, 101});
  REQUIRE(send(load, frontend_report(1600, "prod", 8, 9, 1, false, {fe8})) == kApplied);

  const auto t2 = window(load, 2000);
  CHECK(content(t2.pools(0)) ==
        expected<v1::PoolServingLoad>("load { tokens { } status: DATA_STATUS_DEGRADED source_observed_ms: 1001200 } "
                                      "deployment { live_workers: 2 max_concurrency: 32 }"));
  const std::string complete_model = expected<v1::ModelServingLoad>(
      "namespace: 'prod' canonical_model_id: 'llama' load { requests { requests_started_total: 46 "
      "requests_completed_total: 34 requests_failed_total: 1 requests_cancelled_total: 2 "
      "requests_awaiting_first_token: 3 requests_generating: 5 } tokens { awaiting_first_token_input_tokens: 350 "
      "inflight_input_tokens: 950 input_tokens_total: 5650 output_tokens_total: 7800 } status: DATA_STATUS_COMPLETE "
      "source_observed_ms: 1001300 } deployment { expected_frontends: 2 observed_frontends: 2 ready_frontends: 1 }");
  CHECK(content(only_model(t2)) == complete_model);

  // fe 7 stops; fe 8 keeps reporting unchanged totals every second.
  REQUIRE(send(load, frontend_report(2600, "prod", 8, 9, 2, false, {fe8})) == kApplied);
  CHECK(content(only_model(window(load, 3000))) == complete_model);
  REQUIRE(send(load, frontend_report(3600, "prod", 8, 9, 3, false, {fe8})) == kApplied);
  CHECK(content(only_model(window(load, 4000))) == complete_model);
  CHECK(content(only_model(window(load, 4300))) == complete_model);  // fe 7 exactly 3.0 s old: still fresh
  REQUIRE(send(load, frontend_report(4600, "prod", 8, 9, 4, false, {fe8})) == kApplied);
  CHECK(content(only_model(window(load, 5000))) ==
        expected<v1::ModelServingLoad>(
            "namespace: 'prod' canonical_model_id: 'llama' load { requests { requests_started_total: 46 "
            "requests_completed_total: 34 requests_failed_total: 1 requests_cancelled_total: 2 } tokens { "
            "input_tokens_total: 5650 output_tokens_total: 7800 } status: DATA_STATUS_DEGRADED "
            "source_observed_ms: 1004600 } deployment { expected_frontends: 2 observed_frontends: 1 "
            "ready_frontends: 0 }"));
}

TEST_CASE("serving load: example B, a router that stops reporting a rank degrades once that view expires",
          "[serving_load]") {
  ServingLoad load = example_a();
  std::uint64_t sequence = 1;
  for (std::uint64_t ms : {1200u, 2200u}) send(load, scheduler_report(ms, 100, 1, ++sequence, kAllRanks));
  const std::vector<RankLoad> without_1_1 = {{1, 0, 10, 100}, {2, 0, 20, 50}};
  for (std::uint64_t ms : {3200u, 4200u}) {
    REQUIRE(describe(send(load, scheduler_report(ms, 100, 1, ++sequence, without_1_1))) == outcome(kApplied, 2, 0));
  }
  CHECK(pool_status(load, 5000) == v1::DATA_STATUS_COMPLETE);
  send(load, scheduler_report(5200, 100, 1, ++sequence, without_1_1));
  CHECK(pool_status(load, 5200) == v1::DATA_STATUS_COMPLETE);  // (1,1) is exactly 3.0 s old
  const auto t6 = window(load, 6000);
  CHECK(t6.pools(0).load().status() == v1::DATA_STATUS_DEGRADED);
  CHECK(t6.pools(0).load().source_observed_ms() == kWallBase + 5200);
}

TEST_CASE("serving load: example C, nothing reported is UNAVAILABLE with zero totals", "[serving_load]") {
  ServingLoad load;
  load.set_pools({pool_facts()});
  const std::string model_text =
      "namespace: 'prod' canonical_model_id: 'llama' load { requests { requests_started_total: 0 "
      "requests_completed_total: 0 requests_failed_total: 0 requests_cancelled_total: 0 } tokens { "
      "input_tokens_total: 0 output_tokens_total: 0 } status: DATA_STATUS_UNAVAILABLE } deployment { "
      "expected_frontends: EXPECTED observed_frontends: 0 ready_frontends: 0 }";
  const auto with_expected = [&](const std::string& count) {
    std::string out = model_text;
    out.replace(out.find("EXPECTED"), 8, count);
    return expected<v1::ModelServingLoad>(out);
  };

  auto update = window(load, 1000);
  CHECK(content(update.pools(0)) == expected<v1::PoolServingLoad>(kPoolUnavailable));
  CHECK(content(only_model(update)) == with_expected("0"));
  CHECK(pool_keys(only_model(update)) == std::vector{wire::pool_key(pool_id('P'))});

  load.set_frontends("prod", {7});
  update = window(load, 2000);
  CHECK(content(update.pools(0)) == expected<v1::PoolServingLoad>(kPoolUnavailable));
  CHECK(content(only_model(update)) == with_expected("1"));
}

TEST_CASE("serving load: example D, stale frontends expire and a forgotten one is counted in full again",
          "[serving_load]") {
  ServingLoad load;
  const auto mistral = [](std::uint64_t ms, std::uint64_t sequence, std::uint64_t total) {
    return frontend_report(ms, "lab", 7, 1, sequence, true, {{"mistral", {}, {total}}});
  };
  REQUIRE(send(load, mistral(300, 1, 10)) == kApplied);
  for (std::uint64_t ms : {1000u, 2000u, 3000u}) {
    const auto& model = only_model(window(load, ms));
    CHECK(model.load().status() == v1::DATA_STATUS_COMPLETE);
    CHECK(model.deployment().expected_frontends() == 1u);
    CHECK(model.deployment().observed_frontends() == 1u);
    CHECK(model.deployment().serving_pools().empty());
  }
  CHECK(window(load, 4000).models().empty());

  REQUIRE(send(load, mistral(10000, 2, 12)) == kApplied);
  CHECK(only_model(window(load, 10000)).load().requests().requests_started_total() == 12u);

  const std::uint64_t forgotten = 10000 + 600000 + 1;  // silent for more than the retention
  CHECK(window(load, forgotten).models().empty());
  REQUIRE(send(load, mistral(forgotten, 3, 15)) == kApplied);
  CHECK(only_model(window(load, forgotten)).load().requests().requests_started_total() == 27u);
}

TEST_CASE("serving load: example D, a lone undeclared router goes from COMPLETE to UNAVAILABLE", "[serving_load]") {
  ServingLoad load;
  load.set_pools({pool_facts()});
  send(load, scheduler_report(200, 100, 1, 1, kAllRanks));
  CHECK(pool_status(load, 1000) == v1::DATA_STATUS_COMPLETE);
  CHECK(pool_status(load, 3200) == v1::DATA_STATUS_COMPLETE);
  CHECK(content(window(load, 3201).pools(0)) == expected<v1::PoolServingLoad>(kPoolUnavailable));
}

TEST_CASE("serving load: example E, totals across duplicates and restarts", "[serving_load]") {
  ServingLoad load;
  const auto total = [&](std::uint64_t ms) {
    return only_model(window(load, ms)).load().requests().requests_started_total();
  };
  CHECK(send(load, started(100, 42, 5, 50)) == kApplied);
  CHECK(total(100) == 50u);
  CHECK(send(load, started(200, 42, 5, 99)) == kDuplicate);
  CHECK(total(200) == 50u);
  CHECK(send(load, started(300, 42, 4, 99)) == kDuplicate);
  CHECK(total(300) == 50u);
  CHECK(send(load, started(400, 43, 1, 3)) == kRestarted);
  CHECK(total(400) == 53u);
  CHECK(send(load, started(500, 42, 6, 51)) == kReplaced);
  CHECK(total(500) == 53u);
  CHECK(send(load, started(600, 43, 2, 4)) == kApplied);
  CHECK(total(600) == 54u);
}

TEST_CASE("serving load: a late report from an older incarnation is no restart", "[serving_load]") {
  // docs/protocol/decisions.md#d42: incarnations 1, 2 and 3 in turn, then 1 reports again, as a
  // process a rolling update left running would.
  ServingLoad load;
  const auto total = [&](std::uint64_t ms) {
    return only_model(window(load, ms)).load().requests().requests_started_total();
  };
  CHECK(send(load, started(100, 1, 1, 10)) == kApplied);
  CHECK(send(load, started(200, 2, 1, 20)) == kRestarted);
  CHECK(send(load, started(300, 3, 1, 30)) == kRestarted);
  CHECK(total(300) == 60u);
  CHECK(send(load, started(400, 1, 2, 11)) == kReplaced);  // not counted again
  CHECK(total(400) == 60u);
  CHECK(send(load, started(500, 3, 2, 31)) == kApplied);  // the live one still reports
  CHECK(total(500) == 61u);
  // Eight restarts later incarnation 1 is no longer held: it reads as a restart again.
  for (std::uint64_t incarnation = 4; incarnation < 12; ++incarnation) {
    CHECK(send(load, started(600 + incarnation, incarnation, 1, 0)) == kRestarted);
  }
  CHECK(send(load, started(700, 4, 2, 0)) == kReplaced);
  CHECK(send(load, started(800, 1, 3, 0)) == kRestarted);
}

TEST_CASE("serving load: a restarted frontend starts without baselines", "[serving_load]") {
  ServingLoad load;
  CHECK(send(load, started(100, 1, 1, 5)) == kApplied);
  // Above the old incarnation's 5, yet all 8 are new requests of the new process.
  CHECK(send(load, started(200, 2, 1, 8)) == kRestarted);
  CHECK(only_model(window(load, 1000)).load().requests().requests_started_total() == 13u);
}

TEST_CASE("serving load: example F, replica groups take the maximum and groups are summed", "[serving_load]") {
  ServingLoad load;
  load.set_pools({PoolFacts{kEndpoint, producer('P'), {{9, worker(2, std::nullopt)}}, {"llama"}}});
  load.set_schedulers(kEndpoint, {1, 2, 3});
  send(load, scheduler_report(100, 1, 1, 1, {{9, 0, 12, 30}, {9, 1, 4, 5}}, "a"));
  send(load, scheduler_report(50, 2, 1, 1, {{9, 0, 10, 34}, {9, 1, 6, 7}}, "a"));
  send(load, scheduler_report(150, 3, 1, 1, {{9, 0, 1, 2}, {9, 1, 3, 4}}));
  const auto update = window(load, 1000);
  CHECK(content(update.pools(0)) ==
        expected<v1::PoolServingLoad>(
            "load { tokens { active_prefill_tokens: 47 active_decode_blocks: 22 } status: "
            "DATA_STATUS_COMPLETE source_observed_ms: 1000050 } deployment { live_workers: 1 }"));
}

TEST_CASE("serving load: scheduler and frontend sums saturate at u64 max", "[serving_load]") {
  ServingLoad load;
  load.set_pools({PoolFacts{kEndpoint, producer('P'), {{9, worker(1, kMax)}, {10, worker(2, kMax)}}, {"llama"}}});
  const std::vector<RankLoad> ranks = {{9, 0, kMax, kMax}, {10, 0, 1, 1}, {10, 1, 1, 1}};
  send(load, scheduler_report(100, 1, 1, 1, ranks));
  send(load, scheduler_report(100, 2, 1, 1, ranks));
  const ModelLoad huge{"llama", {kMax, kMax, kMax, kMax}, {kMax, kMax, kMax, kMax, kMax, kMax}};
  send(load, frontend_report(100, "prod", 7, 1, 1, true, {huge}));
  send(load, frontend_report(100, "prod", 8, 1, 1, true, {huge}));

  const auto update = window(load, 1000);
  const auto& tokens = update.pools(0).load().tokens();
  CHECK(tokens.active_decode_blocks() == kMax);
  CHECK(tokens.active_prefill_tokens() == kMax);
  CHECK(update.pools(0).deployment().max_concurrency() == kMax);
  const auto model = only_model(update).load();
  CHECK(model.requests().requests_awaiting_first_token() == kMax);
  CHECK(model.requests().requests_started_total() == kMax);
  CHECK(model.tokens().inflight_input_tokens() == kMax);
  CHECK(model.tokens().output_tokens_total() == kMax);
}

TEST_CASE("serving load: a router covering only some declared ranks is DEGRADED, undeclared ranks never count",
          "[serving_load]") {
  ServingLoad load;
  load.set_pools({pool_facts()});
  const std::vector<RankLoad> partial = {{1, 0, 10, 100}, {2, 0, 20, 50}, {3, 0, 1000, 1000}, {1, 2, 1000, 1000}};
  CHECK(describe(send(load, scheduler_report(100, 100, 1, 1, partial))) == outcome(kApplied, 2, 2));
  const auto update = window(load, 1000);
  CHECK(update.pools(0).load().status() == v1::DATA_STATUS_DEGRADED);
  CHECK(update.pools(0).load().source_observed_ms() == kWallBase + 100);

  // Another router covering every rank does not make the first one complete.
  send(load, scheduler_report(200, 101, 1, 1, kAllRanks));
  CHECK(pool_status(load, 1000) == v1::DATA_STATUS_DEGRADED);

  ServingLoad alone;
  alone.set_pools({pool_facts()});
  std::vector<RankLoad> with_undeclared = kAllRanks;
  with_undeclared.push_back({3, 0, 1000, 1000});
  CHECK(describe(send(alone, scheduler_report(100, 100, 1, 1, with_undeclared))) == outcome(kApplied, 3, 1));
  const auto alone_update = window(alone, 1000);
  const auto& tokens = alone_update.pools(0).load().tokens();
  CHECK(tokens.active_decode_blocks() == 35u);
  CHECK(tokens.active_prefill_tokens() == 150u);
}

TEST_CASE("serving load: progress advances even when every rank is ignored", "[serving_load]") {
  ServingLoad load;
  load.set_pools({pool_facts()});
  CHECK(describe(send(load, scheduler_report(100, 100, 1, 5, {{3, 0, 1, 1}}))) == outcome(kApplied, 0, 1));
  CHECK(describe(send(load, scheduler_report(200, 100, 1, 5, kAllRanks))) == outcome(kDuplicate, 0, 3));
  CHECK(pool_status(load, 1000) == v1::DATA_STATUS_UNAVAILABLE);
}

TEST_CASE("serving load: scheduler outcomes, a restart drops the router's old views", "[serving_load]") {
  ServingLoad load;
  load.set_pools({pool_facts()});
  CHECK(describe(send(load, scheduler_report(100, 100, 1, 1, kAllRanks))) == outcome(kApplied, 3, 0));
  CHECK(describe(send(load, scheduler_report(200, 100, 1, 1, kAllRanks))) == outcome(kDuplicate, 0, 3));
  const std::vector<RankLoad> one_rank = {{1, 0, 1, 1}};
  CHECK(describe(send(load, scheduler_report(300, 100, 2, 1, one_rank))) == outcome(kRestarted, 1, 0));
  CHECK(pool_status(load, 1000) == v1::DATA_STATUS_DEGRADED);  // epoch 1's other ranks are gone
  CHECK(describe(send(load, scheduler_report(400, 100, 1, 9, kAllRanks))) == outcome(kReplaced, 0, 3));
  CHECK(pool_status(load, 1000) == v1::DATA_STATUS_DEGRADED);
  CHECK(describe(send(load, scheduler_report(500, 100, 2, 2, kAllRanks))) == outcome(kApplied, 3, 0));
  CHECK(pool_status(load, 1000) == v1::DATA_STATUS_COMPLETE);
}

TEST_CASE("serving load: a scheduler report without a pool is NO_POOL and counts once the pool appears",
          "[serving_load]") {
  ServingLoad load;
  CHECK(describe(send(load, scheduler_report(100, 100, 1, 1, kAllRanks))) ==
        outcome(ingest_v1::REPORT_OUTCOME_NO_POOL, 0, 3));
  load.set_pools({pool_facts()});
  CHECK(pool_status(load, 1000) == v1::DATA_STATUS_UNAVAILABLE);
  CHECK(describe(send(load, scheduler_report(1100, 100, 1, 1, kAllRanks))) == outcome(kApplied, 3, 0));
  CHECK(pool_status(load, 2000) == v1::DATA_STATUS_COMPLETE);
}

TEST_CASE("serving load: ignored reports do not refresh freshness", "[serving_load]") {
  ServingLoad load;
  load.set_pools({pool_facts()});
  send(load, scheduler_report(100, 100, 1, 5, kAllRanks));
  send(load, frontend_report(100, "prod", 7, 1, 5, true, {{"llama"}}));
  send(load, frontend_report(150, "prod", 7, 2, 1, true, {{"llama"}}));  // restart: 1 is replaced
  for (std::uint64_t ms = 1000; ms <= 3000; ms += 1000) {
    CHECK(send(load, scheduler_report(ms, 100, 1, 5, kAllRanks)).outcome == kDuplicate);
    CHECK(send(load, frontend_report(ms, "prod", 7, 2, 1, true, {{"llama"}})) == kDuplicate);
    CHECK(send(load, frontend_report(ms, "prod", 7, 1, 9, true, {{"llama"}})) == kReplaced);
  }
  auto update = window(load, 3100);
  CHECK(update.pools(0).load().status() == v1::DATA_STATUS_COMPLETE);
  CHECK(only_model(update).load().status() == v1::DATA_STATUS_COMPLETE);
  update = window(load, 3151);
  CHECK(update.pools(0).load().status() == v1::DATA_STATUS_UNAVAILABLE);
  CHECK(only_model(update).load().status() == v1::DATA_STATUS_UNAVAILABLE);
}

TEST_CASE("serving load: freshness is inclusive for routers and frontends", "[serving_load]") {
  ServingLoad load{Config{.freshness = std::chrono::milliseconds(500), .retention = std::chrono::milliseconds(5000)}};
  load.set_pools({pool_facts()});
  std::uint64_t sequence = 0;
  for (std::uint64_t ms = 0; ms <= 1000; ms += 200) {
    ++sequence;
    send(load, scheduler_report(ms, 100, 1, sequence, kAllRanks));
    send(load, frontend_report(ms, "prod", 7, 1, sequence, true, {{"llama"}}));
    const auto update = window(load, ms + 100);
    CHECK(update.pools(0).load().status() == v1::DATA_STATUS_COMPLETE);
    CHECK(only_model(update).load().status() == v1::DATA_STATUS_COMPLETE);
  }
  auto update = window(load, 1500);
  CHECK(update.pools(0).load().status() == v1::DATA_STATUS_COMPLETE);
  CHECK(only_model(update).load().status() == v1::DATA_STATUS_COMPLETE);
  update = window(load, 1501);
  CHECK(update.pools(0).load().status() == v1::DATA_STATUS_UNAVAILABLE);
  CHECK(only_model(update).load().status() == v1::DATA_STATUS_UNAVAILABLE);
}

TEST_CASE("serving load: published_ms 0 reads as the relay's receive wall time", "[serving_load]") {
  ServingLoad load;
  load.set_pools({pool_facts()});
  auto scheduler = scheduler_report(0, 100, 1, 1, kAllRanks);
  scheduler.set_published_ms(0);
  load.report_scheduler(scheduler, at(100), 4242);
  auto frontend = frontend_report(0, "prod", 7, 1, 1, true, {{"llama"}});
  frontend.set_published_ms(0);
  load.report_frontend(frontend, at(100), 4343);
  const auto update = window(load, 1000);
  CHECK(update.pools(0).load().source_observed_ms() == 4242u);
  CHECK(only_model(update).load().source_observed_ms() == 4343u);
}

TEST_CASE("serving load: pools in PoolId order, withdrawn pools go, a new generation starts empty", "[serving_load]") {
  ServingLoad load;
  const EndpointKey other{"prod", "other", "generate"};
  load.set_pools({pool_facts('\x30'), pool_facts('\x10', other)});
  send(load, scheduler_report(100, 100, 1, 1, kAllRanks));
  auto update = window(load, 1000);
  REQUIRE(update.pools_size() == 2);
  CHECK(wire::producer_key(update.pools(0).producer()) == wire::producer_key(producer('\x10')));
  CHECK(wire::producer_key(update.pools(1).producer()) == wire::producer_key(producer('\x30')));
  CHECK(update.pools(1).load().status() == v1::DATA_STATUS_COMPLETE);

  PoolFacts next = pool_facts('\x30');
  next.producer.set_producer_incarnation(2);
  next.lineage = 2;
  load.set_pools({next});
  update = window(load, 1000);
  REQUIRE(update.pools_size() == 1);
  CHECK(wire::producer_key(update.pools(0).producer()) == wire::producer_key(next.producer));
  CHECK(content(update.pools(0)) == expected<v1::PoolServingLoad>(kPoolUnavailable));
  // No progress carried over: the same sequence is new to this generation.
  CHECK(send(load, scheduler_report(200, 100, 1, 1, kAllRanks)).outcome == kApplied);
}

TEST_CASE("serving load: the declared routers outlast a pool generation", "[serving_load]") {
  ServingLoad load;
  load.set_pools({pool_facts()});
  load.set_schedulers(kEndpoint, {100, 101});
  send(load, scheduler_report(100, 100, 1, 1, kAllRanks));
  CHECK(pool_status(load, 1000) == v1::DATA_STATUS_DEGRADED);  // 101 declared, silent
  PoolFacts next = pool_facts();
  next.producer.set_producer_incarnation(2);
  next.lineage = 2;
  load.set_pools({next});
  REQUIRE(send(load, scheduler_report(1100, 100, 1, 1, kAllRanks)).outcome == kApplied);
  CHECK(pool_status(load, 2000) == v1::DATA_STATUS_DEGRADED);  // 101 still expected
  REQUIRE(send(load, scheduler_report(1200, 101, 1, 1, kAllRanks)).outcome == kApplied);
  CHECK(pool_status(load, 2000) == v1::DATA_STATUS_COMPLETE);
}

TEST_CASE("serving load: a re-layout keeps views and progress", "[serving_load]") {
  ServingLoad load;
  load.set_pools({pool_facts()});
  send(load, scheduler_report(100, 100, 1, 1, kAllRanks));
  PoolFacts relaid = pool_facts();  // the same lineage in more buckets, under a new layout generation
  relaid.producer.set_layout_generation(2);
  relaid.producer.mutable_ckf_format()->set_bucket_count(1048576);
  load.set_pools({relaid});
  const auto update = window(load, 1000);
  CHECK(wire::producer_key(update.pools(0).producer()) == wire::producer_key(relaid.producer));
  CHECK(update.pools(0).load().status() == v1::DATA_STATUS_COMPLETE);
  CHECK(send(load, scheduler_report(200, 100, 1, 1, kAllRanks)).outcome == kDuplicate);
}

TEST_CASE("serving load: the same generation keeps views and progress across a config refresh", "[serving_load]") {
  ServingLoad load;
  load.set_pools({pool_facts()});
  send(load, scheduler_report(100, 100, 1, 1, kAllRanks));
  PoolFacts smaller = pool_facts();
  smaller.runtime_configs.erase(2);  // (2,0) no longer declared: its view stops counting
  load.set_pools({smaller});
  auto update = window(load, 1000);
  CHECK(content(update.pools(0)) ==
        expected<v1::PoolServingLoad>("load { tokens { active_prefill_tokens: 100 active_decode_blocks: 15 } "
                                      "status: DATA_STATUS_COMPLETE source_observed_ms: 1000100 } "
                                      "deployment { live_workers: 1 max_concurrency: 16 }"));
  CHECK(send(load, scheduler_report(200, 100, 1, 1, kAllRanks)).outcome == kDuplicate);
  load.set_pools({pool_facts()});
  CHECK(window(load, 1000).pools(0).load().tokens().active_decode_blocks() == 35u);
}

TEST_CASE("serving load: models are catalog registrations and fresh frontends' models, sorted and unique",
          "[serving_load]") {
  ServingLoad load;
  const EndpointKey second{"prod", "second", "generate"};
  const EndpointKey staging{"staging", "backend", "generate"};
  load.set_pools({pool_facts('\x30', kEndpoint, {"llama", "tenant-a"}), pool_facts('\x10', second, {"llama"}),
                  pool_facts('\x20', staging, {"llama"})});
  send(load, frontend_report(100, "prod", 7, 1, 1, true, {{"alpha"}, {"llama"}}));
  send(load, frontend_report(100, "lab", 8, 1, 1, true, {{"zeta"}}));
  const auto update = window(load, 1000);
  using Key = std::pair<std::string, std::string>;
  CHECK(model_keys(update) ==
        std::vector<Key>{
            {"lab", "zeta"}, {"prod", "alpha"}, {"prod", "llama"}, {"prod", "tenant-a"}, {"staging", "llama"}});
  CHECK(pool_keys(update.models(0)).empty());
  CHECK(pool_keys(update.models(1)).empty());
  CHECK(pool_keys(update.models(2)) == std::vector{wire::pool_key(pool_id('\x10')), wire::pool_key(pool_id('\x30'))});
  CHECK(pool_keys(update.models(3)) == std::vector{wire::pool_key(pool_id('\x30'))});
  CHECK(pool_keys(update.models(4)) == std::vector{wire::pool_key(pool_id('\x20'))});
}

TEST_CASE("serving load: frontend coverage is per namespace", "[serving_load]") {
  ServingLoad load;
  load.set_pools({pool_facts('P', kEndpoint), pool_facts('Q', {"staging", "backend", "generate"})});
  send(load, frontend_report(100, "prod", 7, 1, 1, true, {{"llama", {1, 1, 1, 1}}}));
  const auto update = window(load, 1000);
  REQUIRE(model_keys(update) ==
          std::vector<std::pair<std::string, std::string>>{{"prod", "llama"}, {"staging", "llama"}});
  CHECK(update.models(0).load().status() == v1::DATA_STATUS_COMPLETE);
  CHECK(update.models(0).load().requests().requests_generating() == 1u);
  CHECK(update.models(1).load().status() == v1::DATA_STATUS_UNAVAILABLE);
  CHECK(update.models(1).deployment().observed_frontends() == 0u);
}

TEST_CASE("serving load: a fresh frontend not listing a catalog model contributes zero", "[serving_load]") {
  ServingLoad load;
  load.set_pools({pool_facts()});
  send(load, frontend_report(100, "prod", 7, 1, 1, true, {{"other", {4, 4, 4, 4}}}));
  const auto update = window(load, 1000);
  REQUIRE(update.models_size() == 2);
  const auto& llama = update.models(0);
  CHECK(llama.canonical_model_id() == "llama");
  CHECK(content(llama) == expected<v1::ModelServingLoad>(
                              "namespace: 'prod' canonical_model_id: 'llama' load { requests { "
                              "requests_started_total: 0 requests_completed_total: 0 requests_failed_total: 0 "
                              "requests_cancelled_total: 0 requests_awaiting_first_token: 0 requests_generating: 0 } "
                              "tokens { awaiting_first_token_input_tokens: 0 inflight_input_tokens: 0 "
                              "input_tokens_total: 0 output_tokens_total: 0 } status: DATA_STATUS_COMPLETE "
                              "source_observed_ms: 1000100 } deployment { expected_frontends: 1 "
                              "observed_frontends: 1 ready_frontends: 0 }"));
}

TEST_CASE("serving load: ready_frontends counts fresh, listing, ready frontends", "[serving_load]") {
  ServingLoad load;
  load.set_pools({pool_facts()});
  load.set_frontends("prod", {1, 2, 3, 4, 5});
  send(load, frontend_report(100, "prod", 1, 1, 1, true, {{"llama"}}));
  send(load, frontend_report(2000, "prod", 2, 1, 1, true, {{"llama"}}));
  send(load, frontend_report(2000, "prod", 3, 1, 1, false, {{"llama"}}));
  send(load, frontend_report(2000, "prod", 4, 1, 1, true, {{"other"}}));
  const auto update = window(load, 3500);  // frontend 1 is stale, 5 never reported
  const auto& llama = update.models(0);
  REQUIRE(llama.canonical_model_id() == "llama");
  CHECK(llama.load().status() == v1::DATA_STATUS_DEGRADED);
  CHECK(llama.deployment().expected_frontends() == 5u);
  CHECK(llama.deployment().observed_frontends() == 3u);
  CHECK(llama.deployment().ready_frontends() == 1u);
}

TEST_CASE("serving load: a counter below its baseline counts its whole current value", "[serving_load]") {
  ServingLoad load;
  send(load, frontend_report(100, "prod", 7, 1, 1, true, {{"llama", {}, {10, 8, 1, 1, 100, 200}}}));
  send(load, frontend_report(200, "prod", 7, 1, 2, true, {{"llama", {}, {12, 3, 1, 1, 150, 200}}}));
  const auto model = only_model(window(load, 1000)).load();
  CHECK(model.requests().requests_started_total() == 12u);
  CHECK(model.requests().requests_completed_total() == 11u);
  CHECK(model.requests().requests_failed_total() == 1u);
  CHECK(model.tokens().input_tokens_total() == 150u);
  CHECK(model.tokens().output_tokens_total() == 200u);
}

TEST_CASE("serving load: totals survive staleness, SetFrontends changes and a model leaving a report",
          "[serving_load]") {
  ServingLoad load;
  load.set_pools({pool_facts()});
  send(load, frontend_report(100, "prod", 7, 1, 1, true, {{"llama", {}, {10}}, {"solo", {}, {5}}}));
  send(load, frontend_report(200, "prod", 7, 1, 2, true, {{"llama", {}, {11}}}));
  auto update = window(load, 1000);
  // The frontend no longer lists "solo", and nobody else serves it: gone from the window.
  CHECK(model_keys(update) == std::vector<std::pair<std::string, std::string>>{{"prod", "llama"}});
  load.set_frontends("prod", {7, 8});
  load.set_frontends("prod", {});
  update = window(load, 9000);
  CHECK(only_model(update).load().status() == v1::DATA_STATUS_UNAVAILABLE);
  CHECK(only_model(update).load().requests().requests_started_total() == 11u);
  // "solo" kept its baseline: only the growth since 5 is added.
  send(load, frontend_report(9100, "prod", 7, 1, 3, true, {{"llama", {}, {11}}, {"solo", {}, {6}}}));
  update = window(load, 9100);
  REQUIRE(update.models_size() == 2);
  CHECK(update.models(1).load().requests().requests_started_total() == 6u);
}

TEST_CASE("serving load: deployment follows the workers' configs", "[serving_load]") {
  const auto deployment = [](std::map<std::uint64_t, RuntimeConfig> configs) {
    ServingLoad load;
    load.set_pools({PoolFacts{kEndpoint, producer('P'), std::move(configs), {"llama"}}});
    return text(window(load, 1000).pools(0).deployment());
  };
  const auto status = [](const std::string& text_proto) { return expected<v1::PoolDeploymentStatus>(text_proto); };
  CHECK(deployment({{1, worker(2, 8)}, {2, worker(1, 8)}}) == status("live_workers: 2 max_concurrency: 24"));
  CHECK(deployment({{1, worker(2, 8)}, {2, worker(1, std::nullopt)}}) == status("live_workers: 2"));
  CHECK(deployment({{1, worker(1, std::nullopt)}}) == status("live_workers: 1"));
  CHECK(deployment({{1, worker(4, 0)}}) == status("live_workers: 1 max_concurrency: 0"));
  CHECK(deployment({}) == status("live_workers: 0 max_concurrency: 0"));
  // An invalid rank configuration (not reachable through validated ingest) leaves both unset.
  CHECK(deployment({{1, worker(0, 8)}}) == status(""));
  CHECK(deployment({{1, worker(kMaxLoadRanksPerWorker + 1, 8)}}) == status(""));
}

TEST_CASE("serving load: an invalid rank configuration declares no rank", "[serving_load]") {
  ServingLoad load;
  load.set_pools({PoolFacts{kEndpoint, producer('P'), {{1, worker(0, 8)}}, {"llama"}}});
  CHECK(describe(send(load, scheduler_report(100, 100, 1, 1, {{1, 0, 1, 1}}))) == outcome(kApplied, 0, 1));
  CHECK(content(window(load, 1000).pools(0)) ==
        expected<v1::PoolServingLoad>("load { tokens { } status: DATA_STATUS_UNAVAILABLE } deployment { }"));
}

TEST_CASE("serving load: retention forgets undeclared frontends and router progress, never declared frontends",
          "[serving_load]") {
  ServingLoad load{Config{.freshness = std::chrono::milliseconds(500), .retention = std::chrono::milliseconds(2000)}};
  load.set_pools({pool_facts()});
  load.set_frontends("prod", {7});
  send(load, frontend_report(0, "prod", 7, 1, 5, true, {{"llama", {}, {10}}}));
  send(load, frontend_report(0, "prod", 8, 1, 5, true, {{"llama", {}, {100}}}));
  send(load, scheduler_report(0, 100, 1, 5, kAllRanks));
  window(load, 2000);  // silent for exactly the retention: nothing forgotten
  CHECK(send(load, scheduler_report(2000, 100, 1, 5, kAllRanks)).outcome == kDuplicate);
  CHECK(send(load, frontend_report(2000, "prod", 8, 1, 5, true, {{"llama", {}, {100}}})) == kDuplicate);

  window(load, 2001);
  CHECK(send(load, scheduler_report(2001, 100, 1, 5, kAllRanks)).outcome == kApplied);
  CHECK(send(load, frontend_report(2001, "prod", 7, 1, 5, true, {{"llama", {}, {10}}})) == kDuplicate);
  // Frontend 8 was forgotten with its baseline: its counters are added in full again.
  CHECK(send(load, frontend_report(2001, "prod", 8, 1, 5, true, {{"llama", {}, {100}}})) == kApplied);
  CHECK(only_model(window(load, 2001)).load().requests().requests_started_total() == 210u);
}

TEST_CASE("serving load: sources and models past their limits are refused before anything is kept",
          "[serving_load][limits]") {
  Config config;
  config.max_sources = 2;
  config.max_models = 3;
  ServingLoad load(config);
  load.set_pools({pool_facts()});
  const auto accept = [&](const ingest_v1::FrontendLoadReport& report) {
    REQUIRE_FALSE(load.refusal(report).has_value());
    return load.report_frontend(report, at(0), kWallBase);
  };

  // A frontend and a router are heard from: the limit of 2 is reached.
  CHECK(accept(frontend_report(0, "prod", 7, 1, 1, true, {{"llama"}, {"mistral"}})) ==
        ingest_v1::REPORT_OUTCOME_APPLIED);
  REQUIRE_FALSE(load.refusal(scheduler_report(0, 100, 1, 1, kAllRanks)).has_value());
  load.report_scheduler(scheduler_report(0, 100, 1, 1, kAllRanks), at(0), kWallBase);
  const auto third_frontend = load.refusal(frontend_report(0, "prod", 8, 1, 1, true, {{"llama"}}));
  REQUIRE(third_frontend.has_value());
  CHECK(third_frontend->limit == LimitRefusal::Limit::kSources);
  CHECK(third_frontend->message ==
        "frontend 8 of namespace prod: the relay holds the reports of 2 frontends and routers, the most "
        "--max-serving-load-sources (2) allows");
  const auto second_router = load.refusal(scheduler_report(0, 101, 1, 1, kAllRanks));
  REQUIRE(second_router.has_value());
  CHECK(second_router->message ==
        "router 101 of endpoint prod/backend/generate: the relay holds the reports of 2 frontends and routers, the "
        "most --max-serving-load-sources (2) allows");
  // Sources already heard from go on, and a router report for an endpoint without a pool keeps nothing.
  CHECK_FALSE(load.refusal(frontend_report(1, "prod", 7, 1, 2, true, {{"llama"}})).has_value());
  CHECK_FALSE(load.refusal(scheduler_report(1, 100, 1, 2, kAllRanks)).has_value());
  CHECK_FALSE(load.refusal(scheduler_report(1, 102, 1, 1, kAllRanks, "", {"prod", "other", "generate"})).has_value());

  // Models: two held, one more fits, two more do not; a known model is not new.
  const auto two_new = load.refusal(frontend_report(2, "prod", 7, 1, 3, true, {{"llama"}, {"a"}, {"b"}}));
  REQUIRE(two_new.has_value());
  CHECK(two_new->limit == LimitRefusal::Limit::kModels);
  CHECK(two_new->message ==
        "frontend 7 of namespace prod: its new models (2) would make 4 models in all, above "
        "--max-serving-load-models (3)");
  CHECK(accept(frontend_report(2, "prod", 7, 1, 3, true, {{"llama"}, {"a"}})) == ingest_v1::REPORT_OUTCOME_APPLIED);
  // A report answered as a duplicate keeps nothing, so its new models are not refused.
  const auto repeated = frontend_report(2, "prod", 7, 1, 3, true, {{"llama"}, {"b"}, {"c"}});
  CHECK_FALSE(load.refusal(repeated).has_value());
  CHECK(load.report_frontend(repeated, at(2), kWallBase) == ingest_v1::REPORT_OUTCOME_DUPLICATE);
  CHECK(load.refusal(frontend_report(2, "prod", 7, 1, 4, true, {{"llama"}, {"b"}})).has_value());

  // Declared ids are counted apart: a set replacing its own counts what it changes.
  CHECK_FALSE(load.refusal_to_declare(std::string("prod"), {7, 8}).has_value());
  load.set_frontends("prod", {7, 8});
  CHECK_FALSE(load.refusal_to_declare(std::string("prod"), {9, 10}).has_value());
  const auto declared = load.refusal_to_declare(kEndpoint, {100});
  REQUIRE(declared.has_value());
  CHECK(declared->message ==
        "the routers of endpoint prod/backend/generate: declaring 1 would make 3 frontend and router ids declared in "
        "all, above --max-serving-load-sources (2)");
}

TEST_CASE("serving load: models whose names would make a window too large are refused", "[serving_load][limits]") {
  Config config;
  config.max_model_name_bytes = 24;
  ServingLoad load(config);
  load.set_pools({pool_facts()});
  // "prod" + "llama" and "prod" + "mistral": 20 bytes held.
  const auto first = frontend_report(0, "prod", 7, 1, 1, true, {{"llama"}, {"mistral"}});
  REQUIRE_FALSE(load.refusal(first).has_value());
  CHECK(load.report_frontend(first, at(0), kWallBase) == ingest_v1::REPORT_OUTCOME_APPLIED);

  const auto too_long = load.refusal(frontend_report(1, "prod", 7, 1, 2, true, {{"llama"}, {"qwen"}}));
  REQUIRE(too_long.has_value());
  CHECK(too_long->limit == LimitRefusal::Limit::kModels);
  CHECK(too_long->message ==
        "frontend 7 of namespace prod: its new models' names (8 bytes) would make 28 bytes of model names in all, "
        "above half of --max-message-bytes (24): a window may carry them all");
  // Names held already cost nothing; four bytes more still fit.
  CHECK_FALSE(load.refusal(frontend_report(1, "prod", 7, 1, 2, true, {{"llama"}, {"mistral"}})).has_value());
  CHECK_FALSE(load.refusal(frontend_report(1, "p", 8, 1, 1, true, {{"phi"}})).has_value());
  CHECK(load.report_frontend(frontend_report(1, "p", 8, 1, 1, true, {{"phi"}}), at(1), kWallBase) ==
        ingest_v1::REPORT_OUTCOME_APPLIED);
  // Now 24 bytes are held: one byte more is refused.
  CHECK(load.refusal(frontend_report(2, "p", 8, 1, 2, true, {{"phi"}, {"x"}})).has_value());
  CHECK_FALSE(load.refusal(frontend_report(2, "p", 8, 1, 2, true, {{"phi"}})).has_value());
}
