#include "core/membership.hpp"

#include <algorithm>
#include <expected>
#include <set>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "core/ingest_validation.hpp"
#include "core/unicode_text.hpp"

namespace kvrelay::membership {
namespace {

// ---- single cards ----

std::optional<WorkerType> worker_type_of(ingest_v1::WorkerType type) {
  if (type == ingest_v1::WORKER_TYPE_UNSET) return std::nullopt;
  return static_cast<WorkerType>(type);  // same numbers; ingest validation rejected the rest
}

// A pre-worker_type prefill card (no worker_type, legacy Prefill model_type bit) states its
// topology implicitly; rewrite it to the explicit form so it never triggers the legacy fallback.
WorkerTopology normalized_topology(const ingest_v1::ModelCard& card) {
  WorkerTopology topology{worker_type_of(card.worker_type()), card.model_type(), {}};
  for (const auto& conjunction : card.needs()) {
    auto& all_of = topology.needs.emplace_back();
    for (const int role : conjunction.all_of()) all_of.push_back(static_cast<WorkerType>(role));
  }
  if (!topology.worker_type && (topology.model_type & kModelTypeLegacyPrefillBit) != 0) {
    topology.worker_type = WorkerType::kPrefill;
    if (topology.needs.empty()) topology.needs = {{WorkerType::kDecode}};
  }
  return topology;
}

// Protobuf map iteration order is unspecified; identity code sorts, but keep ours stable too.
identity::Material material_of(const google::protobuf::Map<std::string, std::string>& entries) {
  identity::Material material;
  for (const auto& [key, value] : entries) material.emplace_back(key, value);
  std::ranges::sort(material);
  return material;
}

hashing::HashFormat hash_format_of(const ingest_v1::RuntimeConfig& config) {
  return config.enable_eagle() ? hashing::HashFormat::kEagle : hashing::HashFormat::kStandard;
}

// docs/protocol/pools.md#cache-semantics-digest, docs/protocol/pools.md#routing-scope-digest:
// default cache-semantics input is source_path (display_name when empty); default
// routing-scope input is the serving endpoint. The error text becomes a conflict message.
std::expected<IndexerDomain, std::string> resolve_domain(const ingest_v1::ModelCard& card,
                                                         const EndpointKey& endpoint) {
  if (card.kv_cache_block_size() == 0) return std::unexpected("kv_cache_block_size is 0");
  const auto format = hash_format_of(card.runtime_config());
  const std::string& source_path = card.source_path().empty() ? card.display_name() : card.source_path();
  auto cache_semantics = identity::cache_semantics(source_path, material_of(card.semantics_identity()),
                                                   card.kv_cache_block_size(), format);
  if (!cache_semantics) {
    return std::unexpected(fmt::format("semantics identity: {}", identity::to_string(cache_semantics.error())));
  }
  auto routing_scope = identity::routing_scope(endpoint.ns, endpoint.component, endpoint.endpoint,
                                               material_of(card.routing_scope_identity()));
  if (!routing_scope) {
    return std::unexpected(fmt::format("routing scope identity: {}", identity::to_string(routing_scope.error())));
  }
  return IndexerDomain{*cache_semantics, *routing_scope, card.kv_cache_block_size(), format};
}

// Aliases are soft input: invalid ones and the model's own name are dropped without a conflict.
std::vector<std::string> valid_aliases(const google::protobuf::RepeatedPtrField<std::string>& aliases,
                                       const std::string& model) {
  std::set<std::string> kept;
  for (const auto& alias : aliases) {
    if (text::is_valid_text(alias) && alias != model) kept.insert(alias);
  }
  return {kept.begin(), kept.end()};
}

Conflict conflict(ConflictScope scope, std::string message) { return {scope, std::move(message)}; }

// ---- one endpoint, before the global name check ----

// A request-facing name claimed for one binding (model, target), with the aliases of that claim.
struct Claim {
  std::string model;
  ModelTarget target;
  std::vector<std::string> aliases;
};

struct BaseCard {
  std::uint64_t worker_id = 0;
  const ingest_v1::WorkerSpec* spec = nullptr;
  std::optional<IndexerDomain> domain;  // nullopt = resolution failed
  std::string model;                    // the card's display_name (ingest validation checked it)
};

struct EndpointDraft {
  EndpointMembership membership;
  std::vector<Claim> claims;
};

std::vector<BaseCard> project_base_cards(const EndpointKey& endpoint, const WorkerCards& workers,
                                         std::vector<Conflict>& conflicts) {
  std::vector<BaseCard> cards;
  for (const auto& [worker_id, spec] : workers) {
    // The relay checks every card before membership holds it; the projection checks again so
    // that it stands on its own, as its unit tests call it.
    if (auto problem = ingest_check::worker_spec(spec, "")) {
      conflicts.push_back(
          conflict(ConflictScope::kServingBinding, fmt::format("worker {}: malformed card: {}", worker_id, *problem)));
      continue;
    }
    BaseCard card{worker_id, &spec, std::nullopt, spec.card().display_name()};
    if (auto domain = resolve_domain(spec.card(), endpoint)) {
      card.domain = *domain;
    } else {
      conflicts.push_back(
          conflict(ConflictScope::kPoolMaterialization,
                   fmt::format("worker {}: invalid KV query semantics: {}", worker_id, domain.error())));
    }
    cards.push_back(card);
  }
  return cards;
}

// Domains (docs/protocol/pools.md#membership-projection): the endpoint's domain exists only when
// every base card resolved one and they agree.
std::optional<IndexerDomain> endpoint_domain(const std::vector<BaseCard>& cards, std::vector<Conflict>& conflicts) {
  std::vector<IndexerDomain> distinct;
  bool all_resolved = true;
  for (const auto& card : cards) {
    if (!card.domain) {
      all_resolved = false;
    } else if (std::ranges::find(distinct, *card.domain) == distinct.end()) {
      distinct.push_back(*card.domain);
    }
  }
  if (distinct.size() > 1) {
    conflicts.push_back(conflict(ConflictScope::kPoolMaterialization, "endpoint resolves to multiple indexer domains"));
  }
  if (!all_resolved || distinct.size() != 1) return std::nullopt;
  return distinct.front();
}

// Workers (docs/protocol/pools.md#membership-projection): workers with a valid base card join the
// topology and claim the base binding.
void add_base_workers(const std::vector<BaseCard>& cards, EndpointDraft& draft) {
  auto& membership = draft.membership;
  std::set<std::string> models;
  for (const auto& card : cards) {
    models.insert(card.model);
    const auto& model_card = card.spec->card();
    membership.worker_topology[card.worker_id] = normalized_topology(model_card);
    membership.runtime_configs[card.worker_id] = to_runtime_config(model_card.runtime_config());
    draft.claims.push_back(
        {card.model, ModelTarget{card.model, std::nullopt}, valid_aliases(model_card.aliases(), card.model)});
  }
  if (models.size() > 1) {
    membership.conflicts.push_back(
        conflict(ConflictScope::kServingTopology, "endpoint resolves to multiple canonical base models"));
  }
}

// What the adapter cards of an endpoint say about one served name.
struct AdapterClaims {
  std::set<ModelTarget> targets;
  std::map<std::uint64_t, std::set<std::uint32_t>> capacities;  // worker -> max_gpu_lora_count values
};

// Adapters (docs/protocol/pools.md#membership-projection). A served name bound to two targets gets
// no adapter entry here; its claims stay, so the global name check also removes it from every
// endpoint (as upstream does).
void add_adapters(const std::vector<BaseCard>& cards, EndpointDraft& draft) {
  auto& conflicts = draft.membership.conflicts;
  std::map<std::string, AdapterClaims> by_served_name;
  for (const auto& card : cards) {
    for (const auto& adapter : card.spec->adapters()) {
      const auto& served = adapter.served_name();
      if (!text::is_valid_text(served)) {
        conflicts.push_back(conflict(
            ConflictScope::kServingBinding,
            fmt::format("worker {}: invalid adapter request-facing model identity '{}'", card.worker_id, served)));
        continue;
      }
      if (!text::is_valid_text(adapter.lora_name())) {
        conflicts.push_back(conflict(ConflictScope::kServingBinding,
                                     fmt::format("worker {}: adapter '{}': invalid runtime LoRA identity '{}'",
                                                 card.worker_id, served, adapter.lora_name())));
        continue;
      }
      ModelTarget target{card.model, adapter.lora_name()};
      draft.claims.push_back({served, target, {}});
      auto& claims = by_served_name[served];
      claims.targets.insert(std::move(target));
      claims.capacities[card.worker_id].insert(adapter.max_gpu_lora_count());
    }
  }
  for (const auto& [served, claims] : by_served_name) {
    if (claims.targets.size() > 1) {
      conflicts.push_back(
          conflict(ConflictScope::kServingBinding,
                   fmt::format("adapter '{}': request-facing model resolves to conflicting runtime targets", served)));
      continue;
    }
    const auto& target = *claims.targets.begin();
    AdapterMembership entry{target.base_model, *target.adapter, {}};
    for (const auto& [worker_id, counts] : claims.capacities) {
      if (counts.size() == 1) {
        entry.workers[worker_id] = *counts.begin();
      } else {
        conflicts.push_back(
            conflict(ConflictScope::kPoolMaterialization,
                     fmt::format("worker {}: adapter '{}': conflicting adapter capacity", worker_id, served)));
      }
    }
    draft.membership.adapters.emplace(served, std::move(entry));
  }
}

EndpointDraft draft_endpoint(const EndpointKey& endpoint, const WorkerCards& workers) {
  EndpointDraft draft;
  draft.membership.endpoint = endpoint;
  const auto cards = project_base_cards(endpoint, workers, draft.membership.conflicts);
  draft.membership.domain = endpoint_domain(cards, draft.membership.conflicts);
  add_base_workers(cards, draft);
  add_adapters(cards, draft);
  return draft;
}

// ---- across endpoints ----

using Binding = std::pair<std::string, ModelTarget>;  // (request-facing model, target)

// docs/protocol/pools.md#name-uniqueness: a relay federates independently owned endpoints and has
// no safe owner to pick, so a name (model id or alias) that resolves to two bindings anywhere is
// ambiguous everywhere.
std::set<std::string> ambiguous_names(const std::vector<EndpointDraft>& drafts) {
  std::map<std::string, std::set<Binding>> owners;
  for (const auto& draft : drafts) {
    for (const auto& claim : draft.claims) {
      const Binding binding{claim.model, claim.target};
      owners[claim.model].insert(binding);
      for (const auto& alias : claim.aliases) owners[alias].insert(binding);
    }
  }
  std::set<std::string> ambiguous;
  for (const auto& [name, bindings] : owners) {
    if (bindings.size() > 1) ambiguous.insert(name);
  }
  return ambiguous;
}

std::vector<Registration> registrations_of(const std::vector<Claim>& claims, const std::set<std::string>& ambiguous,
                                           std::vector<Conflict>& conflicts) {
  std::map<Binding, std::set<std::string>> aliases_by_binding;
  for (const auto& claim : claims) {
    if (ambiguous.contains(claim.model)) {
      conflicts.push_back(
          conflict(ConflictScope::kServingBinding,
                   fmt::format("request-facing model name '{}' resolves to conflicting targets", claim.model)));
      continue;
    }
    auto& aliases = aliases_by_binding[{claim.model, claim.target}];
    for (const auto& alias : claim.aliases) {
      if (!ambiguous.contains(alias)) aliases.insert(alias);
    }
  }
  std::vector<Registration> registrations;
  for (const auto& [binding, aliases] : aliases_by_binding) {
    registrations.push_back({binding.first, binding.second, {aliases.begin(), aliases.end()}});
  }
  std::ranges::sort(registrations);
  return registrations;
}

bool has_lora_registration(const std::vector<Registration>& registrations, const std::string& served,
                           const AdapterMembership& adapter) {
  const ModelTarget target{adapter.base_model, adapter.lora_name};
  return std::ranges::any_of(registrations, [&](const Registration& registration) {
    return registration.canonical_model_id == served && registration.target == target;
  });
}

std::vector<Role> roles_of(const std::map<std::uint64_t, WorkerTopology>& workers) {
  std::set<Role> roles;
  for (const auto& [worker_id, topology] : workers) roles.insert(role_of(topology.worker_type));
  return {roles.begin(), roles.end()};
}

EndpointMembership finish(EndpointDraft draft, const std::set<std::string>& ambiguous) {
  auto& membership = draft.membership;
  membership.registrations = registrations_of(draft.claims, ambiguous, membership.conflicts);
  std::erase_if(membership.adapters, [&](const auto& entry) {
    return !has_lora_registration(membership.registrations, entry.first, entry.second);
  });
  membership.roles = roles_of(membership.worker_topology);
  std::ranges::sort(membership.conflicts);
  const auto duplicates = std::ranges::unique(membership.conflicts);
  membership.conflicts.erase(duplicates.begin(), duplicates.end());
  return std::move(membership);
}

// ---- wire conversion ----

wan_v1::DigestIdentity* fill(wan_v1::DigestIdentity* out, const identity::Digest& digest) {
  out->set_digest(digest.bytes.data(), digest.bytes.size());
  out->set_source(static_cast<wan_v1::IdentitySource>(digest.source));
  return out;
}

void fill(wan_v1::ModelRegistration* out, const Registration& registration) {
  out->set_canonical_model_id(registration.canonical_model_id);
  auto* target = out->mutable_target();
  if (registration.target.adapter) {
    target->mutable_lora()->set_base_model(registration.target.base_model);
    target->mutable_lora()->set_adapter(*registration.target.adapter);
  } else {
    target->mutable_base()->set_base_model(registration.target.base_model);
  }
  // Already normalised by the projection; re-applied because docs/protocol/pools.md#descriptor
  // makes it the producer's duty.
  std::set<std::string> aliases(registration.aliases.begin(), registration.aliases.end());
  aliases.erase(registration.canonical_model_id);
  for (const auto& alias : aliases) out->add_aliases(alias);
}

// What a descriptor says of the endpoint's cards: its name and registrations.
wan_v1::KvPoolDescriptor named_descriptor(const EndpointMembership& membership) {
  wan_v1::KvPoolDescriptor out;
  auto* endpoint = out.mutable_serving_endpoint();
  endpoint->set_namespace_(membership.endpoint.ns);
  endpoint->set_component(membership.endpoint.component);
  endpoint->set_endpoint(membership.endpoint.endpoint);
  for (const auto& registration : membership.registrations) fill(out.add_registrations(), registration);
  return out;
}

// Needs are an OR of ANDs, so a repeated role or AND-term means nothing: each is kept once, in
// the order first given. A card then holds at most one term per set of worker types, however
// many its request repeated (each is walked at every membership change).
void keep_distinct_needs(ingest_v1::ModelCard& card) {
  google::protobuf::RepeatedPtrField<ingest_v1::RoleConjunction> distinct;
  std::vector<std::vector<int>> seen;  // each kept term's roles, sorted
  for (const auto& conjunction : card.needs()) {
    std::vector<int> roles;
    for (const int role : conjunction.all_of()) {
      if (std::ranges::find(roles, role) == roles.end()) roles.push_back(role);
    }
    std::vector<int> key = roles;
    std::ranges::sort(key);
    if (std::ranges::find(seen, key) != seen.end()) continue;
    seen.push_back(std::move(key));
    auto* kept = distinct.Add();
    for (const int role : roles) kept->add_all_of(static_cast<ingest_v1::WorkerType>(role));
  }
  card.mutable_needs()->Swap(&distinct);
}

}  // namespace

// ---- EndpointMembership ----

bool EndpointMembership::has_conflict(ConflictScope scope) const {
  return std::ranges::any_of(conflicts, [scope](const Conflict& c) { return c.scope == scope; });
}

bool EndpointMembership::materializable() const {
  return domain.has_value() && !registrations.empty() && !has_conflict(ConflictScope::kPoolMaterialization) &&
         !has_conflict(ConflictScope::kServingTopology);
}

std::optional<EndpointKey> EndpointMembership::kv_state_endpoint() const {
  std::set<EndpointKey> effective;
  for (const auto& [worker_id, config] : runtime_configs) effective.insert(config.kv_state_endpoint.value_or(endpoint));
  if (effective.size() != 1) return std::nullopt;
  return *effective.begin();
}

// ---- projection ----

MembershipView project(const EndpointCards& endpoints) {
  std::vector<EndpointDraft> drafts;
  for (const auto& [endpoint, workers] : endpoints) {
    if (!workers.empty()) drafts.push_back(draft_endpoint(endpoint, workers));
  }
  const auto ambiguous = ambiguous_names(drafts);
  MembershipView view;
  for (auto& draft : drafts) {
    auto key = draft.membership.endpoint;
    view.emplace(std::move(key), finish(std::move(draft), ambiguous));
  }
  return view;
}

RuntimeConfig to_runtime_config(const ingest_v1::RuntimeConfig& config) {
  RuntimeConfig out;
  if (config.has_total_kv_blocks() && config.total_kv_blocks() > 0) out.total_kv_blocks = config.total_kv_blocks();
  out.data_parallel_start_rank = config.data_parallel_start_rank();
  out.data_parallel_size = std::max<std::uint32_t>(config.data_parallel_size(), 1);
  out.enable_eagle = config.enable_eagle();
  if (config.has_max_num_seqs()) out.max_num_seqs = config.max_num_seqs();
  if (config.has_kv_state_endpoint()) {
    const auto& ref = config.kv_state_endpoint();
    out.kv_state_endpoint = EndpointKey{ref.namespace_(), ref.component(), ref.endpoint()};
  }
  return out;
}

// ---- catalog builders ----

wan_v1::KvPoolId pool_id(const IndexerDomain& domain, std::uint64_t dc_id) {
  wan_v1::KvPoolId id;
  id.set_identity_version(kPoolIdentityVersion);
  fill(id.mutable_indexer_domain()->mutable_cache_semantics(), domain.cache_semantics);
  fill(id.mutable_indexer_domain()->mutable_routing_scope(), domain.routing_scope);
  id.set_dc_id(dc_id);
  return id;
}

std::optional<wan_v1::KvPoolDescriptor> descriptor(const EndpointMembership& membership,
                                                   const wan_v1::ProducerIdentity& producer) {
  if (!membership.materializable()) return std::nullopt;
  wan_v1::KvPoolDescriptor out = named_descriptor(membership);
  *out.mutable_producer() = producer;
  out.mutable_query_semantics()->set_kv_block_size(membership.domain->kv_block_size);
  out.mutable_query_semantics()->set_hash_format(
      static_cast<wan_v1::KvQueryHashFormat>(membership.domain->hash_format));
  for (const Role role : membership.roles) out.add_pool_roles(static_cast<wan_v1::WorkerRole>(role));
  return out;
}

std::size_t catalog_bytes(const EndpointKey& endpoint, const WorkerCards& workers) {
  if (workers.empty()) return 0;
  return named_descriptor(finish(draft_endpoint(endpoint, workers), {})).ByteSizeLong();
}

ingest_v1::WorkerSpec worker_spec(const ingest_v1::PutWorkerRequest& request) {
  ingest_v1::WorkerSpec spec;
  spec.set_worker_id(request.worker_id());
  *spec.mutable_card() = request.card();
  *spec.mutable_adapters() = request.adapters();
  *spec.mutable_kv_sources() = request.kv_sources();
  if (request.has_engine_metrics()) *spec.mutable_engine_metrics() = request.engine_metrics();
  keep_distinct_needs(*spec.mutable_card());
  spec.DiscardUnknownFields();  // fields of a newer schema: nothing reads them, so nothing holds them
  return spec;
}

ingest_v1::PutWorkerRequest put_worker_request(const ingest_v1::EndpointRef& endpoint,
                                               const ingest_v1::WorkerSpec& worker) {
  ingest_v1::PutWorkerRequest request;
  *request.mutable_endpoint() = endpoint;
  request.set_worker_id(worker.worker_id());
  *request.mutable_card() = worker.card();
  *request.mutable_adapters() = worker.adapters();
  *request.mutable_kv_sources() = worker.kv_sources();
  if (worker.has_engine_metrics()) *request.mutable_engine_metrics() = worker.engine_metrics();
  return request;
}

}  // namespace kvrelay::membership
