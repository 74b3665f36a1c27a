#pragma once
// The DC-local facts and what follows from them: workers' cards and KV sources per serving
// endpoint, authoritative availability, per-source batch sequencing. After every change it
// re-projects endpoint membership, materializes or retires pool publishers, and hands the
// complete catalog, readiness facts and load pools to their actors.
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
#include "actors/topology_projector.hpp"
#include "core/membership.hpp"
#include "metrics/relay_metrics.hpp"

namespace kvrelay {

struct MembershipConfig {
  v1::RelayIdentity relay;
  std::uint64_t dc_id = 0;
  std::uint64_t bucket_count = 0;
  std::uint64_t seed = 0;
  std::uint32_t publication_threshold = 16;
  std::chrono::milliseconds publication_delay{1};
  std::size_t max_subscribers_per_pool = 64;
  std::shared_ptr<StreamLimit> hub_slots;
  metrics::RelayMetrics* metrics = nullptr;  // none: nothing is recorded
  EngineFeedsConfig feeds;                   // where engine sources and scrapers read from
};

struct MembershipPeers {
  CatalogActor catalog;
  TopologyProjectorActor topology;
  LoadWindowActor load;
  ServingLoadWindowActor serving_load;
};

// Membership, as the ingest gateway, the runtime and pool publishers see it. The unary ingest
// calls are requests: their answer (or an error, if membership cannot answer) completes the RPC.
using MembershipActor = FenceListenerActor::extend_with<SourceSinkActor>::extend<
    caf::replies_to<atoms::put_worker_atom, ingest_v1::PutWorkerRequest>::with<ingest_v1::PutWorkerResponse>,
    caf::replies_to<atoms::remove_worker_atom, ingest_v1::RemoveWorkerRequest>::with<ingest_v1::RemoveWorkerResponse>,
    caf::replies_to<atoms::availability_atom,
                    ingest_v1::SetAvailabilityRequest>::with<ingest_v1::SetAvailabilityResponse>,
    caf::replies_to<atoms::get_state_atom>::with<ingest_v1::RelayState>,
    caf::reacts_to<atoms::shutdown_atom, RpcStatus>,   // retire every pool with this status
    caf::reacts_to<atoms::sample_atom>,                // its mailbox sampling timer
    caf::reacts_to<atoms::corrupt_atom>,               // test hook: every pool's next delta breaks
    caf::reacts_to<atoms::evict_atom, std::uint64_t>,  // test hook: every pool loses a fingerprint
    caf::reacts_to<atoms::crash_atom>>;                // test hook: throw, as an invariant break would

// A source's place in its stream of batches (docs/protocol/decisions.md#d16), the pool
// generation its last batch went to, and how often it was reset since it was declared.
struct SourceCursor {
  std::uint64_t epoch = 0;
  std::uint64_t next_sequence = 0;
  std::uint64_t layout_generation = 0;
  std::uint64_t resets = 0;
};

struct MaterializedPool {
  membership::IndexerDomain domain;
  PoolPublisherActor publisher;  // linked: its failure is membership's
  std::shared_ptr<StreamLimit> subscribers;
  v1::ProducerIdentity producer;
  v1::KvPoolDescriptor descriptor;
  std::shared_ptr<metrics::PoolStats> stats;  // its /metrics figures (none without metrics)
};

struct MembershipState {
  MembershipConfig config;
  MembershipPeers peers;
  std::map<EndpointKey, membership::WorkerCards> workers;
  std::map<EndpointKey, std::set<std::uint64_t>> availability;  // absent: not yet reported
  std::map<SourceId, SourceCursor> cursors;
  EngineFeeds feeds;
  std::map<EndpointKey, membership::EndpointMembership> projection;
  std::map<EndpointKey, MaterializedPool> pools;
  std::uint64_t layout_generation = 0;  // of the last attach
  MailboxSampler mailbox;
  static inline const char* name = "membership";
};

MembershipActor::behavior_type membership_actor(MembershipActor::stateful_pointer<MembershipState> self,
                                                MembershipConfig config, MembershipPeers peers);

}  // namespace kvrelay
