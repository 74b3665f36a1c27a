#include <catch2/catch.hpp>

#include <algorithm>
#include <initializer_list>
#include <map>
#include <optional>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "core/membership.hpp"
#include "core/pool_load.hpp"
#include "core/wire_validation.hpp"

using namespace kvrelay;
using namespace kvrelay::membership;

namespace {

std::string hex(const identity::Digest& digest) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string out;
  for (const auto byte : digest.bytes) {
    out += kDigits[byte >> 4];
    out += kDigits[byte & 0xF];
  }
  return out;
}

const EndpointKey kGolden{"prod", "router", "generate"};
const EndpointKey kOther{"prod", "router", "other"};

// A typed worker of `model` with a valid block size: the baseline every test edits.
ingest_v1::WorkerSpec worker(std::uint64_t id, const std::string& model,
                             ingest_v1::WorkerType type = ingest_v1::WORKER_TYPE_AGGREGATED) {
  ingest_v1::WorkerSpec spec;
  spec.set_worker_id(id);
  auto* card = spec.mutable_card();
  card->set_display_name(model);
  card->set_source_path("meta/llama");
  card->set_kv_cache_block_size(512);
  card->set_worker_type(type);
  return spec;
}

void add_adapter(ingest_v1::WorkerSpec& spec, const std::string& served, const std::string& lora,
                 std::uint32_t max_gpu_lora_count = 4) {
  auto* adapter = spec.add_adapters();
  adapter->set_served_name(served);
  adapter->set_lora_name(lora);
  adapter->set_max_gpu_lora_count(max_gpu_lora_count);
}

void add_needs(ingest_v1::ModelCard& card, std::initializer_list<ingest_v1::WorkerType> all_of) {
  auto* conjunction = card.add_needs();
  for (const auto role : all_of) conjunction->add_all_of(role);
}

void set_kv_state_endpoint(ingest_v1::WorkerSpec& spec, const EndpointKey& key) {
  auto* ref = spec.mutable_card()->mutable_runtime_config()->mutable_kv_state_endpoint();
  ref->set_namespace_(key.ns);
  ref->set_component(key.component);
  ref->set_endpoint(key.endpoint);
}

WorkerCards cards(std::initializer_list<ingest_v1::WorkerSpec> specs) {
  WorkerCards out;
  for (const auto& spec : specs) out[spec.worker_id()] = spec;
  return out;
}

EndpointMembership project_one(const WorkerCards& workers, const EndpointKey& endpoint = kGolden) {
  auto view = project({{endpoint, workers}});
  REQUIRE(view.size() == 1);
  return view.begin()->second;
}

std::vector<ConflictScope> scopes(const EndpointMembership& membership) {
  std::vector<ConflictScope> out;
  for (const auto& conflict : membership.conflicts) out.push_back(conflict.scope);
  return out;
}

bool mentions(const EndpointMembership& membership, const std::string& text) {
  return std::ranges::any_of(membership.conflicts,
                             [&](const Conflict& c) { return c.message.find(text) != std::string::npos; });
}

Registration base(const std::string& model, std::vector<std::string> aliases = {}) {
  return {model, {model, std::nullopt}, std::move(aliases)};
}

Registration lora(const std::string& served, const std::string& base_model, const std::string& lora_name) {
  return {served, {base_model, lora_name}, {}};
}

wan_v1::ProducerIdentity producer_for(const IndexerDomain& domain) {
  wan_v1::ProducerIdentity producer;
  *producer.mutable_pool_id() = pool_id(domain, 0x04f110c98b1bfc48);
  producer.set_producer_incarnation(77);
  producer.set_layout_generation(3);
  auto* format = producer.mutable_ckf_format();
  format->set_format_version(1);
  format->set_seed(0x5DEECE66D1B54A33);
  format->set_bucket_count(524288);
  format->set_fingerprint_bits(16);
  format->set_slots_per_bucket(4);
  return producer;
}

}  // namespace

// ---- identity ----

TEST_CASE("the identity golden vector comes out of the projection", "[membership]") {
  auto spec = worker(1, "display", ingest_v1::WORKER_TYPE_UNSET);
  const auto membership = project_one(cards({spec}));
  REQUIRE(membership.domain.has_value());
  CHECK(hex(membership.domain->cache_semantics) == "7d31eb9019357572470605f4a8be687e");
  CHECK(hex(membership.domain->routing_scope) == "18270d3ba03effaec8d167ba02c7752d");
  CHECK(membership.domain->cache_semantics.source == identity::Source::kDefaultDerived);
  CHECK(membership.domain->routing_scope.source == identity::Source::kDefaultDerived);
  CHECK(membership.domain->kv_block_size == 512);
  CHECK(membership.domain->hash_format == hashing::HashFormat::kStandard);
  CHECK(membership.conflicts.empty());
  CHECK(membership.registrations == std::vector<Registration>{base("display")});
  CHECK(membership.roles == std::vector<Role>{Role::kLegacy});
  CHECK(membership.materializable());
}

TEST_CASE("an empty source_path falls back to the display name", "[membership]") {
  auto named_after_source = worker(1, "meta/llama");
  named_after_source.mutable_card()->clear_source_path();
  const auto membership = project_one(cards({named_after_source}));
  REQUIRE(membership.domain.has_value());
  CHECK(hex(membership.domain->cache_semantics) == "7d31eb9019357572470605f4a8be687e");
}

TEST_CASE("explicit identity material switches each dimension to EXPLICIT on its own", "[membership]") {
  const auto plain = project_one(cards({worker(1, "llama")}));
  REQUIRE(plain.domain.has_value());

  auto semantics = worker(1, "llama");
  (*semantics.mutable_card()->mutable_semantics_identity())["model"] = "llama-3-70b";
  const auto with_semantics = project_one(cards({semantics}));
  REQUIRE(with_semantics.domain.has_value());
  CHECK(with_semantics.domain->cache_semantics.source == identity::Source::kExplicit);
  CHECK(with_semantics.domain->cache_semantics.bytes != plain.domain->cache_semantics.bytes);
  CHECK(with_semantics.domain->routing_scope == plain.domain->routing_scope);

  auto scope = worker(1, "llama");
  (*scope.mutable_card()->mutable_routing_scope_identity())["cluster"] = "east";
  const auto with_scope = project_one(cards({scope}));
  REQUIRE(with_scope.domain.has_value());
  CHECK(with_scope.domain->routing_scope.source == identity::Source::kExplicit);
  CHECK(with_scope.domain->routing_scope.bytes != plain.domain->routing_scope.bytes);
  CHECK(with_scope.domain->cache_semantics == plain.domain->cache_semantics);
}

TEST_CASE("explicit routing scope lets two endpoints share an indexer domain", "[membership]") {
  auto a = worker(1, "llama");
  auto b = worker(2, "llama");
  (*a.mutable_card()->mutable_routing_scope_identity())["pool"] = "shared";
  (*b.mutable_card()->mutable_routing_scope_identity())["pool"] = "shared";
  const auto view = project({{kGolden, cards({a})}, {kOther, cards({b})}});
  REQUIRE(view.at(kGolden).domain.has_value());
  CHECK(view.at(kGolden).domain == view.at(kOther).domain);

  const auto defaults = project({{kGolden, cards({worker(1, "llama")})}, {kOther, cards({worker(2, "llama")})}});
  CHECK(defaults.at(kGolden).domain != defaults.at(kOther).domain);
}

TEST_CASE("Eagle selects hash format 2 and a different cache-semantics digest", "[membership]") {
  auto eagle = worker(1, "display");
  eagle.mutable_card()->mutable_runtime_config()->set_enable_eagle(true);
  const auto standard = project_one(cards({worker(1, "display")}));
  const auto membership = project_one(cards({eagle}));
  REQUIRE(membership.domain.has_value());
  CHECK(membership.domain->hash_format == hashing::HashFormat::kEagle);
  CHECK(hex(membership.domain->cache_semantics) != "7d31eb9019357572470605f4a8be687e");
  CHECK(membership.domain->routing_scope == standard.domain->routing_scope);
}

// ---- topology ----

TEST_CASE("legacy prefill cards are normalised before anything else", "[membership]") {
  SECTION("no worker_type and the Prefill bit: Prefill needing Decode") {
    auto spec = worker(1, "llama", ingest_v1::WORKER_TYPE_UNSET);
    spec.mutable_card()->set_model_type(kModelTypeLegacyPrefillBit | 1u);
    const auto membership = project_one(cards({spec}));
    const WorkerTopology expected{WorkerType::kPrefill, kModelTypeLegacyPrefillBit | 1u, {{WorkerType::kDecode}}};
    CHECK(membership.worker_topology.at(1) == expected);
    CHECK(membership.roles == std::vector<Role>{Role::kPrefill});
  }
  SECTION("declared needs are kept") {
    auto spec = worker(1, "llama", ingest_v1::WORKER_TYPE_UNSET);
    spec.mutable_card()->set_model_type(kModelTypeLegacyPrefillBit);
    add_needs(*spec.mutable_card(), {ingest_v1::WORKER_TYPE_AGGREGATED});
    const auto membership = project_one(cards({spec}));
    CHECK(membership.worker_topology.at(1).worker_type == WorkerType::kPrefill);
    CHECK(membership.worker_topology.at(1).needs == Needs{{WorkerType::kAggregated}});
  }
  SECTION("a typed card is never rewritten") {
    auto spec = worker(1, "llama", ingest_v1::WORKER_TYPE_DECODE);
    spec.mutable_card()->set_model_type(kModelTypeLegacyPrefillBit);
    const auto membership = project_one(cards({spec}));
    CHECK(membership.worker_topology.at(1).worker_type == WorkerType::kDecode);
    CHECK(membership.worker_topology.at(1).needs.empty());
  }
  SECTION("an untyped card without the bit stays legacy") {
    auto spec = worker(1, "llama", ingest_v1::WORKER_TYPE_UNSET);
    spec.mutable_card()->set_model_type(1u);
    const auto membership = project_one(cards({spec}));
    CHECK_FALSE(membership.worker_topology.at(1).worker_type.has_value());
    CHECK(membership.roles == std::vector<Role>{Role::kLegacy});
  }
}

TEST_CASE("a worker's spec keeps each of its needs once and none of the fields it does not know", "[membership]") {
  ingest_v1::PutWorkerRequest request;
  request.set_worker_id(7);
  *request.mutable_card() = worker(7, "llama", ingest_v1::WORKER_TYPE_PREFILL).card();
  for (int repeat = 0; repeat < 1000; ++repeat) {
    add_needs(*request.mutable_card(),
              {ingest_v1::WORKER_TYPE_DECODE, ingest_v1::WORKER_TYPE_DECODE, ingest_v1::WORKER_TYPE_ENCODE});
  }
  add_needs(*request.mutable_card(), {ingest_v1::WORKER_TYPE_ENCODE, ingest_v1::WORKER_TYPE_DECODE});
  add_needs(*request.mutable_card(), {ingest_v1::WORKER_TYPE_AGGREGATED});
  request.mutable_card()->GetReflection()->MutableUnknownFields(request.mutable_card())->AddVarint(999, 1);
  auto* source = request.add_kv_sources();
  source->mutable_push();
  source->GetReflection()->MutableUnknownFields(source)->AddVarint(999, 1);

  const ingest_v1::WorkerSpec spec = worker_spec(request);
  REQUIRE(spec.card().needs_size() == 2);
  CHECK(std::vector<int>(spec.card().needs(0).all_of().begin(), spec.card().needs(0).all_of().end()) ==
        std::vector<int>{ingest_v1::WORKER_TYPE_DECODE, ingest_v1::WORKER_TYPE_ENCODE});
  CHECK(std::vector<int>(spec.card().needs(1).all_of().begin(), spec.card().needs(1).all_of().end()) ==
        std::vector<int>{ingest_v1::WORKER_TYPE_AGGREGATED});
  CHECK(spec.card().GetReflection()->GetUnknownFields(spec.card()).empty());
  REQUIRE(spec.kv_sources_size() == 1);
  CHECK(spec.kv_sources(0).GetReflection()->GetUnknownFields(spec.kv_sources(0)).empty());
  // What the projection reads of them is what the request said.
  const auto membership = project_one(cards({spec}));
  CHECK(membership.worker_topology.at(7).needs ==
        Needs{{WorkerType::kDecode, WorkerType::kEncode}, {WorkerType::kAggregated}});
}

TEST_CASE("worker topology, runtime configs and roles come from valid base cards", "[membership]") {
  auto prefill = worker(3, "llama", ingest_v1::WORKER_TYPE_PREFILL);
  add_needs(*prefill.mutable_card(), {ingest_v1::WORKER_TYPE_PREFILL, ingest_v1::WORKER_TYPE_DECODE});
  add_needs(*prefill.mutable_card(), {ingest_v1::WORKER_TYPE_AGGREGATED});
  prefill.mutable_card()->set_model_type(2);
  auto* runtime = prefill.mutable_card()->mutable_runtime_config();
  runtime->set_total_kv_blocks(1000);
  runtime->set_data_parallel_start_rank(4);
  runtime->set_data_parallel_size(2);
  const auto membership = project_one(cards(
      {worker(1, "llama", ingest_v1::WORKER_TYPE_DECODE), prefill, worker(2, "llama", ingest_v1::WORKER_TYPE_UNSET),
       worker(4, "llama", ingest_v1::WORKER_TYPE_DECODE), worker(5, "llama", ingest_v1::WORKER_TYPE_ENCODE)}));
  CHECK(membership.roles == std::vector<Role>{Role::kPrefill, Role::kDecode, Role::kEncode, Role::kLegacy});
  const WorkerTopology expected{
      WorkerType::kPrefill, 2, {{WorkerType::kPrefill, WorkerType::kDecode}, {WorkerType::kAggregated}}};
  CHECK(membership.worker_topology.at(3) == expected);
  CHECK(membership.worker_topology.size() == 5);
  CHECK(membership.runtime_configs.at(3) == RuntimeConfig{1000, 4, 2, false, std::nullopt, std::nullopt});
  CHECK(membership.runtime_configs.at(1) == RuntimeConfig{std::nullopt, 0, 1, false, std::nullopt, std::nullopt});
  CHECK(membership.registrations == std::vector<Registration>{base("llama")});
}

TEST_CASE("an endpoint without workers has no membership", "[membership]") {
  const auto view = project({{kGolden, {}}, {kOther, cards({worker(1, "llama")})}});
  CHECK_FALSE(view.contains(kGolden));
  CHECK(view.contains(kOther));
}

// ---- conflicts ----

TEST_CASE("block size 0 is a PoolMaterialization conflict that keeps the topology", "[membership]") {
  auto spec = worker(1, "llama");
  spec.mutable_card()->set_kv_cache_block_size(0);
  const auto membership = project_one(cards({spec, worker(2, "llama")}));
  CHECK(scopes(membership) == std::vector{ConflictScope::kPoolMaterialization});
  CHECK(mentions(membership, "worker 1: invalid KV query semantics"));
  CHECK_FALSE(membership.domain.has_value());  // not every base card resolved one
  CHECK(membership.worker_topology.contains(1));
  CHECK(membership.registrations == std::vector<Registration>{base("llama")});
  CHECK_FALSE(membership.materializable());
}

TEST_CASE("invalid identity material is a PoolMaterialization conflict", "[membership]") {
  auto spec = worker(1, "llama");
  (*spec.mutable_card()->mutable_semantics_identity())["model"] = "";
  const auto membership = project_one(cards({spec}));
  CHECK(scopes(membership) == std::vector{ConflictScope::kPoolMaterialization});
  CHECK_FALSE(membership.domain.has_value());
  CHECK(membership.worker_topology.contains(1));
}

TEST_CASE("two indexer domains on one endpoint are a PoolMaterialization conflict", "[membership]") {
  auto other_source = worker(2, "llama");
  other_source.mutable_card()->set_source_path("meta/llama-2");
  const auto membership = project_one(cards({worker(1, "llama"), other_source}));
  CHECK(membership.conflicts ==
        std::vector<Conflict>{{ConflictScope::kPoolMaterialization, "endpoint resolves to multiple indexer domains"}});
  CHECK_FALSE(membership.domain.has_value());
  CHECK(membership.registrations == std::vector<Registration>{base("llama")});
  CHECK_FALSE(membership.materializable());

  SECTION("a different block size or hash format is another domain too") {
    auto eagle = worker(2, "llama");
    eagle.mutable_card()->mutable_runtime_config()->set_enable_eagle(true);
    CHECK(project_one(cards({worker(1, "llama"), eagle})).has_conflict(ConflictScope::kPoolMaterialization));
    auto block = worker(2, "llama");
    block.mutable_card()->set_kv_cache_block_size(16);
    CHECK(project_one(cards({worker(1, "llama"), block})).has_conflict(ConflictScope::kPoolMaterialization));
  }
}

TEST_CASE("two base models on one endpoint are a ServingTopology conflict", "[membership]") {
  const auto membership = project_one(cards({worker(1, "llama"), worker(2, "mistral")}));
  CHECK(membership.conflicts == std::vector<Conflict>{{ConflictScope::kServingTopology,
                                                       "endpoint resolves to multiple canonical base models"}});
  CHECK(membership.registrations == std::vector<Registration>{base("llama"), base("mistral")});
  CHECK(membership.domain.has_value());  // same source path: one domain
  CHECK_FALSE(membership.materializable());
}

TEST_CASE("an invalid model id makes the card malformed: out of topology with a ServingBinding conflict",
          "[membership]") {
  for (const std::string bad : {"", " llama", "llama\t", "\xE3\x80\x80llama", "\xFF"}) {
    INFO(bad);
    const auto membership = project_one(cards({worker(1, bad), worker(2, "llama")}));
    CHECK(membership.conflicts ==
          std::vector<Conflict>{{ConflictScope::kServingBinding,
                                 "worker 1: malformed card: card.display_name: must be non-empty text without "
                                 "surrounding whitespace"}});
    CHECK_FALSE(membership.worker_topology.contains(1));
    CHECK_FALSE(membership.runtime_configs.contains(1));
    CHECK(membership.registrations == std::vector<Registration>{base("llama")});
    CHECK(membership.materializable());  // ServingBinding never blocks the pool
  }
}

TEST_CASE("cards ingest validation would refuse are left out with a ServingBinding conflict", "[membership]") {
  auto unset_need = worker(1, "llama", ingest_v1::WORKER_TYPE_PREFILL);
  add_needs(*unset_need.mutable_card(), {ingest_v1::WORKER_TYPE_DECODE, ingest_v1::WORKER_TYPE_UNSET});
  auto unknown_type = worker(2, "llama");
  unknown_type.mutable_card()->set_worker_type(static_cast<ingest_v1::WorkerType>(9));
  auto too_many_ranks = worker(3, "llama");
  too_many_ranks.mutable_card()->mutable_runtime_config()->set_data_parallel_size(4097);
  auto half_endpoint = worker(4, "llama");
  set_kv_state_endpoint(half_endpoint, {"prod", "", "kv"});
  const auto membership =
      project_one(cards({unset_need, unknown_type, too_many_ranks, half_endpoint, worker(5, "llama")}));
  CHECK(scopes(membership) == std::vector<ConflictScope>(4, ConflictScope::kServingBinding));
  CHECK(mentions(membership, "worker 1: malformed card: card.needs[0].all_of[1]"));
  CHECK(mentions(membership, "worker 2: malformed card: card.worker_type"));
  CHECK(mentions(membership, "worker 3: malformed card: card.runtime_config.data_parallel_size"));
  CHECK(mentions(membership, "worker 4: malformed card: card.runtime_config.kv_state_endpoint.component"));
  CHECK(membership.worker_topology.size() == 1);
  CHECK(membership.worker_topology.contains(5));
  CHECK(membership.runtime_configs.size() == 1);
  CHECK(membership.materializable());
}

// ---- aliases ----

TEST_CASE("aliases are validated, deduplicated, sorted and merged per binding", "[membership]") {
  auto first = worker(1, "llama");
  for (const auto* alias : {"zeta", "llama", " padded", "", "alpha", "zeta"}) first.mutable_card()->add_aliases(alias);
  auto second = worker(2, "llama");
  second.mutable_card()->add_aliases("mid");
  const auto membership = project_one(cards({first, second}));
  CHECK(membership.registrations == std::vector<Registration>{base("llama", {"alpha", "mid", "zeta"})});
  CHECK(membership.conflicts.empty());  // dropped aliases are soft errors
}

// ---- adapters ----

TEST_CASE("adapters register LoRA targets keyed by served name", "[membership]") {
  auto a = worker(1, "llama");
  add_adapter(a, "llama-sql", "sql-lora", 4);
  add_adapter(a, "llama-chat", "chat-lora", 2);
  auto b = worker(2, "llama");
  add_adapter(b, "llama-sql", "sql-lora", 8);
  const auto membership = project_one(cards({a, b}));
  CHECK(membership.conflicts.empty());
  CHECK(membership.registrations == std::vector<Registration>{base("llama"), lora("llama-chat", "llama", "chat-lora"),
                                                              lora("llama-sql", "llama", "sql-lora")});
  REQUIRE(membership.adapters.size() == 2);
  CHECK(membership.adapters.at("llama-sql") == AdapterMembership{"llama", "sql-lora", {{1, 4}, {2, 8}}});
  CHECK(membership.adapters.at("llama-chat") == AdapterMembership{"llama", "chat-lora", {{1, 2}}});
  CHECK(membership.materializable());
}

TEST_CASE("invalid adapter names are ServingBinding conflicts", "[membership]") {
  auto spec = worker(1, "llama");
  add_adapter(spec, " sql", "sql-lora");
  add_adapter(spec, "chat", "");
  add_adapter(spec, "ok", "ok-lora");
  const auto membership = project_one(cards({spec}));
  CHECK(scopes(membership) == std::vector{ConflictScope::kServingBinding, ConflictScope::kServingBinding});
  CHECK(mentions(membership, "invalid adapter request-facing model identity ' sql'"));
  CHECK(mentions(membership, "adapter 'chat': invalid runtime LoRA identity ''"));
  CHECK(membership.adapters.size() == 1);
  CHECK(membership.adapters.contains("ok"));
  CHECK(membership.materializable());
}

TEST_CASE("adapters of a worker whose base card is invalid are ServingBinding conflicts", "[membership]") {
  auto spec = worker(1, "");
  add_adapter(spec, "sql", "sql-lora");
  const auto membership = project_one(cards({spec}));
  CHECK(mentions(membership, "worker 1: malformed card: card.display_name"));
  CHECK(membership.adapters.empty());
  CHECK(membership.registrations.empty());
  CHECK_FALSE(membership.materializable());  // no registration at all
}

TEST_CASE("one served name with two targets on an endpoint is removed", "[membership]") {
  auto a = worker(1, "llama");
  add_adapter(a, "sql", "sql-lora-v1");
  auto b = worker(2, "llama");
  add_adapter(b, "sql", "sql-lora-v2");
  const auto membership = project_one(cards({a, b}));
  CHECK(membership.conflicts ==
        std::vector<Conflict>{
            {ConflictScope::kServingBinding,
             "adapter 'sql': request-facing model resolves to conflicting runtime targets"},
            {ConflictScope::kServingBinding, "request-facing model name 'sql' resolves to conflicting targets"}});
  CHECK(membership.adapters.empty());
  CHECK(membership.registrations == std::vector<Registration>{base("llama")});
  CHECK(membership.materializable());
}

TEST_CASE("differing adapter capacity of one worker drops that worker from the adapter", "[membership]") {
  auto a = worker(1, "llama");
  add_adapter(a, "sql", "sql-lora", 4);
  add_adapter(a, "sql", "sql-lora", 8);
  add_adapter(a, "chat", "chat-lora", 2);
  add_adapter(a, "chat", "chat-lora", 2);  // an exact repeat is harmless
  auto b = worker(2, "llama");
  add_adapter(b, "sql", "sql-lora", 4);
  const auto membership = project_one(cards({a, b}));
  CHECK(membership.conflicts == std::vector<Conflict>{{ConflictScope::kPoolMaterialization,
                                                       "worker 1: adapter 'sql': conflicting adapter capacity"}});
  CHECK(membership.adapters.at("sql").workers == std::map<std::uint64_t, std::uint32_t>{{2, 4}});
  CHECK(membership.adapters.at("chat").workers == std::map<std::uint64_t, std::uint32_t>{{1, 2}});
  CHECK(membership.registrations.size() == 3);  // the registration stays; only the pool is blocked
  CHECK_FALSE(membership.materializable());
}

// ---- cross-endpoint names ----

TEST_CASE("the same binding on two endpoints is not a collision", "[membership]") {
  auto a = worker(1, "llama");
  a.mutable_card()->add_aliases("llm");
  add_adapter(a, "sql", "sql-lora");
  auto b = worker(2, "llama");
  b.mutable_card()->add_aliases("llm");
  add_adapter(b, "sql", "sql-lora");
  const auto view = project({{kGolden, cards({a})}, {kOther, cards({b})}});
  REQUIRE(view.size() == 2);
  for (const auto& [endpoint, membership] : view) {
    CHECK(membership.conflicts.empty());
    CHECK(membership.registrations.size() == 2);
    CHECK(membership.registrations.front() == base("llama", {"llm"}));
  }
}

TEST_CASE("a model id claimed elsewhere as an alias is removed everywhere", "[membership]") {
  auto a = worker(1, "llama");
  a.mutable_card()->add_aliases("mistral");
  a.mutable_card()->add_aliases("llm");
  const auto view = project({{kGolden, cards({a})}, {kOther, cards({worker(2, "mistral")})}});
  const auto& owner = view.at(kGolden);
  CHECK(owner.conflicts.empty());  // the alias is dropped silently
  CHECK(owner.registrations == std::vector<Registration>{base("llama", {"llm"})});
  const auto& claimant = view.at(kOther);
  CHECK(claimant.conflicts == std::vector<Conflict>{{ConflictScope::kServingBinding,
                                                     "request-facing model name 'mistral' resolves to conflicting "
                                                     "targets"}});
  CHECK(claimant.registrations.empty());
  CHECK(claimant.worker_topology.contains(2));  // still a topology member
  CHECK_FALSE(claimant.materializable());
}

TEST_CASE("an alias claimed by two models is dropped from both without a conflict", "[membership]") {
  auto a = worker(1, "llama");
  a.mutable_card()->add_aliases("chat");
  auto b = worker(2, "mistral");
  b.mutable_card()->add_aliases("chat");
  const auto view = project({{kGolden, cards({a})}, {kOther, cards({b})}});
  CHECK(view.at(kGolden).registrations == std::vector<Registration>{base("llama")});
  CHECK(view.at(kOther).registrations == std::vector<Registration>{base("mistral")});
  CHECK(view.at(kGolden).conflicts.empty());
  CHECK(view.at(kOther).conflicts.empty());
}

TEST_CASE("an adapter name bound to different targets on two endpoints is removed from both", "[membership]") {
  auto a = worker(1, "llama");
  add_adapter(a, "sql", "sql-lora");
  auto b = worker(2, "mistral");
  add_adapter(b, "sql", "sql-lora");  // same LoRA name, other base: another target
  add_adapter(b, "summary", "summary-lora");
  const auto view = project({{kGolden, cards({a})}, {kOther, cards({b})}});
  REQUIRE(view.size() == 2);
  for (const auto& [endpoint, membership] : view) {
    INFO(endpoint.display());
    CHECK(membership.conflicts == std::vector<Conflict>{{ConflictScope::kServingBinding,
                                                         "request-facing model name 'sql' resolves to conflicting "
                                                         "targets"}});
    CHECK_FALSE(membership.adapters.contains("sql"));
  }
  CHECK(view.at(kGolden).registrations == std::vector<Registration>{base("llama")});
  CHECK(view.at(kOther).registrations ==
        std::vector<Registration>{base("mistral"), lora("summary", "mistral", "summary-lora")});
  CHECK(view.at(kOther).adapters.contains("summary"));
}

TEST_CASE("an adapter served under its base model's name collides with the base", "[membership]") {
  auto a = worker(1, "llama");
  add_adapter(a, "llama", "llama-lora");
  const auto membership = project_one(cards({a}));
  CHECK(membership.registrations.empty());
  CHECK(membership.adapters.empty());
  CHECK(membership.conflicts == std::vector<Conflict>{{ConflictScope::kServingBinding,
                                                       "request-facing model name 'llama' resolves to conflicting "
                                                       "targets"}});
}

// ---- KV-state endpoint ----

TEST_CASE("kv_state_endpoint is the single effective value of all workers", "[membership]") {
  const EndpointKey kv{"prod", "kv", "events"};
  SECTION("unset everywhere: the serving endpoint") {
    CHECK(project_one(cards({worker(1, "llama"), worker(2, "llama")})).kv_state_endpoint() == kGolden);
  }
  SECTION("explicitly the serving endpoint agrees with unset") {
    auto a = worker(1, "llama");
    set_kv_state_endpoint(a, kGolden);
    CHECK(project_one(cards({a, worker(2, "llama")})).kv_state_endpoint() == kGolden);
  }
  SECTION("all workers name the same other endpoint") {
    auto a = worker(1, "llama");
    auto b = worker(2, "llama");
    set_kv_state_endpoint(a, kv);
    set_kv_state_endpoint(b, kv);
    CHECK(project_one(cards({a, b})).kv_state_endpoint() == kv);
  }
  SECTION("disagreement is ambiguous, and the pool stays structurally materialisable") {
    auto a = worker(1, "llama");
    set_kv_state_endpoint(a, kv);
    const auto membership = project_one(cards({a, worker(2, "llama")}));
    CHECK_FALSE(membership.kv_state_endpoint().has_value());
    CHECK(membership.materializable());
  }
  SECTION("no worker: nothing to bind") { CHECK_FALSE(EndpointMembership{}.kv_state_endpoint().has_value()); }
}

// ---- materializable ----

TEST_CASE("materializable() truth table", "[membership]") {
  const auto valid = project_one(cards({worker(1, "llama")}));
  REQUIRE(valid.materializable());
  struct Row {
    bool domain;
    bool registrations;
    std::optional<ConflictScope> conflict;
    bool expected;
  };
  const Row rows[] = {
      {true, true, std::nullopt, true},
      {true, true, ConflictScope::kServingBinding, true},
      {true, true, ConflictScope::kPoolMaterialization, false},
      {true, true, ConflictScope::kServingTopology, false},
      {false, true, std::nullopt, false},
      {true, false, std::nullopt, false},
      {false, false, std::nullopt, false},
      {false, true, ConflictScope::kServingBinding, false},
  };
  for (const auto& row : rows) {
    auto membership = valid;
    if (!row.domain) membership.domain.reset();
    if (!row.registrations) membership.registrations.clear();
    if (row.conflict) membership.conflicts.push_back({*row.conflict, "test"});
    INFO("domain " << row.domain << " registrations " << row.registrations << " conflict "
                   << (row.conflict ? static_cast<int>(*row.conflict) : -1));
    CHECK(membership.materializable() == row.expected);
    if (row.conflict) CHECK(membership.has_conflict(*row.conflict));
  }
}

// ---- ranks ----

TEST_CASE("runtime configs are normalised and expand to the declared ranks", "[membership]") {
  ingest_v1::RuntimeConfig config;
  config.set_total_kv_blocks(0);
  const auto normalised = to_runtime_config(config);
  CHECK(normalised == RuntimeConfig{std::nullopt, 0, 1, false, std::nullopt, std::nullopt});
  // max_num_seqs keeps the difference between undeclared and a declared 0 (serving-load deployment).
  config.set_max_num_seqs(0);
  CHECK(to_runtime_config(config).max_num_seqs == std::optional<std::uint64_t>(0));
  config.set_max_num_seqs(8);
  CHECK(to_runtime_config(config).max_num_seqs == std::optional<std::uint64_t>(8));

  std::map<std::uint64_t, RuntimeConfig> configs;
  configs[7] = {std::nullopt, 2, 3, false, std::nullopt, std::nullopt};
  configs[3] = {std::nullopt, 0, 1, false, std::nullopt, std::nullopt};
  configs[9] = {std::nullopt, 0xFFFFFFFF, 1, false, std::nullopt, std::nullopt};
  // The rank expansion the relay uses (load windows): core/pool_load.
  auto ranks = [](const std::map<std::uint64_t, RuntimeConfig>& c) {
    const auto declared = kvrelay::declared_ranks(c);
    REQUIRE(declared.has_value());
    std::vector<RankKey> keys;
    for (const auto& [rank, capacity] : *declared) keys.push_back(rank);
    return keys;
  };
  CHECK(ranks(configs) == std::vector<RankKey>{{3, 0}, {7, 2}, {7, 3}, {7, 4}, {9, 0xFFFFFFFF}});
  CHECK(ranks(project_one(cards({worker(1, "llama")})).runtime_configs) == std::vector<RankKey>{{1, 0}});
}

// ---- catalog builders ----

TEST_CASE("pool_id carries the domain digests, their sources and the dc id", "[membership]") {
  auto spec = worker(1, "display");
  (*spec.mutable_card()->mutable_routing_scope_identity())["cluster"] = "east";
  const auto membership = project_one(cards({spec}));
  REQUIRE(membership.domain.has_value());
  const auto id = pool_id(*membership.domain, 0x04f110c98b1bfc48);
  CHECK(id.identity_version() == 1);
  CHECK(id.dc_id() == 0x04f110c98b1bfc48);
  const auto& cache = id.indexer_domain().cache_semantics();
  CHECK(cache.digest() ==
        std::string(membership.domain->cache_semantics.bytes.begin(), membership.domain->cache_semantics.bytes.end()));
  CHECK(cache.source() == wan_v1::IDENTITY_SOURCE_DEFAULT_DERIVED);
  CHECK(id.indexer_domain().routing_scope().source() == wan_v1::IDENTITY_SOURCE_EXPLICIT);
  CHECK(id.indexer_domain().routing_scope().digest().size() == 16);
  CHECK_FALSE(wire::check_pool_id(id, "pool_id").has_value());
}

TEST_CASE("the descriptor publishes the membership's registrations, roles and semantics", "[membership]") {
  auto a = worker(1, "llama", ingest_v1::WORKER_TYPE_DECODE);
  a.mutable_card()->add_aliases("llm");
  a.mutable_card()->add_aliases("chat");
  a.mutable_card()->mutable_runtime_config()->set_enable_eagle(true);
  add_adapter(a, "llama-sql", "sql-lora");
  auto b = worker(2, "llama", ingest_v1::WORKER_TYPE_PREFILL);
  b.mutable_card()->mutable_runtime_config()->set_enable_eagle(true);
  const auto membership = project_one(cards({a, b}));
  REQUIRE(membership.materializable());
  const auto producer = producer_for(*membership.domain);
  const auto built = descriptor(membership, producer);
  REQUIRE(built.has_value());

  CHECK(built->producer().SerializeAsString() == producer.SerializeAsString());
  CHECK(built->serving_endpoint().namespace_() == "prod");
  CHECK(built->serving_endpoint().component() == "router");
  CHECK(built->serving_endpoint().endpoint() == "generate");
  CHECK(built->query_semantics().kv_block_size() == 512);
  CHECK(built->query_semantics().hash_format() == wan_v1::KV_QUERY_HASH_FORMAT_DYNAMO_EAGLE_V1);
  CHECK(std::vector<int>(built->pool_roles().begin(), built->pool_roles().end()) ==
        std::vector<int>{wan_v1::WORKER_ROLE_PREFILL, wan_v1::WORKER_ROLE_DECODE});
  REQUIRE(built->registrations_size() == 2);
  const auto& base_registration = built->registrations(0);
  CHECK(base_registration.canonical_model_id() == "llama");
  CHECK(base_registration.target().base().base_model() == "llama");
  CHECK(std::vector<std::string>(base_registration.aliases().begin(), base_registration.aliases().end()) ==
        std::vector<std::string>{"chat", "llm"});
  const auto& lora_registration = built->registrations(1);
  CHECK(lora_registration.canonical_model_id() == "llama-sql");
  CHECK(lora_registration.target().lora().base_model() == "llama");
  CHECK(lora_registration.target().lora().adapter() == "sql-lora");
  CHECK(lora_registration.aliases().empty());
  CHECK_FALSE(wire::check_pool_descriptor(*built).has_value());
}

TEST_CASE("the descriptor re-normalises aliases and is absent for unmaterialisable endpoints", "[membership]") {
  auto membership = project_one(cards({worker(1, "llama")}));
  membership.registrations.front().aliases = {"llm", "llama", "a", "llm"};
  const auto built = descriptor(membership, producer_for(*membership.domain));
  REQUIRE(built.has_value());
  const auto& aliases = built->registrations(0).aliases();
  CHECK(std::vector<std::string>(aliases.begin(), aliases.end()) == std::vector<std::string>{"a", "llm"});

  membership.conflicts.push_back({ConflictScope::kPoolMaterialization, "test"});
  CHECK_FALSE(descriptor(membership, producer_for(*membership.domain)).has_value());
}

// ---- determinism ----

TEST_CASE("the projection does not depend on the order of its inputs", "[membership]") {
  auto build = [](bool reversed) {
    auto a = worker(1, "llama", ingest_v1::WORKER_TYPE_DECODE);
    std::vector<std::string> aliases{"zeta", "alpha", "mid", "alpha"};
    if (reversed) std::ranges::reverse(aliases);
    for (const auto& alias : aliases) a.mutable_card()->add_aliases(alias);
    std::vector<std::pair<std::string, std::string>> material{{"b", "2"}, {"a", "1"}, {"c", "3"}};
    if (reversed) std::ranges::reverse(material);
    for (const auto& [key, value] : material) (*a.mutable_card()->mutable_semantics_identity())[key] = value;
    std::vector<std::tuple<std::string, std::string, std::uint32_t>> adapters{
        {"sql", "sql-lora", 4}, {"chat", "chat-lora", 2}, {"sql", "sql-lora", 8}, {"bad", " lora", 1}};
    if (reversed) std::ranges::reverse(adapters);
    for (const auto& [served, lora_name, count] : adapters) add_adapter(a, served, lora_name, count);
    auto b = worker(2, "mistral", ingest_v1::WORKER_TYPE_PREFILL);
    b.mutable_card()->add_aliases("zeta");
    auto c = worker(3, "mistral");
    c.mutable_card()->set_kv_cache_block_size(0);

    EndpointCards endpoints;
    const std::vector<std::pair<EndpointKey, ingest_v1::WorkerSpec>> order{
        {kGolden, a}, {kOther, b}, {kOther, c}, {EndpointKey{"dev", "x", "y"}, worker(4, "phi")}};
    auto insert = [&](const auto& entry) { endpoints[entry.first][entry.second.worker_id()] = entry.second; };
    if (reversed) {
      std::for_each(order.rbegin(), order.rend(), insert);
    } else {
      std::ranges::for_each(order, insert);
    }
    return project(endpoints);
  };
  const auto forward = build(false);
  const auto backward = build(true);
  CHECK(forward == backward);
  CHECK(forward == build(false));
  // The fixture really exercises conflicts and collisions, so equality is not vacuous.
  CHECK(forward.at(kGolden).conflicts.size() == 2);
  CHECK(forward.at(kOther).conflicts.size() == 1);
  CHECK(forward.at(kGolden).registrations == std::vector<Registration>{lora("chat", "llama", "chat-lora"),
                                                                       base("llama", {"alpha", "mid"}),
                                                                       lora("sql", "llama", "sql-lora")});
}
