#pragma once
// The DC-local facts and what follows from them: workers' cards and KV sources per serving
// endpoint, authoritative availability. After every change it re-projects endpoint
// membership, materializes or retires pool publishers, points every source's lane at its
// pool and publishes the lanes (batches go from their carriers straight to the publishers),
// and hands the complete catalog, readiness facts and load pools to their actors.
#include <caf/all.hpp>

#include <map>
#include <set>

#include "actors/catalog.hpp"
#include "actors/engine_feeds.hpp"
#include "actors/load_window.hpp"
#include "actors/mailbox_sampler.hpp"
#include "actors/messages.hpp"
#include "actors/pool_publisher.hpp"
#include "actors/serving_load_window.hpp"
#include "actors/source_lanes.hpp"
#include "actors/topology_projector.hpp"
#include "core/backoff.hpp"
#include "core/capacity.hpp"
#include "core/membership.hpp"
#include "core/rate_limited_log.hpp"
#include "metrics/relay_metrics.hpp"

namespace kvrelay {

// The counts PutWorker is held to (docs/protocol/limits.md#count-limits): a call that would
// pass one is refused (RESOURCE_EXHAUSTED, actors/ingest_refusal.hpp) and changes nothing.
struct MembershipLimits {
  std::size_t max_serving_endpoints = 1'024;  // endpoints with at least one worker
  std::size_t max_workers_per_endpoint = 4'096;
  std::size_t max_kv_sources = 65'536;  // KV sources of every worker together
  // Bytes of every endpoint's name and registrations together, as a catalog update carries
  // them (half of --max-message-bytes: the update must fit one message).
  std::size_t max_catalog_bytes = 4'194'304;
};

// GetState asks every engine source, then every pool publisher, waiting at most this long each
// time: an actor too slow to answer leaves its slot without its figures, and both rounds end
// before the ingest gateway stops waiting for the whole answer.
inline constexpr std::chrono::seconds kStateRoundDeadline{4};

struct MembershipConfig {
  v1::RelayIdentity relay;
  std::uint64_t dc_id = 0;
  capacity::Sizing sizing;  // a new pool's first layout
  std::uint64_t seed = 0;
  double relayout_load = 0.85;
  std::chrono::milliseconds relayout_min_interval{1000};
  std::optional<std::uint64_t> memory_budget_bytes;  // none: pools are not charged against a budget
  PublicationCadence cadence;
  std::size_t max_subscribers_per_pool = 64;
  std::shared_ptr<StreamLimit> hub_slots;
  metrics::RelayMetrics* metrics = nullptr;  // none: nothing is recorded
  EngineFeedsConfig feeds;                   // where engine sources and scrapers read from
  MembershipLimits limits;                   // what PutWorker may make membership hold
  // Where the source lanes are published for the batches' carriers (actors/source_lanes.hpp).
  std::shared_ptr<RoutingRegistry> routes = std::make_shared<RoutingRegistry>();
};

struct MembershipPeers {
  CatalogActor catalog;
  TopologyProjectorActor topology;
  LoadWindowActor load;
  ServingLoadWindowActor serving_load;
};

// Membership, as the ingest gateway, the runtime and pool publishers see it. The unary ingest
// calls are requests: their answer (or an error, if membership cannot answer) completes the RPC.
using MembershipActor = PoolOwnerActor::extend_with<SourceLinksActor>::extend<
    caf::replies_to<atoms::put_worker_atom, ingest_v1::PutWorkerRequest>::with<ingest_v1::PutWorkerResponse>,
    caf::replies_to<atoms::remove_worker_atom, ingest_v1::RemoveWorkerRequest>::with<ingest_v1::RemoveWorkerResponse>,
    caf::replies_to<atoms::availability_atom,
                    ingest_v1::SetAvailabilityRequest>::with<ingest_v1::SetAvailabilityResponse>,
    caf::replies_to<atoms::get_state_atom>::with<ingest_v1::RelayState>,
    caf::reacts_to<atoms::shutdown_atom, RpcStatus>,       // retire every pool with this status
    caf::reacts_to<atoms::sample_atom>,                    // its mailbox sampling timer
    caf::reacts_to<atoms::rebuild_due_atom, EndpointKey>,  // a fenced pool's rebuild backoff ran out
    caf::reacts_to<atoms::corrupt_atom>,                   // test hook: every pool's next delta breaks
    caf::reacts_to<atoms::evict_atom, std::uint64_t>,      // test hook: every pool loses a fingerprint
    caf::reacts_to<atoms::crash_atom>>;                    // test hook: throw, as an invariant break would

// What a pool generation is bound to (docs/protocol/pools.md#materialization): a change of
// either withdraws it and materializes a new generation.
struct PoolBinding {
  membership::IndexerDomain domain;
  EndpointKey kv_state_endpoint;  // the workers' one effective runtime_config.kv_state_endpoint
  friend bool operator==(const PoolBinding&, const PoolBinding&) = default;
};

struct MaterializedPool {
  PoolBinding binding;
  PoolPublisherActor publisher;  // linked: its failure is membership's
  std::shared_ptr<StreamLimit> subscribers;
  v1::ProducerIdentity producer;  // of the current layout generation
  v1::KvPoolDescriptor descriptor;
  std::shared_ptr<metrics::PoolStats> stats;  // its /metrics figures (none without metrics)
  // The layout generation the publisher was built with: re-layouts keep the lineage, so
  // source cursors compare this, not the current generation.
  std::uint64_t lineage = 0;
  std::uint64_t charged_bytes = 0;                 // against the memory budget
  caf::actor_clock::time_point materialized_at{};  // re-layouts keep it
  // The layout a raised declared capacity wanted and the budget refused, and the budget's
  // reservations then: it is asked for again only once either changed. GetState shows why while
  // the pool's layout is smaller (the publisher's own growth is not held back by it).
  struct DeclaredRefusal {
    std::uint64_t bucket_count = 0;
    std::uint64_t budget_reserved = 0;
    std::string reason;
  };
  std::optional<DeclaredRefusal> declared_refusal{};
};

// An endpoint whose pool generation fenced itself (docs/protocol/pools.md#fencing). Its next
// generation waits out a backoff, which grows while generations keep fencing soon after they
// were built, so a fault that recurs on the same input does not loop at the feeder's pace.
struct RebuildHold {
  Backoff backoff{{std::chrono::milliseconds(100), std::chrono::milliseconds(5000)}};
  std::optional<caf::actor_clock::time_point> until;  // none: not waiting
  std::string reason;                                 // GetState's conflict while waiting
};

struct MembershipState {
  MembershipConfig config;
  MembershipPeers peers;
  std::map<EndpointKey, membership::WorkerCards> workers;
  std::map<EndpointKey, std::set<std::uint64_t>> availability;  // absent: not yet reported
  std::map<SourceId, std::shared_ptr<SourceLane>> lanes;        // every declared source's, as last published
  EngineFeeds feeds;
  std::map<EndpointKey, membership::EndpointMembership> projection;
  std::map<EndpointKey, std::size_t> catalog_bytes;  // each endpoint's membership::catalog_bytes
  std::map<EndpointKey, MaterializedPool> pools;
  // Endpoints that should hold a pool the memory budget cannot: why, as their conflict says.
  std::map<EndpointKey, std::string> over_budget;
  // Materializable endpoints whose domains resolve to one PoolId with another's: their conflict.
  std::map<EndpointKey, std::string> shared_pools;
  std::map<EndpointKey, RebuildHold> rebuild_holds;  // endpoints whose pool fenced itself
  capacity::MemoryBudget budget{std::nullopt};
  std::shared_ptr<RateLimitedLog> growth_log = std::make_shared<RateLimitedLog>();  // refused re-layouts
  std::uint64_t layout_generation = 0;                                              // of the last attach
  bool shut_down = false;  // the relay drains: no pool is built again, whatever arrives later
  MailboxSampler mailbox;
  static inline const char* name = "membership";
};

MembershipActor::behavior_type membership_actor(MembershipActor::stateful_pointer<MembershipState> self,
                                                MembershipConfig config, MembershipPeers peers);

}  // namespace kvrelay
