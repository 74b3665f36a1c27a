#pragma once
// One pool's publisher: it owns the pool's filter and lineage, applies KV event batches,
// publishes one CBI1 delta per publication (at most one per gap, within about a gap of the
// first unpublished event: docs/protocol/pools.md#publication-cadence, or early inside a batch
// that touches half a frame of buckets), sends the same encoded bytes to every attached stream, and gives
// each new stream a snapshot image at the current sequence. When the filter fills up it asks
// its owner for a re-layout into twice the buckets and, granted one, rebuilds itself as the
// new layout generation (docs/protocol/capacity.md#relayout).
#include <caf/all.hpp>

#include <algorithm>
#include <chrono>
#include <optional>

#include "actors/mailbox_sampler.hpp"
#include "actors/messages.hpp"
#include "actors/permits.hpp"
#include "core/kv_events.hpp"
#include "metrics/relay_metrics.hpp"

namespace kvrelay {

// When a pool publishes (docs/protocol/pools.md#publication-cadence).
struct PublicationCadence {
  std::uint32_t threshold = 16;        // pending events that publish without waiting for the delay
  std::chrono::milliseconds delay{1};  // longest wait after the first unpublished event
  // Delta frames per second a pool sends over all its streams together (0: no limit). Every
  // frame costs the relay a stream write, so a pool with many streams publishes less often
  // and each delta carries more.
  std::uint32_t stream_frames_per_s = 16'000;

  // The shortest gap between two deltas of a pool with `streams` streams: the delay, or
  // longer where the frame budget asks for it.
  std::chrono::nanoseconds gap(std::size_t streams) const {
    const std::chrono::nanoseconds delay_ns = delay;
    if (stream_frames_per_s == 0) return delay_ns;
    const std::chrono::nanoseconds budget_ns(std::int64_t{1'000'000'000} * static_cast<std::int64_t>(streams) /
                                             stream_frames_per_s);
    return std::max(delay_ns, budget_ns);
  }
};

struct PublisherConfig {
  std::string endpoint;      // the serving endpoint's name, as the relay's log lines show it
  PoolStreamSpec spec;       // identity, dc id and CKF format of this generation
  QuerySemantics semantics;  // how token blocks are hashed
  // What the pool's tables are made room for at once (its declared KV capacity; zero: unknown).
  ExpectedBlocks expected_blocks;
  PublicationCadence cadence;
  // Pools with subscribers at once (--max-initialized-pool-hubs), shared by every publisher.
  // A pool holds a slot while it has at least one stream: an idle pool holds none.
  std::shared_ptr<StreamLimit> hub_slots;
  // A re-layout is asked for past this slot load (or when a live block could not be placed),
  // at most once per min interval, and never beyond capacity::kMaxBuckets.
  double relayout_load = 0.85;
  std::chrono::milliseconds relayout_min_interval{1000};
  PoolOwnerActor owner;                       // told of fences, asked for re-layouts (may be null)
  metrics::RelayMetrics* metrics = nullptr;   // none: nothing is recorded
  std::shared_ptr<metrics::PoolStats> stats;  // this generation's per-pool figures, or none
};

// A pool generation's publisher, as membership, its streams and GetState see it.
using PoolPublisherActor = caf::typed_actor<
    // KV events for this pool from one source, reset first when it started over; the outcome
    // goes to the reply. receipt_ns: when the batch reached the relay (steady clock).
    caf::reacts_to<atoms::apply_batch_atom, EventBatchPtr, SourceReset, BatchReplyPtr, std::int64_t>,
    caf::reacts_to<atoms::reset_atom, SourceKey>,  // drop one source's blocks
    // a stream admitted to this layout generation, waiting for its encoder permit
    caf::reacts_to<atoms::waiting_atom, PoolFrameSinkActor, std::uint64_t>,
    // a stream with its encoder permit, for the layout generation it was admitted to
    caf::reacts_to<atoms::attach_atom, PoolFrameSinkActor, std::uint64_t>,
    // Fence, from a stream of that layout generation.
    caf::reacts_to<atoms::broken_sequence_atom, PoolFrameSinkActor, std::uint64_t, std::string>,
    caf::replies_to<atoms::pool_state_atom>::with<PoolStateReport>,
    caf::reacts_to<atoms::retire_atom, RpcStatus>,               // end every stream with this status and stop
    caf::reacts_to<atoms::relayout_atom, v1::ProducerIdentity>,  // the owner granted a re-layout
    caf::reacts_to<atoms::growth_refused_atom, std::string>,     // the owner refused one
    caf::reacts_to<atoms::growth_due_atom>,                      // its own re-layout interval timer
    caf::reacts_to<atoms::publish_atom>,                         // its own publication timer
    caf::reacts_to<atoms::sample_atom>,                          // its own mailbox sampling timer
    caf::reacts_to<atoms::corrupt_atom>,                         // test hook: break the first stream's next delta
    caf::reacts_to<atoms::evict_atom, std::uint64_t>>;           // test hook: see evict_fingerprint_for_test

struct PoolPublisherState {
  std::optional<PoolIndex> index;
  KvEventApplier events;  // applies batches' events to `index`
  PublisherConfig config;
  std::uint64_t sequence = 0;        // of the last publication
  std::uint32_t pending_events = 0;  // applied since the last publication
  bool delay_armed = false;
  caf::actor_clock::time_point last_publication{};
  std::int64_t oldest_pending_receipt_ns = 0;
  // Shared by the streams joining at the current sequence; gone once the last of them has
  // sent it, so an idle publisher pins no lane copy.
  std::weak_ptr<const SnapshotImage> snapshot_at_sequence;
  std::vector<PoolFrameSinkActor> streams;
  // Admitted to this generation, waiting for an encoder permit: ended if the generation is
  // re-laid out, fenced or retired first, so none waits for a generation that is gone.
  std::vector<PoolFrameSinkActor> waiting;
  std::shared_ptr<StreamLimit::Permit> hub_slot;  // held while `streams` is not empty
  bool fenced = false;                            // waiting for membership to retire this generation
  caf::actor_clock::time_point last_relayout{};   // when the current layout was made
  bool growth_asked = false;                      // a grow request awaits the owner's answer
  bool growth_timer_armed = false;
  std::optional<std::string> growth_refusal;  // why the owner refused the last request
  bool corrupt_next_delta = false;            // test hook: the next delta breaks its first stream's sequence
  std::uint64_t relayouts = 0;
  MailboxSampler mailbox;
  static inline const char* name = "pool-publisher";
};

PoolPublisherActor::behavior_type pool_publisher(PoolPublisherActor::stateful_pointer<PoolPublisherState> self,
                                                 PublisherConfig config);

std::int64_t steady_now_ns();

}  // namespace kvrelay
