#pragma once
// The DC-local facts and what follows from them: workers' cards and KV sources per serving
// endpoint, authoritative availability, per-source batch sequencing. After every change it
// re-projects endpoint membership, materializes or retires pool publishers, and hands the
// complete catalog, readiness facts and load pools to their actors.
#include <caf/all.hpp>

#include <map>
#include <set>

#include "actors/mailbox_sampler.hpp"
#include "actors/messages.hpp"
#include "actors/pool_publisher.hpp"
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
};

struct MembershipPeers {
  caf::actor catalog;
  caf::actor topology;
  caf::actor load;
};

// A push source's place in its stream of batches (decisions.md row 16), and the pool
// generation its last batch went to.
struct SourceCursor {
  std::uint64_t epoch = 0;
  std::uint64_t next_sequence = 0;
  std::uint64_t layout_generation = 0;
};

struct SourceId {
  EndpointKey endpoint;
  std::uint64_t worker_id = 0;
  std::uint32_t dp_rank = 0;
  friend auto operator<=>(const SourceId&, const SourceId&) = default;
};

struct MaterializedPool {
  membership::IndexerDomain domain;
  caf::actor publisher;
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
  std::map<EndpointKey, membership::EndpointMembership> projection;
  std::map<EndpointKey, MaterializedPool> pools;
  std::uint64_t layout_generation = 0;  // of the last attach
  MailboxSampler mailbox;
  static inline const char* name = "membership";
};

// Messages: (put_worker_atom, PutWorkerCall), (remove_worker_atom, RemoveWorkerCall),
// (availability_atom, SetAvailabilityCall), (state_atom, GetStateCall),
// (batch_atom, EventBatchPtr, BatchSinkPtr, receipt_ns), (shutdown_atom, RpcStatus).
caf::behavior membership_actor(caf::stateful_actor<MembershipState>* self, MembershipConfig config,
                               MembershipPeers peers);

}  // namespace kvrelay
