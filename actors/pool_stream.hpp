#pragma once
// The actor behind one SubscribeKvPool stream: the snapshot its publisher hands it, chunk
// by chunk, then every delta from that snapshot's sequence on, through a bounded outbox.
// A delta that does not continue the stream's sequence ends it as an invalid publication.
#include <caf/all.hpp>

#include "actors/mailbox_sampler.hpp"
#include "actors/messages.hpp"
#include "actors/outbox.hpp"
#include "actors/pool_publisher.hpp"
#include "actors/snapshot_encoders.hpp"
#include "actors/stream_actors.hpp"
#include "core/filter_frame.hpp"
#include "metrics/relay_metrics.hpp"

namespace kvrelay {

// The actor behind one SubscribeKvPool stream: frames from its publisher, its encoder permit,
// its transport, and its own timers.
using PoolStreamActor = PoolFrameSinkActor::extend_with<StreamTransportActor>::extend<
    caf::reacts_to<atoms::granted_atom>,                  // its encoder permit
    caf::reacts_to<atoms::heartbeat_atom>,                // its heartbeat timer
    caf::reacts_to<atoms::progress_atom, std::uint32_t>,  // a snapshot chunk's deadline
    caf::reacts_to<atoms::sample_atom>>;                  // its mailbox sampling timer

// How a pool stream takes part in snapshot admission.
struct SnapshotPacing {
  SnapshotEncodersActor encoders;                     // the shared encoder permits (none: unlimited)
  std::chrono::milliseconds progress_timeout{60000};  // per snapshot frame
  std::chrono::milliseconds heartbeat{10000};         // 0 disables heartbeats
};

struct PoolStreamState {
  StreamWriter<wire::FilterFrame> writer;
  Outbox<wire::FilterFrame> deltas;
  PoolStreamSpec spec;
  std::shared_ptr<const std::string> identity;    // every frame's fields 1-3, encoded once
  std::shared_ptr<const SnapshotImage> snapshot;  // released once every chunk is written
  std::uint32_t next_chunk = 0;
  std::uint32_t chunk_count = 0;
  std::uint64_t last_sequence = 0;  // of the last frame queued
  SnapshotPacing pacing;
  PoolPublisherActor publisher;
  bool permit_held = false;
  std::int64_t chunk_in_flight = -1;             // index of the chunk being written, -1 when none
  caf::actor_clock::time_point last_frame_at{};  // the last data frame handed on
  bool heartbeat_armed = false;
  std::chrono::nanoseconds snapshot_encode_time{0};  // spent on this snapshot's chunks so far
  metrics::RelayMetrics* metrics = nullptr;
  MailboxSampler mailbox;
  static inline const char* name = "pool-stream";
};

// The stream ends with PUBLICATION_UNAVAILABLE if `publisher` is (or becomes) gone before
// it ended the stream itself.
// The stream first waits for an encoder permit, holding nothing; once granted it attaches to
// `publisher`, which answers with a snapshot image at its current sequence and then every
// delta from there. Each snapshot frame but the last must be written within the progress
// timeout, or the stream ends with SNAPSHOT_PROGRESS_TIMEOUT (the generation goes on). After the complete snapshot, a
// heartbeat frame (no payload, sequence unchanged) follows every `pacing.heartbeat` without a data frame. `metrics` may
// be null.
PoolStreamActor::behavior_type pool_stream(PoolStreamActor::stateful_pointer<PoolStreamState> self,
                                           StreamSinkPtr<wire::FilterFrame> sink, PoolStreamSpec spec,
                                           OutboxLimits limits, PoolPublisherActor publisher, SnapshotPacing pacing,
                                           metrics::RelayMetrics* metrics);

}  // namespace kvrelay
