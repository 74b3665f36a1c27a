#include "core/readiness.hpp"

#include <algorithm>
#include <iterator>
#include <stdexcept>
#include <tuple>
#include <utility>

namespace kvrelay::readiness {
namespace {

namespace v1 = dynamo::kvrelay::v1;

// Role and the wire WorkerRole share their numbers (and therefore their sort order), so the
// wire conversion is a cast and std::set<Role> iterates in wire order.
static_assert(static_cast<int>(Role::kPrefill) == v1::WORKER_ROLE_PREFILL);
static_assert(static_cast<int>(Role::kDecode) == v1::WORKER_ROLE_DECODE);
static_assert(static_cast<int>(Role::kEncode) == v1::WORKER_ROLE_ENCODE);
static_assert(static_cast<int>(Role::kAggregated) == v1::WORKER_ROLE_AGGREGATED);
static_assert(static_cast<int>(Role::kLegacy) == v1::WORKER_ROLE_LEGACY);

v1::WorkerRole wire_role(Role role) { return static_cast<v1::WorkerRole>(role); }

template <typename Roles>
void append_roles(const Roles& roles, google::protobuf::RepeatedField<int>* out) {
  for (const Role role : roles) out->Add(wire_role(role));
}

// ---- evaluator -------------------------------------------------------------------------------

bool alternative_satisfied(const std::vector<WorkerType>& alternative, const std::set<Role>& present) {
  for (const WorkerType needed : alternative) {
    if (!present.contains(role_of(needed))) return false;
  }
  return true;
}

bool needs_satisfied(const Needs& needs, const std::set<Role>& present) {
  for (const auto& alternative : needs) {
    if (alternative_satisfied(alternative, present)) return true;
  }
  return false;
}

// An unsatisfied DNF reports every absent role of every alternative
// (docs/protocol/readiness.md#evaluator), so an encoder needing [[P, D], [AGG]] with P dead names
// both PREFILL and AGGREGATED.
void add_absent_roles(const Needs& needs, const std::set<Role>& present, std::set<Role>& missing) {
  for (const auto& alternative : needs) {
    for (const WorkerType needed : alternative) {
      const Role role = role_of(needed);
      if (!present.contains(role)) missing.insert(role);
    }
  }
}

// Pass 1: liveness, legacy presence (a dead legacy card counts too) and the live typed roles.
void collect_presence(std::span<const ReadinessUnit> units, Evaluation& evaluation) {
  for (const auto& unit : units) {
    if (unit.live_count > 0) evaluation.has_live = true;
    if (!unit.worker_type) {
      evaluation.has_legacy = true;
    } else if (unit.live_count > 0) {
      evaluation.present.insert(role_of(*unit.worker_type));
    }
  }
}

// Pass 2 (strict mode only): declared roles with nothing live, and the unmet needs of live
// units. A dead unit's needs are ignored: it cannot serve, so it has no dependencies.
void collect_missing(std::span<const ReadinessUnit> units, Evaluation& evaluation) {
  for (const auto& unit : units) {
    const Role role = role_of(*unit.worker_type);
    if (!evaluation.present.contains(role)) evaluation.missing.insert(role);
    if (unit.live_count == 0 || unit.needs.empty()) continue;
    if (!needs_satisfied(unit.needs, evaluation.present)) {
      add_absent_roles(unit.needs, evaluation.present, evaluation.missing);
    }
  }
}

// ---- grouping --------------------------------------------------------------------------------

using GroupKey = std::pair<std::string, std::string>;  // (namespace, base model)
using Members = std::vector<const EndpointFacts*>;

std::set<std::string> base_models_of(const EndpointFacts& facts) {
  std::set<std::string> models;
  for (const auto& registration : facts.registrations) {
    if (!registration.target.adapter) models.insert(registration.target.base_model);
  }
  return models;
}

// Members ordered by their "ns/component/endpoint" text, byte-wise. This differs from
// ordering EndpointKey field by field when a name contains a byte below '/', e.g. '-'.
void sort_members(Members& members) {
  std::sort(members.begin(), members.end(), [](const EndpointFacts* a, const EndpointFacts* b) {
    return a->endpoint.display() < b->endpoint.display();
  });
}

std::map<GroupKey, Members> group_endpoints(std::span<const EndpointFacts> endpoints) {
  std::map<GroupKey, Members> groups;  // std::string compares byte-wise (unsigned char)
  for (const auto& facts : endpoints) {
    if (facts.serving_topology_conflict) continue;
    for (const auto& model : base_models_of(facts)) groups[{facts.endpoint.ns, model}].push_back(&facts);
  }
  for (auto& [key, members] : groups) sort_members(members);
  return groups;
}

// ---- entry fields ----------------------------------------------------------------------------

// UNKNOWN is caused only by a member whose availability has not been reported yet.
bool all_authoritative(const Members& members) {
  for (const auto* facts : members) {
    if (!facts->live_workers) return false;
  }
  return true;
}

std::vector<ReadinessUnit> units_of_group(const Members& members) {
  std::vector<ReadinessUnit> units;
  for (const auto* facts : members) {
    auto endpoint_units = units_of(facts->workers, facts->live_workers);
    units.insert(units.end(), std::make_move_iterator(endpoint_units.begin()),
                 std::make_move_iterator(endpoint_units.end()));
  }
  return units;
}

std::set<Role> declared_roles(const EndpointFacts& facts) { return {facts.roles.begin(), facts.roles.end()}; }

// docs/protocol/decisions.md#d8 (the contract's definition): PREFILL / DECODE declared by two or
// more member endpoints, liveness-independent. ENCODE, AGGREGATED (legal scale-out) and LEGACY
// never appear. Reported in legacy mode and while UNKNOWN too: it is a fact about membership, not a
// verdict.
std::set<Role> duplicate_roles(const Members& members) {
  std::map<Role, std::size_t> endpoints_declaring;
  for (const auto* facts : members) {
    for (const Role role : declared_roles(*facts)) ++endpoints_declaring[role];
  }
  std::set<Role> duplicates;
  for (const Role role : {Role::kPrefill, Role::kDecode}) {
    if (endpoints_declaring[role] > 1) duplicates.insert(role);
  }
  return duplicates;
}

v1::TopologyMember member_of(const EndpointFacts& facts, const std::string& base_model) {
  v1::TopologyMember member;
  member.mutable_endpoint()->set_namespace_(facts.endpoint.ns);
  member.mutable_endpoint()->set_component(facts.endpoint.component);
  member.mutable_endpoint()->set_endpoint(facts.endpoint.endpoint);
  append_roles(declared_roles(facts), member.mutable_roles());  // sorted, de-duplicated
  if (const auto link = facts.pool_links.find(base_model); link != facts.pool_links.end()) {
    *member.mutable_pool_id() = link->second;
  }
  return member;
}

// ---- adapters (docs/protocol/decisions.md#d9) --------------------------------------------------

// The units of one adapter across the group: only endpoints carrying it take part, and on them
// only the live carrying workers that also hold a valid base card (they are in facts.workers).
// A dead carrier cannot serve the adapter, so its role is not demanded of it: an adapter on a
// live aggregated worker is READY even where a dead prefill worker also carries it. Every
// carrying endpoint is a member, so its unknown availability already makes the base UNKNOWN.
using AdapterUnits = std::map<std::string, std::vector<ReadinessUnit>>;  // by served name, byte-wise

std::set<std::uint64_t> live_carriers_of(const AdapterMembership& adapter, const EndpointFacts& facts) {
  std::set<std::uint64_t> carriers;
  for (const auto& [worker, max_gpu_lora_count] : adapter.workers) {
    if (facts.live_workers && facts.live_workers->contains(worker)) carriers.insert(worker);
  }
  return carriers;
}

AdapterUnits adapters_of_group(const Members& members, const std::string& base_model) {
  AdapterUnits adapters;
  for (const auto* facts : members) {
    for (const auto& [served_name, adapter] : facts->adapters) {
      if (adapter.base_model != base_model) continue;
      const auto carriers = live_carriers_of(adapter, *facts);
      auto units = units_of(facts->workers, facts->live_workers, &carriers);
      auto& all = adapters[served_name];  // listed even when no carrier holds a base card
      all.insert(all.end(), std::make_move_iterator(units.begin()), std::make_move_iterator(units.end()));
    }
  }
  return adapters;
}

// An UNAVAILABLE adapter always names a missing role. The union of its own and the base's is
// empty only when no typed role is to blame: no live carrier holds a base card, or the live
// carriers are legacy workers. What is lacking then is a live carrier that serves a request on
// its own; LEGACY may not be named, and AGGREGATED is the typed role that does that.
std::set<Role> adapter_missing_roles(const Evaluation& adapter, const Evaluation& base) {
  std::set<Role> missing = adapter.missing;
  missing.insert(base.missing.begin(), base.missing.end());
  if (missing.empty()) missing.insert(Role::kAggregated);
  return missing;
}

// The base's own DNF over the adapter's units, gated by the base: UNKNOWN with it (missing roles
// cleared, docs/protocol/decisions.md#d10), READY only when both are ready (so an adapter on a live
// aggregated worker is READY even where a P/D route also exists), otherwise UNAVAILABLE.
v1::AdapterReadiness adapter_readiness(const std::string& served_name, std::span<const ReadinessUnit> units,
                                       v1::ServingReadinessState base_state, const Evaluation& base) {
  v1::AdapterReadiness readiness;
  readiness.set_canonical_model_id(served_name);
  readiness.set_state(v1::SERVING_READINESS_STATE_UNKNOWN);
  if (base_state == v1::SERVING_READINESS_STATE_UNKNOWN) return readiness;
  const Evaluation evaluation = evaluate(units);
  if (base_state == v1::SERVING_READINESS_STATE_READY && evaluation.ready) {
    readiness.set_state(v1::SERVING_READINESS_STATE_READY);
  } else {
    readiness.set_state(v1::SERVING_READINESS_STATE_UNAVAILABLE);
    append_roles(adapter_missing_roles(evaluation, base), readiness.mutable_missing_roles());
  }
  return readiness;
}

// ---- entry -----------------------------------------------------------------------------------

v1::ServingReadinessState state_of(bool authoritative, const Evaluation& evaluation) {
  if (!authoritative) return v1::SERVING_READINESS_STATE_UNKNOWN;
  return evaluation.ready ? v1::SERVING_READINESS_STATE_READY : v1::SERVING_READINESS_STATE_UNAVAILABLE;
}

v1::TopologyEntry entry_of(const GroupKey& key, const Members& members) {
  const auto& [ns, base_model] = key;
  const auto units = units_of_group(members);
  const Evaluation evaluation = evaluate(units);
  const auto state = state_of(all_authoritative(members), evaluation);

  v1::TopologyEntry entry;
  entry.set_namespace_(ns);
  entry.set_canonical_model_id(base_model);
  entry.set_state(state);
  // docs/protocol/decisions.md#d10: UNKNOWN clears only present/missing (and adapters' missing).
  if (state != v1::SERVING_READINESS_STATE_UNKNOWN) {
    append_roles(evaluation.present, entry.mutable_present_roles());
    append_roles(evaluation.missing, entry.mutable_missing_roles());
  }
  for (const auto* facts : members) *entry.add_members() = member_of(*facts, base_model);
  append_roles(duplicate_roles(members), entry.mutable_duplicate_role_endpoints());
  entry.set_legacy_fallback_active(evaluation.has_legacy);
  for (const auto& [served_name, adapter_units] : adapters_of_group(members, base_model)) {
    *entry.add_adapters() = adapter_readiness(served_name, adapter_units, state, evaluation);
  }
  return entry;
}

}  // namespace

Evaluation evaluate(std::span<const ReadinessUnit> units) {
  Evaluation evaluation;
  collect_presence(units, evaluation);
  if (evaluation.has_legacy) {
    // COMPAT: one untyped card disables strict gating; ready = anything live.
    evaluation.ready = evaluation.has_live;
    return evaluation;
  }
  collect_missing(units, evaluation);
  // docs/protocol/decisions.md#d8: duplicate roles do not gate readiness, so there is no ambiguity
  // term.
  evaluation.ready = evaluation.has_live && evaluation.missing.empty();
  return evaluation;
}

std::vector<ReadinessUnit> units_of(const std::map<std::uint64_t, WorkerTopology>& workers,
                                    const std::optional<std::set<std::uint64_t>>& live_workers,
                                    const std::set<std::uint64_t>* only_workers) {
  // model_type is in the key so that two surfaces of one role stay two units
  // (docs/protocol/readiness.md#units).
  using UnitKey = std::tuple<std::optional<WorkerType>, std::uint32_t, Needs>;
  std::map<UnitKey, std::size_t> live_by_unit;
  for (const auto& [worker, topology] : workers) {
    if (only_workers && !only_workers->contains(worker)) continue;
    auto& live = live_by_unit[{topology.worker_type, topology.model_type, topology.needs}];
    if (live_workers && live_workers->contains(worker)) ++live;
  }
  std::vector<ReadinessUnit> units;
  units.reserve(live_by_unit.size());
  for (const auto& [key, live] : live_by_unit) {
    units.push_back({std::get<0>(key), live, std::get<2>(key)});
  }
  return units;
}

std::vector<v1::TopologyEntry> project(std::span<const EndpointFacts> endpoints) {
  std::vector<v1::TopologyEntry> entries;
  for (const auto& [key, members] : group_endpoints(endpoints)) entries.push_back(entry_of(key, members));
  return entries;
}

}  // namespace kvrelay::readiness
