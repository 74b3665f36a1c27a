#pragma once
// One pool generation's publisher: it owns the pool's filter and lineage, applies KV event
// batches, publishes one CBI1 delta per publication (after `threshold` events or `delay`
// after the first unpublished one), sends the same encoded bytes to every attached stream,
// and gives each new stream a snapshot image at the current sequence.
#include <caf/all.hpp>

#include <chrono>
#include <optional>

#include "actors/mailbox_sampler.hpp"
#include "actors/messages.hpp"
#include "actors/permits.hpp"
#include "core/kv_events.hpp"
#include "metrics/relay_metrics.hpp"

namespace kvrelay {

struct PublisherConfig {
  PoolStreamSpec spec;             // identity, dc id and CKF format of this generation
  QuerySemantics semantics;        // how token blocks are hashed
  std::uint32_t publication_threshold = 16;
  std::chrono::milliseconds publication_delay{1};
  // Pools with subscribers at once (--max-initialized-pool-hubs), shared by every publisher.
  // A pool holds a slot while it has at least one stream: an idle pool holds none.
  std::shared_ptr<StreamLimit> hub_slots;
  caf::actor owner;  // told (fence_atom, layout_generation) when this generation is fenced
  metrics::RelayMetrics* metrics = nullptr;     // none: nothing is recorded
  std::shared_ptr<metrics::PoolStats> stats;    // this generation's per-pool figures, or none
};

struct PoolPublisherState {
  std::optional<PoolIndex> index;
  PublisherConfig config;
  std::uint64_t sequence = 0;            // of the last publication
  std::uint32_t pending_events = 0;      // applied since the last publication
  bool delay_armed = false;
  caf::actor_clock::time_point last_publication{};
  std::int64_t oldest_pending_receipt_ns = 0;
  // Shared by the streams joining at the current sequence; gone once the last of them has
  // sent it, so an idle publisher pins no lane copy.
  std::weak_ptr<const SnapshotImage> snapshot_at_sequence;
  std::vector<caf::actor> streams;
  std::shared_ptr<StreamLimit::Permit> hub_slot;  // held while `streams` is not empty
  bool fenced = false;              // waiting for membership to retire this generation
  bool corrupt_next_delta = false;  // test hook: the next delta breaks its first stream's sequence
  std::uint64_t events_rejected = 0;
  std::uint64_t source_resets = 0;
  MailboxSampler mailbox;
  static inline const char* name = "pool-publisher";
};

caf::behavior pool_publisher(caf::stateful_actor<PoolPublisherState>* self, PublisherConfig config);

std::int64_t steady_now_ns();

}  // namespace kvrelay
