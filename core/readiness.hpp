#pragma once
// Serving-readiness projection: per-endpoint membership facts + availability + pool links
// -> the TopologyEntry list of SubscribeServingReadiness (docs/protocol/readiness.md#projection,
// with the choices of docs/protocol/decisions.md#d8, docs/protocol/decisions.md#d9 and
// docs/protocol/decisions.md#d10).
//
// Pure functions, no state: the caller owns revisions and compares the serialized output to
// detect "entries changed", so everything produced here is deterministic and fully sorted.
#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <vector>

#include "core/topology_model.hpp"
#include "dynamo/kvrelay/v1/relay.pb.h"

namespace kvrelay::readiness {

// Workers of one endpoint sharing (worker_type, model_type, needs)
// (docs/protocol/readiness.md#units). model_type only keeps distinct surfaces (Chat vs Completions)
// apart, so it is not carried here.
struct ReadinessUnit {
  std::optional<WorkerType> worker_type;  // nullopt = legacy card
  std::size_t live_count = 0;
  Needs needs;
};

struct Evaluation {
  bool ready = false;
  std::set<Role> present;  // typed roles with a live unit (never LEGACY)
  std::set<Role> missing;  // typed roles required but not live; always empty in legacy mode
  bool has_legacy = false;
  bool has_live = false;
};

// The shared evaluator of docs/protocol/readiness.md#evaluator without the ambiguity gate
// (docs/protocol/decisions.md#d8):
// strict mode: ready = has_live and missing is empty; legacy mode (any untyped unit, live or
// not): ready = has_live, missing empty.
Evaluation evaluate(std::span<const ReadinessUnit> units);

// The units of one endpoint, in (worker_type, model_type, needs) order. live_count counts the
// unit's workers in live_workers; all are 0 while availability is unknown (nullopt).
// only_workers, when given, restricts the units to those workers (adapter-carrying workers).
std::vector<ReadinessUnit> units_of(const std::map<std::uint64_t, WorkerTopology>& workers,
                                    const std::optional<std::set<std::uint64_t>>& live_workers,
                                    const std::set<std::uint64_t>* only_workers = nullptr);

// Everything the projection knows about one serving endpoint. Endpoints must be unique in
// the input span (a repeated endpoint would be listed twice as a member).
struct EndpointFacts {
  EndpointKey endpoint;
  std::vector<Registration> registrations;                          // base + LoRA; only Base targets create entries
  std::vector<Role> roles;                                          // the endpoint's declared roles
  std::map<std::uint64_t, WorkerTopology> workers;                  // valid base-card workers, live or not
  std::map<std::string, AdapterMembership> adapters;                // by served adapter name
  bool serving_topology_conflict = false;                           // endpoint skipped entirely
  std::optional<std::set<std::uint64_t>> live_workers;              // nullopt = availability not yet reported
  std::map<std::string, dynamo::kvrelay::v1::KvPoolId> pool_links;  // base model -> pool id, when linked
};

// One entry per (namespace, base model), sorted per docs/protocol/readiness.md#ordering: entries by
// (namespace, canonical_model_id), members by "ns/component/endpoint", roles in enum order,
// adapters by served name - all byte-wise.
std::vector<dynamo::kvrelay::v1::TopologyEntry> project(std::span<const EndpointFacts> endpoints);

}  // namespace kvrelay::readiness
