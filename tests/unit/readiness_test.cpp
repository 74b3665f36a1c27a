#include "core/readiness.hpp"

#include <algorithm>
#include <catch2/catch.hpp>
#include <stdexcept>
#include <string>
#include <vector>

// Serving-readiness projection (docs/protocol/readiness.md#projection), with the choices of
// docs/protocol/decisions.md#d8 (duplicates reported, not gating), docs/protocol/decisions.md#d9
// (an adapter is the base's DNF over its carrying workers, gated by the base, never UNAVAILABLE
// without a missing role) and docs/protocol/decisions.md#d10 (UNKNOWN clears only
// present/missing).

using namespace kvrelay;
using namespace kvrelay::readiness;
namespace v1 = dynamo::kvrelay::v1;

namespace {

constexpr int P = v1::WORKER_ROLE_PREFILL;
constexpr int D = v1::WORKER_ROLE_DECODE;
constexpr int E = v1::WORKER_ROLE_ENCODE;
constexpr int AGG = v1::WORKER_ROLE_AGGREGATED;
constexpr int LEGACY = v1::WORKER_ROLE_LEGACY;

constexpr auto kUnknown = v1::SERVING_READINESS_STATE_UNKNOWN;
constexpr auto kUnavailable = v1::SERVING_READINESS_STATE_UNAVAILABLE;
constexpr auto kReady = v1::SERVING_READINESS_STATE_READY;

constexpr std::uint32_t kChat = 1u << 0;
constexpr std::uint32_t kCompletions = 1u << 1;

constexpr auto kPrefill = WorkerType::kPrefill;
constexpr auto kDecode = WorkerType::kDecode;
constexpr auto kEncode = WorkerType::kEncode;
constexpr auto kAggregated = WorkerType::kAggregated;

using Live = std::optional<std::set<std::uint64_t>>;
const Live kNotReported = std::nullopt;

WorkerTopology worker(std::optional<WorkerType> type, Needs needs = {}, std::uint32_t model_type = kChat) {
  return {type, model_type, std::move(needs)};
}

// An endpoint "ns/component/endpoint" serving `model` with the given workers; declared roles
// are derived from the workers the way the membership projection does (sorted, distinct).
EndpointFacts endpoint(const std::string& ns, const std::string& component, const std::string& name,
                       const std::string& model, std::map<std::uint64_t, WorkerTopology> workers, Live live) {
  EndpointFacts facts;
  facts.endpoint = {ns, component, name};
  facts.registrations.push_back({model, {model, std::nullopt}, {}});
  std::set<Role> roles;
  for (const auto& [id, topology] : workers) roles.insert(role_of(topology.worker_type));
  facts.roles.assign(roles.begin(), roles.end());
  facts.workers = std::move(workers);
  facts.live_workers = std::move(live);
  return facts;
}

void add_adapter(EndpointFacts& facts, const std::string& served_name, std::set<std::uint64_t> carriers,
                 const std::string& base_model = "llama") {
  AdapterMembership adapter{base_model, served_name, {}};
  for (const auto worker_id : carriers) adapter.workers[worker_id] = 4;
  facts.registrations.push_back({served_name, {base_model, served_name}, {}});
  facts.adapters[served_name] = std::move(adapter);
}

// A well-formed pool id; dc_id tells the test's pools apart.
v1::KvPoolId pool(std::uint64_t dc_id) {
  v1::KvPoolId id;
  id.set_identity_version(1);
  for (auto* digest :
       {id.mutable_indexer_domain()->mutable_cache_semantics(), id.mutable_indexer_domain()->mutable_routing_scope()}) {
    digest->set_digest(std::string(16, '\x5a'));
    digest->set_source(v1::IDENTITY_SOURCE_DEFAULT_DERIVED);
  }
  id.set_dc_id(dc_id);
  return id;
}

std::vector<int> roles(const google::protobuf::RepeatedField<int>& field) { return {field.begin(), field.end()}; }
const std::vector<int> kNone{};

std::vector<std::string> member_names(const v1::TopologyEntry& entry) {
  std::vector<std::string> names;
  for (const auto& m : entry.members()) {
    names.push_back(m.endpoint().namespace_() + "/" + m.endpoint().component() + "/" + m.endpoint().endpoint());
  }
  return names;
}

// Exactly one entry expected.
v1::TopologyEntry only_entry(const std::vector<EndpointFacts>& endpoints) {
  const auto entries = project(endpoints);
  REQUIRE(entries.size() == 1);
  return entries.front();
}

std::string serialized(const std::vector<v1::TopologyEntry>& entries) {
  v1::ServingReadinessUpdate update;
  for (const auto& entry : entries) *update.add_entries() = entry;
  std::string bytes;
  REQUIRE(update.SerializeToString(&bytes));
  return bytes;
}

// Example C: prefill w1 needs [[decode]] on prod/prefill/generate, decode w2 needs [[prefill]]
// on prod/backend/generate, model llama.
EndpointFacts prefill_endpoint(Live live, const std::string& component = "prefill", std::uint64_t id = 1) {
  return endpoint("prod", component, "generate", "llama", {{id, worker(kPrefill, {{kDecode}})}}, std::move(live));
}
EndpointFacts decode_endpoint(Live live, const std::string& component = "backend", std::uint64_t id = 2) {
  return endpoint("prod", component, "generate", "llama", {{id, worker(kDecode, {{kPrefill}})}}, std::move(live));
}
// Example D's encoder: needs [[prefill, decode], [aggregated]], no KV source so no pool link.
EndpointFacts encode_endpoint(Live live, const std::string& component = "encoder", std::uint64_t id = 3) {
  return endpoint("prod", component, "generate", "llama", {{id, worker(kEncode, {{kPrefill, kDecode}, {kAggregated}})}},
                  std::move(live));
}

}  // namespace

// ---- evaluator -------------------------------------------------------------------------------

TEST_CASE("evaluate: no units is neither ready nor legacy", "[readiness]") {
  const auto ev = evaluate({});
  CHECK_FALSE(ev.ready);
  CHECK_FALSE(ev.has_legacy);
  CHECK_FALSE(ev.has_live);
  CHECK(ev.present.empty());
  CHECK(ev.missing.empty());
}

TEST_CASE("evaluate: a unit without worker_type switches to legacy mode, live or not", "[readiness]") {
  SECTION("a dead legacy unit still disables strict gating") {
    const std::vector<ReadinessUnit> units{{std::nullopt, 0, {}}, {kDecode, 1, {{kPrefill}}}};
    const auto ev = evaluate(units);
    CHECK(ev.has_legacy);
    CHECK(ev.ready);  // anything live suffices; decode's unmet need is not reported
    CHECK(ev.missing.empty());
    CHECK(ev.present == std::set<Role>{Role::kDecode});
  }
  SECTION("nothing live is not ready") {
    const std::vector<ReadinessUnit> units{{std::nullopt, 0, {}}};
    const auto ev = evaluate(units);
    CHECK(ev.has_legacy);
    CHECK_FALSE(ev.ready);
  }
}

TEST_CASE("evaluate: duplicate live units of one role do not gate readiness (docs/protocol/decisions.md#d8)",
          "[readiness]") {
  const std::vector<ReadinessUnit> units{
      {kPrefill, 1, {{kDecode}}}, {kPrefill, 1, {{kDecode}}}, {kDecode, 1, {{kPrefill}}}};
  const auto ev = evaluate(units);
  CHECK(ev.ready);
  CHECK(ev.present == std::set<Role>{Role::kPrefill, Role::kDecode});
  CHECK(ev.missing.empty());
}

TEST_CASE("evaluate: exact role values, dead units' needs ignored, unmet DNF names every absent role", "[readiness]") {
  SECTION("an aggregated peer does not satisfy [[prefill, decode]]") {
    const std::vector<ReadinessUnit> units{{kAggregated, 1, {}}, {kEncode, 1, {{kPrefill, kDecode}}}};
    const auto ev = evaluate(units);
    CHECK_FALSE(ev.ready);
    CHECK(ev.missing == std::set<Role>{Role::kPrefill, Role::kDecode});
  }
  SECTION("a dead unit reports only its own role, not its needs") {
    const std::vector<ReadinessUnit> units{{kAggregated, 1, {}}, {kEncode, 0, {{kPrefill, kDecode}}}};
    const auto ev = evaluate(units);
    CHECK(ev.missing == std::set<Role>{Role::kEncode});
  }
  SECTION("one satisfied alternative is enough") {
    const std::vector<ReadinessUnit> units{{kAggregated, 1, {}}, {kEncode, 1, {{kPrefill, kDecode}, {kAggregated}}}};
    CHECK(evaluate(units).ready);
  }
  SECTION("a non-canonical worker_type is a caller bug") {
    const std::vector<ReadinessUnit> units{{static_cast<WorkerType>(5), 1, {}}};
    CHECK_THROWS_AS(evaluate(units), std::logic_error);
  }
}

// ---- units -----------------------------------------------------------------------------------

TEST_CASE("units_of groups workers by (worker_type, model_type, needs)", "[readiness]") {
  const std::set<std::uint64_t> both{1, 2};
  SECTION("two decode workers on different surfaces (Chat, Completions) are two units") {
    const std::map<std::uint64_t, WorkerTopology> workers{{1, worker(kDecode, {{kPrefill}}, kChat)},
                                                          {2, worker(kDecode, {{kPrefill}}, kCompletions)}};
    const auto units = units_of(workers, both);
    REQUIRE(units.size() == 2);
    CHECK(units[0].live_count == 1);
    CHECK(units[1].live_count == 1);
  }
  SECTION("two workers with the same key are one unit counting both") {
    const std::map<std::uint64_t, WorkerTopology> workers{{1, worker(kDecode, {{kPrefill}}, kChat)},
                                                          {2, worker(kDecode, {{kPrefill}}, kChat)}};
    const auto units = units_of(workers, both);
    REQUIRE(units.size() == 1);
    CHECK(units[0].worker_type == kDecode);
    CHECK(units[0].live_count == 2);
    CHECK(units[0].needs == Needs{{kPrefill}});
  }
  SECTION("different needs make different units") {
    const std::map<std::uint64_t, WorkerTopology> workers{{1, worker(kDecode, {{kPrefill}})}, {2, worker(kDecode)}};
    CHECK(units_of(workers, both).size() == 2);
  }
  SECTION("dead workers still form units; unknown availability counts nothing live") {
    const std::map<std::uint64_t, WorkerTopology> workers{{1, worker(kDecode)}, {2, worker(kPrefill)}};
    const auto partly_live = units_of(workers, std::set<std::uint64_t>{2});
    REQUIRE(partly_live.size() == 2);
    CHECK(partly_live[0].worker_type == kPrefill);  // key order: worker_type value first
    CHECK(partly_live[0].live_count == 1);
    CHECK(partly_live[1].live_count == 0);
    for (const auto& unit : units_of(workers, kNotReported)) CHECK(unit.live_count == 0);
  }
  SECTION("only_workers restricts the units to those workers") {
    const std::map<std::uint64_t, WorkerTopology> workers{{1, worker(kDecode)}, {2, worker(kPrefill)}};
    const std::set<std::uint64_t> carriers{2, 99};  // 99 has no base card: ignored
    const auto units = units_of(workers, both, &carriers);
    REQUIRE(units.size() == 1);
    CHECK(units[0].worker_type == kPrefill);
    CHECK(units[0].live_count == 1);
  }
}

// ---- projection basics -----------------------------------------------------------------------

TEST_CASE("an empty input projects no entries", "[readiness]") { CHECK(readiness::project({}).empty()); }

TEST_CASE("only Base registrations create entries, a LoRA-only endpoint creates none", "[readiness]") {
  auto facts = endpoint("prod", "backend", "generate", "llama", {{1, worker(kAggregated)}}, std::set<std::uint64_t>{1});
  facts.registrations = {{"tenant-a", {"llama", "tenant-a"}, {}}};
  CHECK(project(std::vector{facts}).empty());
}

// ---- worked examples (docs/protocol/readiness.md#examples) ------------------------------------

TEST_CASE("example A: one aggregated endpoint, all three availabilities", "[readiness]") {
  auto facts = endpoint("prod", "backend", "generate", "llama", {{1, worker(kAggregated)}}, kNotReported);
  facts.pool_links["llama"] = pool(7);

  SECTION("not yet reported: UNKNOWN, member and pool link still listed") {
    const auto entry = only_entry({facts});
    CHECK(entry.namespace_() == "prod");
    CHECK(entry.canonical_model_id() == "llama");
    CHECK(entry.state() == kUnknown);
    CHECK(roles(entry.present_roles()) == kNone);
    CHECK(roles(entry.missing_roles()) == kNone);
    REQUIRE(entry.members_size() == 1);
    CHECK(member_names(entry) == std::vector<std::string>{"prod/backend/generate"});
    CHECK(roles(entry.members(0).roles()) == std::vector{AGG});
    REQUIRE(entry.members(0).has_pool_id());
    CHECK(entry.members(0).pool_id().dc_id() == 7);
    CHECK(roles(entry.duplicate_role_endpoints()) == kNone);
    CHECK_FALSE(entry.legacy_fallback_active());
  }
  SECTION("{1}: READY") {
    facts.live_workers = std::set<std::uint64_t>{1};
    const auto entry = only_entry({facts});
    CHECK(entry.state() == kReady);
    CHECK(roles(entry.present_roles()) == std::vector{AGG});
    CHECK(roles(entry.missing_roles()) == kNone);
  }
  SECTION("{}: UNAVAILABLE, the declared role with nothing live is missing") {
    facts.live_workers = std::set<std::uint64_t>{};
    const auto entry = only_entry({facts});
    CHECK(entry.state() == kUnavailable);
    CHECK(roles(entry.present_roles()) == kNone);
    CHECK(roles(entry.missing_roles()) == std::vector{AGG});
  }
}

TEST_CASE("example B: two aggregated models in one namespace are two independent entries", "[readiness]") {
  const std::vector endpoints{endpoint("prod", "mistral", "generate", "mistralai/mixtral-8x7b",
                                       {{2, worker(kAggregated)}}, std::set<std::uint64_t>{2}),
                              endpoint("prod", "llama", "generate", "meta/llama-3-70b", {{1, worker(kAggregated)}},
                                       std::set<std::uint64_t>{1})};
  const auto entries = project(endpoints);
  REQUIRE(entries.size() == 2);
  CHECK(entries[0].canonical_model_id() == "meta/llama-3-70b");
  CHECK(entries[1].canonical_model_id() == "mistralai/mixtral-8x7b");
  for (const auto& entry : entries) {
    CHECK(entry.state() == kReady);
    CHECK(entry.members_size() == 1);
    CHECK(roles(entry.present_roles()) == std::vector{AGG});
  }
  CHECK(member_names(entries[0]) == std::vector<std::string>{"prod/llama/generate"});
}

TEST_CASE("example C: prefill/decode", "[readiness]") {
  SECTION("P {1}, D not reported: UNKNOWN") {
    const auto entry = only_entry({prefill_endpoint(std::set<std::uint64_t>{1}), decode_endpoint(kNotReported)});
    CHECK(entry.state() == kUnknown);
    CHECK(roles(entry.present_roles()) == kNone);
    CHECK(roles(entry.missing_roles()) == kNone);
  }
  SECTION("P {1}, D {2}: READY, members sorted by their text") {
    const auto entry =
        only_entry({prefill_endpoint(std::set<std::uint64_t>{1}), decode_endpoint(std::set<std::uint64_t>{2})});
    CHECK(entry.state() == kReady);
    CHECK(roles(entry.present_roles()) == std::vector{P, D});
    CHECK(roles(entry.missing_roles()) == kNone);
    CHECK(member_names(entry) == std::vector<std::string>{"prod/backend/generate", "prod/prefill/generate"});
    CHECK(roles(entry.members(0).roles()) == std::vector{D});
    CHECK(roles(entry.members(1).roles()) == std::vector{P});
    CHECK(roles(entry.duplicate_role_endpoints()) == kNone);
  }
  SECTION("P {1}, D {}: UNAVAILABLE missing DECODE") {
    const auto entry =
        only_entry({prefill_endpoint(std::set<std::uint64_t>{1}), decode_endpoint(std::set<std::uint64_t>{})});
    CHECK(entry.state() == kUnavailable);
    CHECK(roles(entry.present_roles()) == std::vector{P});
    CHECK(roles(entry.missing_roles()) == std::vector{D});
  }
  SECTION("decode endpoint gone: DECODE missing from prefill's needs, one member") {
    const auto entry = only_entry({prefill_endpoint(std::set<std::uint64_t>{1})});
    CHECK(entry.state() == kUnavailable);
    CHECK(roles(entry.present_roles()) == std::vector{P});
    CHECK(roles(entry.missing_roles()) == std::vector{D});
    CHECK(entry.members_size() == 1);
  }
}

TEST_CASE("example D: encode/prefill/decode", "[readiness]") {
  const std::set<std::uint64_t> none{};
  auto prefill = prefill_endpoint(std::set<std::uint64_t>{1});
  auto decode = decode_endpoint(std::set<std::uint64_t>{2});
  auto encoder = encode_endpoint(std::set<std::uint64_t>{3});
  prefill.pool_links["llama"] = pool(1);
  decode.pool_links["llama"] = pool(2);

  SECTION("all live: READY, encoder member without pool link") {
    const auto entry = only_entry({prefill, decode, encoder});
    CHECK(entry.state() == kReady);
    CHECK(roles(entry.present_roles()) == std::vector{P, D, E});
    CHECK(member_names(entry) ==
          std::vector<std::string>{"prod/backend/generate", "prod/encoder/generate", "prod/prefill/generate"});
    CHECK(entry.members(0).has_pool_id());
    CHECK_FALSE(entry.members(1).has_pool_id());
    CHECK(entry.members(2).has_pool_id());

    // The encoder's pool materialises later: it gains a pool_id, nothing else changes.
    encoder.pool_links["llama"] = pool(3);
    const auto linked = only_entry({prefill, decode, encoder});
    CHECK(linked.members(1).pool_id().dc_id() == 3);
    auto without_link = linked;
    without_link.mutable_members(1)->clear_pool_id();
    CHECK(without_link.SerializeAsString() == entry.SerializeAsString());
  }
  SECTION("encode {}: UNAVAILABLE missing ENCODE") {
    encoder.live_workers = none;
    const auto entry = only_entry({prefill, decode, encoder});
    CHECK(entry.state() == kUnavailable);
    CHECK(roles(entry.present_roles()) == std::vector{P, D});
    CHECK(roles(entry.missing_roles()) == std::vector{E});
  }
  SECTION("prefill {}: encode's DNF fails, every absent role of every alternative is missing") {
    prefill.live_workers = none;
    const auto entry = only_entry({prefill, decode, encoder});
    CHECK(entry.state() == kUnavailable);
    CHECK(roles(entry.present_roles()) == std::vector{D, E});
    CHECK(roles(entry.missing_roles()) == std::vector{P, AGG});
  }
}

TEST_CASE("example E: LoRA on a P/D pair", "[readiness]") {
  auto prefill = prefill_endpoint(std::set<std::uint64_t>{1});
  auto decode = decode_endpoint(std::set<std::uint64_t>{2});
  add_adapter(decode, "tenant-a", {2});

  SECTION("adapter only on decode: base READY, adapter UNAVAILABLE missing PREFILL") {
    const auto entry = only_entry({prefill, decode});
    CHECK(entry.state() == kReady);
    REQUIRE(entry.adapters_size() == 1);
    CHECK(entry.adapters(0).canonical_model_id() == "tenant-a");
    CHECK(entry.adapters(0).state() == kUnavailable);
    CHECK(roles(entry.adapters(0).missing_roles()) == std::vector{P});
  }
  SECTION("adapter on both: adapter READY") {
    add_adapter(prefill, "tenant-a", {1});
    const auto entry = only_entry({prefill, decode});
    REQUIRE(entry.adapters_size() == 1);
    CHECK(entry.adapters(0).state() == kReady);
    CHECK(roles(entry.adapters(0).missing_roles()) == kNone);
  }
  SECTION("adapter on both but its prefill carrier is dead: the live-worker rule applies per role") {
    prefill.workers[5] = worker(kPrefill, {{kDecode}});  // a live prefill worker without the adapter
    prefill.live_workers = std::set<std::uint64_t>{5};
    add_adapter(prefill, "tenant-a", {1});
    const auto entry = only_entry({prefill, decode});
    CHECK(entry.state() == kReady);
    CHECK(entry.adapters(0).state() == kUnavailable);
    CHECK(roles(entry.adapters(0).missing_roles()) == std::vector{P});
  }
}

TEST_CASE("example F: an adapter only on the live aggregated worker of a mixed P/D + AGG namespace is READY",
          "[readiness]") {
  // docs/protocol/decisions.md#d9: the adapter's own units are just the aggregated one, which needs
  // nothing; the P/D route without the adapter does not gate it (the earlier rule said
  // UNAVAILABLE missing [PREFILL, DECODE]).
  auto aggregated =
      endpoint("prod", "agg", "generate", "llama", {{10, worker(kAggregated)}}, std::set<std::uint64_t>{10});
  add_adapter(aggregated, "tenant-a", {10});
  const auto entry = only_entry(
      {aggregated, prefill_endpoint(std::set<std::uint64_t>{1}), decode_endpoint(std::set<std::uint64_t>{2})});
  CHECK(entry.state() == kReady);
  CHECK(roles(entry.present_roles()) == std::vector{P, D, AGG});
  REQUIRE(entry.adapters_size() == 1);
  CHECK(entry.adapters(0).state() == kReady);
  CHECK(roles(entry.adapters(0).missing_roles()) == kNone);
}

TEST_CASE("a dead carrier is not demanded: a live aggregated carrier makes the adapter READY", "[readiness]") {
  // The prefill carrier of the adapter is dead; another prefill worker keeps the base READY. The
  // adapter is served by its live aggregated carrier, so it is READY (an evaluation over dead
  // carriers too would call it UNAVAILABLE missing PREFILL).
  auto aggregated =
      endpoint("prod", "agg", "generate", "llama", {{10, worker(kAggregated)}}, std::set<std::uint64_t>{10});
  add_adapter(aggregated, "tenant-a", {10});
  auto prefill = prefill_endpoint(std::set<std::uint64_t>{5});
  prefill.workers[5] = worker(kPrefill, {{kDecode}});
  add_adapter(prefill, "tenant-a", {1});
  const auto entry = only_entry({aggregated, prefill, decode_endpoint(std::set<std::uint64_t>{2})});
  CHECK(entry.state() == kReady);
  REQUIRE(entry.adapters_size() == 1);
  CHECK(entry.adapters(0).state() == kReady);
}

TEST_CASE("example F without the P/D pair: the aggregated carrier alone makes the adapter READY", "[readiness]") {
  auto aggregated =
      endpoint("prod", "agg", "generate", "llama", {{10, worker(kAggregated)}}, std::set<std::uint64_t>{10});
  add_adapter(aggregated, "tenant-a", {10});
  const auto entry = only_entry({aggregated});
  REQUIRE(entry.adapters_size() == 1);
  CHECK(entry.adapters(0).state() == kReady);
}

TEST_CASE(
    "example G per docs/protocol/decisions.md#d9: EPD + LoRA with the encoder down caps the adapter at "
    "UNAVAILABLE, naming the base's missing ENCODE",
    "[readiness]") {
  // Judged independent of the base, the adapter would be READY; docs/protocol/decisions.md#d9
  // gates the adapter by its base.
  auto prefill = prefill_endpoint(std::set<std::uint64_t>{1});
  auto decode = decode_endpoint(std::set<std::uint64_t>{2});
  add_adapter(prefill, "tenant-a", {1});
  add_adapter(decode, "tenant-a", {2});
  const auto entry = only_entry({prefill, decode, encode_endpoint(std::set<std::uint64_t>{})});
  CHECK(entry.state() == kUnavailable);
  CHECK(roles(entry.missing_roles()) == std::vector{E});
  REQUIRE(entry.adapters_size() == 1);
  CHECK(entry.adapters(0).state() == kUnavailable);                   // its own P/D evaluation is ready
  CHECK(roles(entry.adapters(0).missing_roles()) == std::vector{E});  // the base's missing role
}

TEST_CASE("an UNAVAILABLE adapter's missing roles are the union of its own evaluation's and the base's",
          "[readiness]") {
  // EPD with the encoder down (base missing [ENCODE]) and the adapter only on decode (its own
  // units miss PREFILL): [PREFILL, ENCODE], in enum order. The earlier rule said [PREFILL].
  auto prefill = prefill_endpoint(std::set<std::uint64_t>{1});
  auto decode = decode_endpoint(std::set<std::uint64_t>{2});
  add_adapter(decode, "tenant-a", {2});
  const auto entry = only_entry({prefill, decode, encode_endpoint(std::set<std::uint64_t>{})});
  CHECK(entry.state() == kUnavailable);
  CHECK(roles(entry.missing_roles()) == std::vector{E});
  REQUIRE(entry.adapters_size() == 1);
  CHECK(entry.adapters(0).state() == kUnavailable);
  CHECK(roles(entry.adapters(0).missing_roles()) == std::vector{P, E});
}

TEST_CASE("adapter under an UNAVAILABLE base: its dead decode carrier and the base both name DECODE", "[readiness]") {
  // The adapter's units miss DECODE (declared, nothing live) and so does the base: one DECODE.
  auto prefill = prefill_endpoint(std::set<std::uint64_t>{1});
  auto decode = decode_endpoint(std::set<std::uint64_t>{});
  add_adapter(prefill, "tenant-a", {1});
  add_adapter(decode, "tenant-a", {2});
  const auto entry = only_entry({prefill, decode});
  CHECK(entry.state() == kUnavailable);
  CHECK(entry.adapters(0).state() == kUnavailable);
  CHECK(roles(entry.adapters(0).missing_roles()) == std::vector{D});
}

TEST_CASE("adapter authority: UNKNOWN exactly when the base is UNKNOWN, missing roles cleared", "[readiness]") {
  // The adapter's own endpoint is authoritative and its evaluation ready, but a base member is
  // not: docs/protocol/decisions.md#d9 makes the adapter follow the base (an earlier rule judged
  // it on its own).
  auto aggregated =
      endpoint("prod", "agg", "generate", "llama", {{10, worker(kAggregated)}}, std::set<std::uint64_t>{10});
  add_adapter(aggregated, "tenant-a", {10});
  auto prefill = prefill_endpoint(kNotReported);
  const auto decode = decode_endpoint(std::set<std::uint64_t>{2});
  const auto entry = only_entry({aggregated, prefill, decode});
  CHECK(entry.state() == kUnknown);
  REQUIRE(entry.adapters_size() == 1);
  CHECK(entry.adapters(0).state() == kUnknown);
  CHECK(roles(entry.adapters(0).missing_roles()) == kNone);

  SECTION("a carrying endpoint not yet reported: UNKNOWN too") {
    aggregated.live_workers = kNotReported;
    prefill.live_workers = std::set<std::uint64_t>{1};
    const auto carrier_unknown = only_entry({aggregated, prefill, decode});
    CHECK(carrier_unknown.state() == kUnknown);
    CHECK(carrier_unknown.adapters(0).state() == kUnknown);
    CHECK(roles(carrier_unknown.adapters(0).missing_roles()) == kNone);
  }
  SECTION("once the last member reports, the adapter takes its own verdict") {
    prefill.live_workers = std::set<std::uint64_t>{1};
    const auto reported = only_entry({aggregated, prefill, decode});
    CHECK(reported.state() == kReady);
    CHECK(reported.adapters(0).state() == kReady);
  }
}

TEST_CASE("adapters: carriers without a base card are ignored, other base models' adapters are not listed",
          "[readiness]") {
  auto aggregated =
      endpoint("prod", "agg", "generate", "llama", {{10, worker(kAggregated)}}, std::set<std::uint64_t>{10, 11});
  add_adapter(aggregated, "orphan-carrier", {11});  // worker 11 has no base card here
  add_adapter(aggregated, "other-base", {10}, "mistral");
  const auto entry = only_entry({aggregated});
  REQUIRE(entry.adapters_size() == 1);
  CHECK(entry.adapters(0).canonical_model_id() == "orphan-carrier");
  CHECK(entry.adapters(0).state() == kUnavailable);                     // no units: nothing can serve it
  CHECK(roles(entry.adapters(0).missing_roles()) == std::vector{AGG});  // the never-empty fallback
}

TEST_CASE("adapters on a legacy base: READY iff the base is READY and some live worker carries it", "[readiness]") {
  // Legacy units report no missing role, so an UNAVAILABLE adapter falls back to AGGREGATED:
  // it lacks a live carrier serving requests on its own, and LEGACY may not be named.
  auto legacy =
      endpoint("prod", "backend", "generate", "llama",
               {{1, worker(std::nullopt)}, {2, worker(std::nullopt, {}, kCompletions)}}, std::set<std::uint64_t>{1});
  add_adapter(legacy, "live-carrier", {1});
  add_adapter(legacy, "dead-carrier", {2});
  const auto entry = only_entry({legacy});
  CHECK(entry.state() == kReady);
  CHECK(entry.legacy_fallback_active());
  REQUIRE(entry.adapters_size() == 2);
  CHECK(entry.adapters(0).canonical_model_id() == "dead-carrier");
  CHECK(entry.adapters(0).state() == kUnavailable);
  CHECK(roles(entry.adapters(0).missing_roles()) == std::vector{AGG});
  CHECK(entry.adapters(1).canonical_model_id() == "live-carrier");
  CHECK(entry.adapters(1).state() == kReady);

  legacy.live_workers = std::set<std::uint64_t>{};
  const auto down = only_entry({legacy});
  CHECK(down.state() == kUnavailable);
  CHECK(roles(down.missing_roles()) == kNone);  // the base itself names none in legacy mode
  REQUIRE(down.adapters_size() == 2);
  for (const auto& adapter : down.adapters()) {
    CHECK(adapter.state() == kUnavailable);
    CHECK(roles(adapter.missing_roles()) == std::vector{AGG});
  }
}

TEST_CASE("an adapter only on typed carriers of a legacy base is evaluated strictly over its own units",
          "[readiness]") {
  // The evaluator is in legacy mode only when the adapter's own units contain an untyped card:
  // a live legacy worker without the adapter does not stand in for the prefill the carrier needs.
  auto legacy =
      endpoint("prod", "legacy", "generate", "llama", {{1, worker(std::nullopt)}}, std::set<std::uint64_t>{1});
  auto decode = decode_endpoint(std::set<std::uint64_t>{2});
  add_adapter(decode, "tenant-a", {2});
  const auto entry = only_entry({legacy, decode});
  CHECK(entry.state() == kReady);
  CHECK(entry.legacy_fallback_active());
  REQUIRE(entry.adapters_size() == 1);
  CHECK(entry.adapters(0).state() == kUnavailable);
  CHECK(roles(entry.adapters(0).missing_roles()) == std::vector{P});
}

TEST_CASE("example H: legacy fallback", "[readiness]") {
  const std::set<std::uint64_t> live1{1};
  SECTION("(None,1,[]): READY, legacy, member role LEGACY") {
    const auto entry =
        only_entry({endpoint("prod", "backend", "generate", "llama", {{1, worker(std::nullopt)}}, live1)});
    CHECK(entry.state() == kReady);
    CHECK(entry.legacy_fallback_active());
    CHECK(roles(entry.present_roles()) == kNone);
    CHECK(roles(entry.missing_roles()) == kNone);
    CHECK(roles(entry.members(0).roles()) == std::vector{LEGACY});
  }
  SECTION("(None,0,[]): UNAVAILABLE, legacy") {
    const auto entry = only_entry(
        {endpoint("prod", "backend", "generate", "llama", {{1, worker(std::nullopt)}}, std::set<std::uint64_t>{})});
    CHECK(entry.state() == kUnavailable);
    CHECK(entry.legacy_fallback_active());
    CHECK(roles(entry.missing_roles()) == kNone);
  }
  SECTION("(None,1,[]) + (decode,0,[[prefill]]): READY, nothing missing") {
    const auto entry = only_entry({endpoint("prod", "legacy", "generate", "llama", {{1, worker(std::nullopt)}}, live1),
                                   decode_endpoint(std::set<std::uint64_t>{})});
    CHECK(entry.state() == kReady);
    CHECK(entry.legacy_fallback_active());
    CHECK(roles(entry.present_roles()) == kNone);
    CHECK(roles(entry.missing_roles()) == kNone);
  }
  SECTION("(None,0,[]) + (aggregated,1,[]): READY, typed live roles still listed") {
    const auto entry = only_entry(
        {endpoint("prod", "legacy", "generate", "llama", {{1, worker(std::nullopt)}}, std::set<std::uint64_t>{}),
         endpoint("prod", "agg", "generate", "llama", {{2, worker(kAggregated)}}, std::set<std::uint64_t>{2})});
    CHECK(entry.state() == kReady);
    CHECK(entry.legacy_fallback_active());
    CHECK(roles(entry.present_roles()) == std::vector{AGG});
  }
  SECTION("(None,1,[]) + two live prefill endpoints: READY; the declared duplicate is still reported") {
    // Judgement call: legacy mode never computes ambiguity, so dup [] could be expected; but the
    // declared-by-two-endpoints fact of docs/protocol/decisions.md#d8 does not depend on the mode
    // (docs/protocol/readiness.md#duplicate-roles).
    const auto entry = only_entry({endpoint("prod", "legacy", "generate", "llama", {{1, worker(std::nullopt)}}, live1),
                                   prefill_endpoint(std::set<std::uint64_t>{2}, "prefill-a", 2),
                                   prefill_endpoint(std::set<std::uint64_t>{3}, "prefill-b", 3)});
    CHECK(entry.state() == kReady);
    CHECK(entry.legacy_fallback_active());
    CHECK(roles(entry.duplicate_role_endpoints()) == std::vector{P});
  }
  SECTION("a normalised old prefill card (worker_type set by the caller) takes the strict path") {
    // The caller rewrote worker_type = None + model_type Prefill bit into (prefill, [[decode]]).
    auto old_prefill = endpoint("prod", "prefill", "generate", "llama",
                                {{1, worker(kPrefill, {{kDecode}}, kChat | kModelTypeLegacyPrefillBit)}}, live1);
    const auto entry = only_entry({old_prefill, decode_endpoint(std::set<std::uint64_t>{2})});
    CHECK(entry.state() == kReady);
    CHECK_FALSE(entry.legacy_fallback_active());
    CHECK(roles(entry.members(1).roles()) == std::vector{P});
  }
}

TEST_CASE("example I adjusted per docs/protocol/decisions.md#d8: duplicates are reported, never gating",
          "[readiness]") {
  const std::set<std::uint64_t> none{};
  SECTION("prefill-a live, prefill-b live, decode live: READY, dup [PREFILL]") {
    const auto entry = only_entry({prefill_endpoint(std::set<std::uint64_t>{1}, "prefill-a", 1),
                                   prefill_endpoint(std::set<std::uint64_t>{3}, "prefill-b", 3),
                                   decode_endpoint(std::set<std::uint64_t>{2})});
    CHECK(entry.state() == kReady);
    CHECK(roles(entry.present_roles()) == std::vector{P, D});
    CHECK(roles(entry.missing_roles()) == kNone);
    CHECK(roles(entry.duplicate_role_endpoints()) == std::vector{P});
  }
  SECTION("2 prefill + 2 decode endpoints, all live: READY, dup [PREFILL, DECODE]") {
    const auto entry = only_entry({prefill_endpoint(std::set<std::uint64_t>{1}, "prefill-a", 1),
                                   prefill_endpoint(std::set<std::uint64_t>{3}, "prefill-b", 3),
                                   decode_endpoint(std::set<std::uint64_t>{2}, "decode-a", 2),
                                   decode_endpoint(std::set<std::uint64_t>{4}, "decode-b", 4)});
    CHECK(entry.state() == kReady);
    CHECK(roles(entry.duplicate_role_endpoints()) == std::vector{P, D});
  }
  SECTION("prefill-a live, prefill-b {}, decode live: READY, dup [PREFILL] (declared, liveness-independent)") {
    const auto entry =
        only_entry({prefill_endpoint(std::set<std::uint64_t>{1}, "prefill-a", 1),
                    prefill_endpoint(none, "prefill-b", 3), decode_endpoint(std::set<std::uint64_t>{2})});
    CHECK(entry.state() == kReady);
    CHECK(roles(entry.duplicate_role_endpoints()) == std::vector{P});
  }
  SECTION("two aggregated endpoints live: READY, dup [], 2 members") {
    const auto entry = only_entry(
        {endpoint("prod", "agg-a", "generate", "llama", {{1, worker(kAggregated)}}, std::set<std::uint64_t>{1}),
         endpoint("prod", "agg-b", "generate", "llama", {{2, worker(kAggregated)}}, std::set<std::uint64_t>{2})});
    CHECK(entry.state() == kReady);
    CHECK(roles(entry.duplicate_role_endpoints()) == kNone);
    CHECK(entry.members_size() == 2);
  }
  SECTION("encode-a, encode-b, prefill, decode all live: READY, ENCODE never reported") {
    const auto entry =
        only_entry({encode_endpoint(std::set<std::uint64_t>{3}, "encoder-a", 3),
                    encode_endpoint(std::set<std::uint64_t>{4}, "encoder-b", 4),
                    prefill_endpoint(std::set<std::uint64_t>{1}), decode_endpoint(std::set<std::uint64_t>{2})});
    CHECK(entry.state() == kReady);
    CHECK(roles(entry.duplicate_role_endpoints()) == kNone);
  }
  SECTION(
      "one decode endpoint with Chat and Completions workers, plus prefill: two units, one endpoint, no "
      "dup") {
    auto decode =
        endpoint("prod", "backend", "generate", "llama",
                 {{2, worker(kDecode, {{kPrefill}}, kChat)}, {3, worker(kDecode, {{kPrefill}}, kCompletions)}},
                 std::set<std::uint64_t>{2, 3});
    CHECK(units_of(decode.workers, decode.live_workers).size() == 2);
    const auto entry = only_entry({prefill_endpoint(std::set<std::uint64_t>{1}), decode});
    CHECK(entry.state() == kReady);
    CHECK(roles(entry.duplicate_role_endpoints()) == kNone);
  }
  SECTION("one decode endpoint with two identical workers: one unit, no dup") {
    auto decode = endpoint("prod", "backend", "generate", "llama",
                           {{2, worker(kDecode, {{kPrefill}})}, {3, worker(kDecode, {{kPrefill}})}},
                           std::set<std::uint64_t>{2, 3});
    CHECK(units_of(decode.workers, decode.live_workers).size() == 1);
    const auto entry = only_entry({prefill_endpoint(std::set<std::uint64_t>{1}), decode});
    CHECK(entry.state() == kReady);
    CHECK(roles(entry.duplicate_role_endpoints()) == kNone);
  }
  SECTION("P/D for llama and P/D for mistral in one namespace: two READY entries, no dup (per key)") {
    std::vector endpoints{prefill_endpoint(std::set<std::uint64_t>{1}, "llama-prefill", 1),
                          decode_endpoint(std::set<std::uint64_t>{2}, "llama-decode", 2)};
    for (auto facts : {prefill_endpoint(std::set<std::uint64_t>{3}, "mistral-prefill", 3),
                       decode_endpoint(std::set<std::uint64_t>{4}, "mistral-decode", 4)}) {
      facts.registrations = {{"mistral", {"mistral", std::nullopt}, {}}};
      endpoints.push_back(facts);
    }
    const auto entries = project(endpoints);
    REQUIRE(entries.size() == 2);
    for (const auto& entry : entries) {
      CHECK(entry.state() == kReady);
      CHECK(entry.members_size() == 2);
      CHECK(roles(entry.duplicate_role_endpoints()) == kNone);
    }
  }
}

TEST_CASE("example J: conflicts", "[readiness]") {
  SECTION("a ServingTopology conflict removes the endpoint and its roles from every entry") {
    auto conflicted = decode_endpoint(std::set<std::uint64_t>{2});
    conflicted.serving_topology_conflict = true;
    auto entry = only_entry({prefill_endpoint(std::set<std::uint64_t>{1}), conflicted});
    CHECK(entry.state() == kUnavailable);
    CHECK(roles(entry.missing_roles()) == std::vector{D});
    CHECK(member_names(entry) == std::vector<std::string>{"prod/prefill/generate"});

    conflicted.live_workers = kNotReported;  // nor does its missing availability count
    entry = only_entry({prefill_endpoint(std::set<std::uint64_t>{1}), conflicted});
    CHECK(entry.state() == kUnavailable);
    CHECK(project(std::vector{conflicted}).empty());
  }
  SECTION("a PoolMaterialization conflict keeps the member and its roles, without a pool_id") {
    auto prefill = prefill_endpoint(std::set<std::uint64_t>{1});
    prefill.pool_links["llama"] = pool(1);
    const auto entry = only_entry({prefill, decode_endpoint(std::set<std::uint64_t>{2})});  // decode: no link
    CHECK(entry.state() == kReady);
    CHECK(member_names(entry) == std::vector<std::string>{"prod/backend/generate", "prod/prefill/generate"});
    CHECK_FALSE(entry.members(0).has_pool_id());
    CHECK(entry.members(1).has_pool_id());
  }
}

// ---- UNKNOWN, ordering, determinism ----------------------------------------------------------

TEST_CASE("UNKNOWN clears only present/missing and adapters' missing (docs/protocol/decisions.md#d10)", "[readiness]") {
  auto legacy = endpoint("prod", "legacy", "generate", "llama", {{9, worker(std::nullopt)}}, kNotReported);
  auto prefill_a = prefill_endpoint(std::set<std::uint64_t>{1}, "prefill-a", 1);
  auto prefill_b = prefill_endpoint(std::set<std::uint64_t>{}, "prefill-b", 3);
  prefill_a.pool_links["llama"] = pool(11);
  add_adapter(prefill_a, "tenant-a", {1});

  const auto entry = only_entry({legacy, prefill_a, prefill_b});
  CHECK(entry.state() == kUnknown);
  CHECK(roles(entry.present_roles()) == kNone);
  CHECK(roles(entry.missing_roles()) == kNone);
  CHECK(member_names(entry) ==
        std::vector<std::string>{"prod/legacy/generate", "prod/prefill-a/generate", "prod/prefill-b/generate"});
  CHECK(entry.members(1).pool_id().dc_id() == 11);
  CHECK(roles(entry.duplicate_role_endpoints()) == std::vector{P});
  CHECK(entry.legacy_fallback_active());
  REQUIRE(entry.adapters_size() == 1);
  CHECK(entry.adapters(0).state() == kUnknown);
  CHECK(roles(entry.adapters(0).missing_roles()) == kNone);

  // The same facts once the last endpoint reports: the cleared fields come back.
  legacy.live_workers = std::set<std::uint64_t>{};
  const auto reported = only_entry({legacy, prefill_a, prefill_b});
  CHECK(reported.state() == kReady);
  CHECK(roles(reported.present_roles()) == std::vector{P});
}

TEST_CASE("ordering: entries, members, roles and adapters are sorted byte-wise / in enum order", "[readiness]") {
  const std::set<std::uint64_t> live{1};
  auto agg = [&](const std::string& ns, const std::string& component, const std::string& model) {
    return endpoint(ns, component, "generate", model, {{1, worker(kAggregated)}}, live);
  };
  SECTION("entries by (namespace, model), byte-wise: uppercase before lowercase, UTF-8 after ASCII") {
    const std::vector endpoints{agg("prod", "c1", "zeta"), agg("prod", "c2", "\xc3\xa9t\xc3\xa9"),
                                agg("prod", "c3", "Zeta"), agg("dev", "c4", "zeta"), agg("prod", "c5", "alpha")};
    std::vector<std::pair<std::string, std::string>> keys;
    for (const auto& entry : project(endpoints)) keys.emplace_back(entry.namespace_(), entry.canonical_model_id());
    CHECK(keys ==
          std::vector<std::pair<std::string, std::string>>{
              {"dev", "zeta"}, {"prod", "Zeta"}, {"prod", "alpha"}, {"prod", "zeta"}, {"prod", "\xc3\xa9t\xc3\xa9"}});
  }
  SECTION("the same model in two namespaces is two entries, each in its endpoints' namespace") {
    const auto entries = project(std::vector{agg("b-ns", "c", "llama"), agg("a-ns", "c", "llama")});
    REQUIRE(entries.size() == 2);
    CHECK(entries[0].namespace_() == "a-ns");
    CHECK(member_names(entries[0]) == std::vector<std::string>{"a-ns/c/generate"});
    CHECK(entries[1].namespace_() == "b-ns");
    CHECK(member_names(entries[1]) == std::vector<std::string>{"b-ns/c/generate"});
  }
  SECTION("members by their \"ns/component/endpoint\" text, not field by field") {
    // Field by field "b" < "b-x"; as text "prod/b-x/..." < "prod/b/..." because '-' < '/'.
    const auto entry = only_entry({agg("prod", "b", "llama"), agg("prod", "b-x", "llama"), agg("prod", "B", "llama")});
    CHECK(member_names(entry) == std::vector<std::string>{"prod/B/generate", "prod/b-x/generate", "prod/b/generate"});
  }
  SECTION("member roles are sorted in enum order and de-duplicated") {
    auto facts = agg("prod", "c", "llama");
    facts.roles = {Role::kLegacy, Role::kAggregated, Role::kPrefill, Role::kAggregated};
    const auto entry = only_entry({facts});
    CHECK(roles(entry.members(0).roles()) == std::vector{P, AGG, LEGACY});
  }
  SECTION("adapters by served name, byte-wise") {
    auto facts = agg("prod", "c", "llama");
    for (const std::string name : {"tenant-b", "Tenant-z", "tenant-a"}) add_adapter(facts, name, {1});
    const auto entry = only_entry({facts});
    std::vector<std::string> names;
    for (const auto& adapter : entry.adapters()) names.push_back(adapter.canonical_model_id());
    CHECK(names == std::vector<std::string>{"Tenant-z", "tenant-a", "tenant-b"});
  }
}

TEST_CASE("output bytes do not depend on the input order of endpoints", "[readiness]") {
  auto prefill = prefill_endpoint(std::set<std::uint64_t>{1});
  auto decode = decode_endpoint(std::set<std::uint64_t>{2});
  auto encoder = encode_endpoint(std::set<std::uint64_t>{});
  auto other = endpoint("prod", "agg", "generate", "mistral", {{7, worker(kAggregated)}}, std::set<std::uint64_t>{7});
  add_adapter(decode, "tenant-a", {2});
  add_adapter(prefill, "tenant-b", {1});
  prefill.pool_links["llama"] = pool(1);

  std::vector endpoints{prefill, decode, encoder, other};
  const std::string expected = serialized(project(endpoints));
  const auto by_key = [](const EndpointFacts& a, const EndpointFacts& b) { return a.endpoint < b.endpoint; };
  std::sort(endpoints.begin(), endpoints.end(), by_key);
  int permutations = 0;
  do {
    CHECK(serialized(project(endpoints)) == expected);
    ++permutations;
  } while (std::next_permutation(endpoints.begin(), endpoints.end(), by_key));
  CHECK(permutations == 24);
}
