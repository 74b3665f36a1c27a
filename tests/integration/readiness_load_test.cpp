// The worked examples of docs/protocol/readiness.md#examples and docs/protocol/load.md#examples,
// driven through the ingest API.
#include <catch2/catch.hpp>

#include "tests/integration/harness.hpp"
#include "tests/log_capture.hpp"

using namespace kvrelay::test;

namespace {

const auto kPrefill = endpoint_ref("prod", "prefill");
const auto kDecode = endpoint_ref("prod", "backend");
const auto kEncoder = endpoint_ref("prod", "encoder");

std::vector<int> roles(const google::protobuf::RepeatedField<int>& list) { return {list.begin(), list.end()}; }

// Awaits the readiness update whose single entry satisfies `accept`.
v1::ServingReadinessUpdate await_entry(StreamReader<v1::ServingReadinessUpdate>& stream,
                                       const std::function<bool(const v1::TopologyEntry&)>& accept) {
  auto update =
      stream.until([&](const v1::ServingReadinessUpdate& u) { return u.entries_size() == 1 && accept(u.entries(0)); });
  REQUIRE(update.has_value());
  return *update;
}

WorkerShape typed(ingest_v1::WorkerType type, std::vector<std::vector<ingest_v1::WorkerType>> needs = {}) {
  WorkerShape shape;
  shape.worker_type = type;
  shape.needs = std::move(needs);
  return shape;
}

}  // namespace

TEST_CASE("readiness A: one aggregated endpoint, UNKNOWN until availability is reported", "[readiness]") {
  TestRelay relay;
  auto readiness = watch_readiness(relay);
  auto first = readiness->next();
  REQUIRE(first.has_value());
  CHECK(first->revision() == 1);
  CHECK(first->entries_size() == 0);

  relay.put_worker(put_worker_request(kDecode, 1));
  auto unknown =
      await_entry(*readiness, [](const auto& e) { return e.members_size() == 1 && e.members(0).has_pool_id(); });
  const auto& entry = unknown.entries(0);
  CHECK(entry.namespace_() == "prod");
  CHECK(entry.canonical_model_id() == "llama");
  CHECK(entry.state() == v1::SERVING_READINESS_STATE_UNKNOWN);
  CHECK(entry.present_roles_size() == 0);
  CHECK(entry.missing_roles_size() == 0);
  CHECK(roles(entry.members(0).roles()) == std::vector<int>{v1::WORKER_ROLE_AGGREGATED});

  relay.set_availability(kDecode, {1});
  auto ready = await_entry(*readiness, [](const auto& e) { return e.state() == v1::SERVING_READINESS_STATE_READY; });
  CHECK(roles(ready.entries(0).present_roles()) == std::vector<int>{v1::WORKER_ROLE_AGGREGATED});
  CHECK(ready.revision() == unknown.revision() + 1);

  relay.set_availability(kDecode, {});
  auto down =
      await_entry(*readiness, [](const auto& e) { return e.state() == v1::SERVING_READINESS_STATE_UNAVAILABLE; });
  CHECK(roles(down.entries(0).missing_roles()) == std::vector<int>{v1::WORKER_ROLE_AGGREGATED});
  CHECK(down.revision() == ready.revision() + 1);
}

TEST_CASE("readiness C and D: prefill/decode, then an encoder that needs them", "[readiness]") {
  CapturedLog log;  // first: it outlives the relay's threads
  TestRelay relay;
  auto readiness = watch_readiness(relay);
  relay.put_worker(
      put_worker_request(kPrefill, 1, typed(ingest_v1::WORKER_TYPE_PREFILL, {{ingest_v1::WORKER_TYPE_DECODE}})));
  relay.put_worker(
      put_worker_request(kDecode, 2, typed(ingest_v1::WORKER_TYPE_DECODE, {{ingest_v1::WORKER_TYPE_PREFILL}})));
  const auto unknown = await_entry(*readiness, [](const auto& e) {
    return e.members_size() == 2 && e.state() == v1::SERVING_READINESS_STATE_UNKNOWN;
  });
  // One endpoint reported, the other not: still UNKNOWN, so nothing is published until both
  // have reported (the next revision is READY).
  relay.set_availability(kPrefill, {1});
  relay.set_availability(kDecode, {2});
  auto ready = await_entry(*readiness, [](const auto& e) { return e.state() == v1::SERVING_READINESS_STATE_READY; });
  CHECK(ready.revision() == unknown.revision() + 1);
  const auto& entry = ready.entries(0);
  CHECK(roles(entry.present_roles()) == std::vector<int>{v1::WORKER_ROLE_PREFILL, v1::WORKER_ROLE_DECODE});
  CHECK(entry.members(0).endpoint().component() == "backend");  // sorted by ns/component/endpoint
  CHECK(entry.members(1).endpoint().component() == "prefill");

  // D: an encoder needing P+D or AGGREGATED, without KV sources (no pool link).
  WorkerShape encoder =
      typed(ingest_v1::WORKER_TYPE_ENCODE,
            {{ingest_v1::WORKER_TYPE_PREFILL, ingest_v1::WORKER_TYPE_DECODE}, {ingest_v1::WORKER_TYPE_AGGREGATED}});
  encoder.push_sources = false;
  relay.put_worker(put_worker_request(kEncoder, 3, encoder));
  relay.set_availability(kEncoder, {3});
  auto epd = await_entry(*readiness, [](const auto& e) {
    return e.members_size() == 3 && e.state() == v1::SERVING_READINESS_STATE_READY;
  });
  CHECK(roles(epd.entries(0).present_roles()) ==
        std::vector<int>{v1::WORKER_ROLE_PREFILL, v1::WORKER_ROLE_DECODE, v1::WORKER_ROLE_ENCODE});
  for (const auto& member : epd.entries(0).members()) {
    CHECK(member.has_pool_id() == (member.endpoint().component() != "encoder"));
  }
  relay.set_availability(kPrefill, {});
  auto broken =
      await_entry(*readiness, [](const auto& e) { return e.state() == v1::SERVING_READINESS_STATE_UNAVAILABLE; });
  CHECK(roles(broken.entries(0).missing_roles()) ==
        std::vector<int>{v1::WORKER_ROLE_PREFILL, v1::WORKER_ROLE_AGGREGATED});
  // Each change of state is logged once, with what the model misses: the encoder's endpoint
  // made it UNKNOWN until it reported its availability.
  CHECK(log.count({"[info] readiness: namespace=prod model=llama: (new) -> UNKNOWN"}) == 1);
  CHECK(log.count({"[info] readiness: namespace=prod model=llama: UNKNOWN -> READY"}) == 2);
  CHECK(log.count({"[info] readiness: namespace=prod model=llama: READY -> UNKNOWN"}) == 1);
  CHECK(log.count({"[info] readiness: namespace=prod model=llama: READY -> UNAVAILABLE, missing PREFILL,AGGREGATED"}) ==
        1);
  CHECK(log.count({"readiness: namespace=prod model=llama"}) == 5);

  // A model no endpoint serves any more leaves the entries, and the log says so.
  relay.remove_worker(kPrefill, 1);
  relay.remove_worker(kDecode, 2);
  relay.remove_worker(kEncoder, 3);
  REQUIRE(readiness->until([](const v1::ServingReadinessUpdate& u) { return u.entries_size() == 0; }).has_value());
  CHECK(log.count({"[info] readiness: namespace=prod model=llama: gone"}) == 1);
}

TEST_CASE("readiness E: a LoRA adapter on decode only is missing PREFILL", "[readiness]") {
  TestRelay relay;
  auto readiness = watch_readiness(relay);
  relay.put_worker(
      put_worker_request(kPrefill, 1, typed(ingest_v1::WORKER_TYPE_PREFILL, {{ingest_v1::WORKER_TYPE_DECODE}})));
  WorkerShape decode = typed(ingest_v1::WORKER_TYPE_DECODE, {{ingest_v1::WORKER_TYPE_PREFILL}});
  decode.adapters = {"tenant-a"};
  relay.put_worker(put_worker_request(kDecode, 2, decode));
  relay.set_availability(kPrefill, {1});
  relay.set_availability(kDecode, {2});
  auto update = await_entry(*readiness, [](const auto& e) {
    return e.state() == v1::SERVING_READINESS_STATE_READY && e.adapters_size() == 1;
  });
  const auto& adapter = update.entries(0).adapters(0);
  CHECK(adapter.canonical_model_id() == "tenant-a");
  CHECK(adapter.state() == v1::SERVING_READINESS_STATE_UNAVAILABLE);
  CHECK(roles(adapter.missing_roles()) == std::vector<int>{v1::WORKER_ROLE_PREFILL});

  WorkerShape prefill = typed(ingest_v1::WORKER_TYPE_PREFILL, {{ingest_v1::WORKER_TYPE_DECODE}});
  prefill.adapters = {"tenant-a"};
  relay.put_worker(put_worker_request(kPrefill, 1, prefill));
  auto both = await_entry(*readiness, [](const auto& e) {
    return e.adapters_size() == 1 && e.adapters(0).state() == v1::SERVING_READINESS_STATE_READY;
  });
  CHECK(both.entries(0).adapters(0).missing_roles_size() == 0);
}

TEST_CASE("readiness H and I: legacy fallback, duplicate roles reported but not gating", "[readiness]") {
  TestRelay relay;
  auto readiness = watch_readiness(relay);
  SECTION("a legacy card is READY with any live worker") {
    relay.put_worker(put_worker_request(kDecode, 1, typed(ingest_v1::WORKER_TYPE_UNSET)));
    relay.set_availability(kDecode, {1});
    auto legacy = await_entry(*readiness, [](const auto& e) { return e.state() == v1::SERVING_READINESS_STATE_READY; });
    CHECK(legacy.entries(0).legacy_fallback_active());
    CHECK(roles(legacy.entries(0).members(0).roles()) == std::vector<int>{v1::WORKER_ROLE_LEGACY});
  }
  SECTION("two prefill endpoints and a decode are READY with duplicate PREFILL") {
    const auto second_prefill = endpoint_ref("prod", "prefill-b");
    relay.put_worker(
        put_worker_request(kPrefill, 1, typed(ingest_v1::WORKER_TYPE_PREFILL, {{ingest_v1::WORKER_TYPE_DECODE}})));
    relay.put_worker(put_worker_request(second_prefill, 3,
                                        typed(ingest_v1::WORKER_TYPE_PREFILL, {{ingest_v1::WORKER_TYPE_DECODE}})));
    relay.put_worker(
        put_worker_request(kDecode, 2, typed(ingest_v1::WORKER_TYPE_DECODE, {{ingest_v1::WORKER_TYPE_PREFILL}})));
    for (const auto& [endpoint, id] : {std::pair{kPrefill, 1}, {second_prefill, 3}, {kDecode, 2}}) {
      relay.set_availability(endpoint, {static_cast<std::uint64_t>(id)});
    }
    auto dup = await_entry(*readiness, [](const auto& e) { return e.state() == v1::SERVING_READINESS_STATE_READY; });
    CHECK(roles(dup.entries(0).duplicate_role_endpoints()) == std::vector<int>{v1::WORKER_ROLE_PREFILL});
  }
}

TEST_CASE("readiness K: a new revision only when the entries change", "[readiness]") {
  TestRelay relay;
  auto readiness = watch_readiness(relay);
  relay.put_worker(put_worker_request(kDecode, 1));
  relay.set_availability(kDecode, {1});
  const auto ready =
      await_entry(*readiness, [](const auto& e) { return e.state() == v1::SERVING_READINESS_STATE_READY; });
  relay.set_availability(kDecode, {1});  // the same fact again: no publication
  relay.set_availability(kDecode, {});
  const auto down =
      await_entry(*readiness, [](const auto& e) { return e.state() == v1::SERVING_READINESS_STATE_UNAVAILABLE; });
  CHECK(down.revision() == ready.revision() + 1);
}

// ---- load (docs/protocol/load.md#examples) ----

namespace {

ingest_v1::LoadReport load_report(const ingest_v1::EndpointRef& endpoint, std::uint64_t worker, std::uint32_t rank,
                                  std::uint64_t used) {
  ingest_v1::LoadReport report;
  *report.mutable_endpoint() = endpoint;
  report.set_worker_id(worker);
  report.set_dp_rank(rank);
  report.set_kv_used_blocks(used);
  return report;
}

struct LoadEntry {
  std::uint64_t used, total;
  std::uint32_t observed, expected;
  friend bool operator==(const LoadEntry&, const LoadEntry&) = default;
};

LoadEntry entry_of(const v1::KvPoolLoadUpdate& window) {
  REQUIRE(window.pools_size() == 1);
  const auto& p = window.pools(0);
  return {p.kv_used_blocks(), p.total_kv_blocks(), p.kv_observed_ranks(), p.kv_expected_ranks()};
}

// Awaits a window built after `after` whose single pool entry equals `expected`.
v1::KvPoolLoadUpdate await_load(StreamReader<v1::KvPoolLoadUpdate>& stream, const LoadEntry& expected) {
  auto window =
      stream.until([&](const v1::KvPoolLoadUpdate& w) { return w.pools_size() == 1 && entry_of(w) == expected; });
  REQUIRE(window.has_value());
  return *window;
}

}  // namespace

TEST_CASE("load windows: coverage, partial usage, unknown capacity, undeclared ranks", "[load]") {
  CapturedLog log;  // first: it outlives the relay's threads
  kvrelay::RelayOptions options = loopback_options();
  options.load_window_ms = 20;
  TestRelay relay(options);
  auto load = watch_load(relay);
  auto first = load->next();
  REQUIRE(first.has_value());
  CHECK(first->window_ms() == 20);
  CHECK(first->pools_size() == 0);

  WorkerShape shape;
  shape.dp_size = 2;
  shape.total_kv_blocks = 100;
  relay.put_worker(put_worker_request(kDecode, 9, shape));
  await_load(*load, {0, 200, 0, 2});

  auto tally = relay.report_load(
      {load_report(kDecode, 9, 0, 40), load_report(kDecode, 9, 5, 1), load_report(kDecode, 77, 0, 1)});
  CHECK(tally.reports_applied() == 1);
  CHECK(tally.reports_rejected() == 2);
  CHECK(log.count({"[warning] rejected load report for endpoint=",
                   " worker=9 rank=5: the pool's workers declare no "
                   "such rank"}) == 1);
  await_load(*load, {0, 200, 1, 2});  // partial usage is never low load
  relay.report_load({load_report(kDecode, 9, 1, 30)});
  await_load(*load, {70, 200, 2, 2});

  shape.total_kv_blocks = 0;  // capacity unknown; observations of changed ranks are dropped
  relay.put_worker(put_worker_request(kDecode, 9, shape));
  await_load(*load, {0, 0, 0, 2});

  std::uint64_t last = 0;
  for (int i = 0; i < 3; ++i) {
    auto window = load->next();
    REQUIRE(window.has_value());
    CHECK(window->window_sequence() > last);
    last = window->window_sequence();
  }
}

TEST_CASE("load windows: a re-layout keeps the observations, a worker that is not live loses its own", "[load]") {
  kvrelay::RelayOptions options = loopback_options();
  options.load_window_ms = 20;
  options.expected_unique_blocks = std::nullopt;  // auto: the layout follows the declared capacity
  TestRelay relay(options);
  auto load = watch_load(relay);
  WorkerShape shape;
  shape.dp_size = 2;
  shape.total_kv_blocks = 4096;
  relay.put_worker(put_worker_request(kDecode, 1, shape));
  relay.report_load({load_report(kDecode, 1, 0, 40), load_report(kDecode, 1, 1, 30)});
  const std::uint64_t first_layout = await_load(*load, {70, 8192, 2, 2}).pools(0).producer().layout_generation();

  // A second worker doubles the declared capacity: the pool re-lays out into more buckets.
  relay.put_worker(put_worker_request(kDecode, 2, shape));
  CHECK(await_load(*load, {0, 16384, 2, 4}).pools(0).producer().layout_generation() > first_layout);
  relay.report_load({load_report(kDecode, 2, 0, 5), load_report(kDecode, 2, 1, 6)});
  await_load(*load, {81, 16384, 4, 4});

  relay.set_availability(kDecode, {2});  // worker 1 is no longer live: its last values are stale
  await_load(*load, {0, 16384, 2, 4});
  relay.report_load({load_report(kDecode, 1, 0, 1), load_report(kDecode, 1, 1, 2)});
  await_load(*load, {14, 16384, 4, 4});
}

TEST_CASE("readiness B: two models in one namespace are two entries", "[readiness]") {
  TestRelay relay;
  auto readiness = watch_readiness(relay);
  WorkerShape llama;
  llama.model = "meta/llama-3-70b";
  WorkerShape mistral;
  mistral.model = "mistralai/mixtral-8x7b";
  const auto llama_endpoint = endpoint_ref("prod", "llama");
  const auto mistral_endpoint = endpoint_ref("prod", "mistral");
  relay.put_worker(put_worker_request(llama_endpoint, 1, llama));
  relay.put_worker(put_worker_request(mistral_endpoint, 2, mistral));
  relay.set_availability(llama_endpoint, {1});
  relay.set_availability(mistral_endpoint, {2});
  auto both = readiness->until([](const v1::ServingReadinessUpdate& u) {
    return u.entries_size() == 2 && u.entries(0).state() == v1::SERVING_READINESS_STATE_READY &&
           u.entries(1).state() == v1::SERVING_READINESS_STATE_READY;
  });
  REQUIRE(both.has_value());
  CHECK(both->entries(0).canonical_model_id() == "meta/llama-3-70b");  // ordered by model id
  CHECK(both->entries(1).canonical_model_id() == "mistralai/mixtral-8x7b");
  for (const auto& entry : both->entries()) CHECK(entry.members_size() == 1);
}

TEST_CASE("readiness F and G: adapter readiness follows docs/protocol/decisions.md#d9", "[readiness]") {
  TestRelay relay;
  auto readiness = watch_readiness(relay);
  SECTION("F: an adapter only on the live aggregated worker of a mixed namespace is READY") {
    WorkerShape agg;
    agg.adapters = {"tenant-a"};
    relay.put_worker(put_worker_request(endpoint_ref("prod", "agg"), 1, agg));
    relay.put_worker(
        put_worker_request(kPrefill, 2, typed(ingest_v1::WORKER_TYPE_PREFILL, {{ingest_v1::WORKER_TYPE_DECODE}})));
    relay.put_worker(
        put_worker_request(kDecode, 3, typed(ingest_v1::WORKER_TYPE_DECODE, {{ingest_v1::WORKER_TYPE_PREFILL}})));
    relay.set_availability(endpoint_ref("prod", "agg"), {1});
    relay.set_availability(kPrefill, {2});
    relay.set_availability(kDecode, {3});
    auto update = await_entry(*readiness, [](const auto& e) {
      return e.state() == v1::SERVING_READINESS_STATE_READY && e.adapters_size() == 1;
    });
    const auto& entry = update.entries(0);
    CHECK(roles(entry.present_roles()) ==
          std::vector<int>{v1::WORKER_ROLE_PREFILL, v1::WORKER_ROLE_DECODE, v1::WORKER_ROLE_AGGREGATED});
    CHECK(entry.adapters(0).state() == v1::SERVING_READINESS_STATE_READY);
    CHECK(entry.adapters(0).missing_roles_size() == 0);
  }
  SECTION("G: EPD with the adapter on P and D, encoder down: both UNAVAILABLE, the adapter names the base's gap") {
    WorkerShape prefill = typed(ingest_v1::WORKER_TYPE_PREFILL, {{ingest_v1::WORKER_TYPE_DECODE}});
    prefill.adapters = {"tenant-a"};
    WorkerShape decode = typed(ingest_v1::WORKER_TYPE_DECODE, {{ingest_v1::WORKER_TYPE_PREFILL}});
    decode.adapters = {"tenant-a"};
    WorkerShape encoder =
        typed(ingest_v1::WORKER_TYPE_ENCODE, {{ingest_v1::WORKER_TYPE_PREFILL, ingest_v1::WORKER_TYPE_DECODE}});
    encoder.push_sources = false;
    relay.put_worker(put_worker_request(kPrefill, 1, prefill));
    relay.put_worker(put_worker_request(kDecode, 2, decode));
    relay.put_worker(put_worker_request(kEncoder, 3, encoder));
    relay.set_availability(kPrefill, {1});
    relay.set_availability(kDecode, {2});
    relay.set_availability(kEncoder, {});
    auto update = await_entry(*readiness, [](const auto& e) {
      return e.state() == v1::SERVING_READINESS_STATE_UNAVAILABLE && e.adapters_size() == 1;
    });
    CHECK(roles(update.entries(0).missing_roles()) == std::vector<int>{v1::WORKER_ROLE_ENCODE});
    CHECK(update.entries(0).adapters(0).state() == v1::SERVING_READINESS_STATE_UNAVAILABLE);
    CHECK(roles(update.entries(0).adapters(0).missing_roles()) == std::vector<int>{v1::WORKER_ROLE_ENCODE});
  }
}

TEST_CASE("readiness J: conflicts decide membership and pool links", "[readiness]") {
  TestRelay relay;
  auto readiness = watch_readiness(relay);
  SECTION("two base models on one endpoint leave it out of every entry") {
    WorkerShape other;
    other.model = "other-model";
    relay.put_worker(put_worker_request(kDecode, 1));
    relay.put_worker(put_worker_request(kDecode, 2, other));
    relay.put_worker(put_worker_request(kPrefill, 3));  // a clean endpoint serving llama
    relay.set_availability(kDecode, {1, 2});
    relay.set_availability(kPrefill, {3});
    auto update = await_entry(*readiness, [](const auto& e) { return e.state() == v1::SERVING_READINESS_STATE_READY; });
    REQUIRE(update.entries(0).members_size() == 1);
    CHECK(update.entries(0).members(0).endpoint().component() == "prefill");
  }
  SECTION("two indexer domains on one endpoint keep it a member without a pool") {
    WorkerShape coarse;
    coarse.block_size = 32;
    relay.put_worker(put_worker_request(kDecode, 1));
    relay.put_worker(put_worker_request(kDecode, 2, coarse));
    relay.set_availability(kDecode, {1, 2});
    auto update = await_entry(*readiness, [](const auto& e) { return e.state() == v1::SERVING_READINESS_STATE_READY; });
    REQUIRE(update.entries(0).members_size() == 1);
    CHECK_FALSE(update.entries(0).members(0).has_pool_id());
    CHECK(relay.get_state().pools_size() == 0);
  }
}
