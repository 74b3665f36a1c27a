#pragma once
// Card -> endpoint membership projection (docs/protocol/pools.md#membership-projection,
// docs/protocol/pools.md#name-uniqueness, docs/protocol/pools.md#identity-derivation,
// docs/protocol/pools.md#materialization, docs/protocol/pools.md#descriptor).
//
// Input: the ingest cards (kvrelay.ingest.v1.WorkerSpec: one base card plus its adapter cards)
// that workers registered per serving endpoint. Output: per endpoint, the membership view the
// readiness, load and catalog code share: registrations, roles, per-worker topology, adapters,
// runtime configs, conflicts with their scope, and the indexer domain that identifies the
// endpoint's KV pool. Pure and deterministic: equal inputs give equal outputs whatever the order
// of repeated fields or map entries inside the cards.
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "core/identity.hpp"
#include "core/token_hashing.hpp"
#include "core/topology_model.hpp"
#include "dynamo/kvrelay/v1/relay.pb.h"
#include "kvrelay/ingest/v1/ingest.pb.h"

namespace kvrelay::membership {

namespace ingest_v1 = ::kvrelay::ingest::v1;
namespace wan_v1 = ::dynamo::kvrelay::v1;

inline constexpr std::uint32_t kPoolIdentityVersion = 1;

// What identifies a pool apart from its dc_id (docs/protocol/pools.md#pool-id): the IndexerDomainId
// plus the query semantics it was derived with.
struct IndexerDomain {
  identity::Digest cache_semantics;
  identity::Digest routing_scope;
  std::uint32_t kv_block_size = 0;
  hashing::HashFormat hash_format = hashing::HashFormat::kStandard;  // KvQueryHashFormat numbers
  friend bool operator==(const IndexerDomain&, const IndexerDomain&) = default;
};

struct EndpointMembership {
  EndpointKey endpoint;
  // Base and LoRA registrations ascending by (canonical id, target, aliases). Canonical ids are
  // unique here (a name with two targets is removed), so this is the canonical-id order.
  std::vector<Registration> registrations;
  std::vector<Role> roles;                                  // sorted distinct over worker_topology
  std::map<std::uint64_t, WorkerTopology> worker_topology;  // workers with a valid base card
  std::map<std::string, AdapterMembership> adapters;        // by served (request-facing) name
  std::map<std::uint64_t, RuntimeConfig> runtime_configs;   // same workers as worker_topology
  std::vector<Conflict> conflicts;                          // sorted by (scope, message), unique
  std::optional<IndexerDomain> domain;                      // every base card resolved one and all agree

  bool has_conflict(ConflictScope scope) const;
  // docs/protocol/pools.md#materialization, condition 1: a domain, at least one registration, and
  // no PoolMaterialization or ServingTopology conflict.
  bool materializable() const;
  // docs/protocol/pools.md#materialization, condition 2: the one effective kv_state_endpoint of all
  // workers (unset = this serving endpoint); nullopt when the workers disagree or there is no
  // worker.
  std::optional<EndpointKey> kv_state_endpoint() const;

  friend bool operator==(const EndpointMembership&, const EndpointMembership&) = default;
};

using WorkerCards = std::map<std::uint64_t, ingest_v1::WorkerSpec>;  // by worker id (the key wins)
using EndpointCards = std::map<EndpointKey, WorkerCards>;
using MembershipView = std::map<EndpointKey, EndpointMembership>;

// The projection of docs/protocol/pools.md#membership-projection over every endpoint in the
// relay's scope (name uniqueness is global).
// An endpoint without workers has no membership and is absent from the result. The caller refuses
// malformed cards at ingest (core/ingest_validation.hpp); a worker spec that would fail that check
// but still gets here is left out of its endpoint with a ServingBinding conflict, never guessed at.
MembershipView project(const EndpointCards& endpoints);

// The bytes an endpoint's name and registrations take in a catalog descriptor (its producer
// identity apart), its workers' cards projected alone: before names another endpoint also
// claims are dropped, so at least what it adds to any catalog (docs/protocol/decisions.md#d47).
std::size_t catalog_bytes(const EndpointKey& endpoint, const WorkerCards& workers);

// A worker as PutWorker declares it, and back: the same card, adapters and feeds.
ingest_v1::WorkerSpec worker_spec(const ingest_v1::PutWorkerRequest& request);
ingest_v1::PutWorkerRequest put_worker_request(const ingest_v1::EndpointRef& endpoint,
                                               const ingest_v1::WorkerSpec& worker);

// The runtime-config facts the relay keeps: data_parallel_size 0 becomes 1 and total_kv_blocks 0
// becomes unknown. Expects a config that passed ingest validation.
RuntimeConfig to_runtime_config(const ingest_v1::RuntimeConfig& config);

// Catalog builders. The producer identity (incarnation, layout generation, CKF format) is the
// caller's; its pool_id is expected to be pool_id(*membership.domain, dc_id).
wan_v1::KvPoolId pool_id(const IndexerDomain& domain, std::uint64_t dc_id);
// nullopt unless membership.materializable(). Registrations keep the membership order, each
// alias list sorted, unique and without the registration's own canonical id; pool_roles = roles.
std::optional<wan_v1::KvPoolDescriptor> descriptor(const EndpointMembership& membership,
                                                   const wan_v1::ProducerIdentity& producer);

}  // namespace kvrelay::membership
