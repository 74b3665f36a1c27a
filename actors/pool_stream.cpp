#include "actors/pool_stream.hpp"

#include <chrono>
#include <utility>

#include <fmt/format.h>

#include "actors/crash_report.hpp"
#include "core/cbi1.hpp"
#include "core/filter_frame.hpp"

namespace kvrelay {

namespace {

using Self = PoolStreamActor::stateful_pointer<PoolStreamState>;

RpcStatus lagged_status() {
  return RpcStatus::relay_error(v1::RELAY_ERROR_REASON_SUBSCRIBER_LAGGED,
                                "subscriber fell behind its bounded stream queue");
}

// The frame's serialization is built here, once; the transport sends its pieces as they are,
// with send_ts_us stamped as it hands the frame on.
std::shared_ptr<const wire::FilterFrame> frame_of(const PoolStreamState& state, v1::FilterUpdateKind kind,
                                                  std::uint64_t base_sequence, std::uint64_t sequence,
                                                  std::shared_ptr<const std::string> payload = nullptr) {
  return std::make_shared<const wire::FilterFrame>(
      state.identity, wire::FilterFrameFields{kind, base_sequence, sequence, 0}, std::move(payload));
}

// kv_relay_snapshot_encode_seconds: the chunks of one image are encoded one at a time,
// between writes; their encoding times add up to one observation per image.
void chunk_encoded(PoolStreamState& state, std::chrono::steady_clock::time_point started) {
  state.snapshot_encode_time += std::chrono::steady_clock::now() - started;
  if (state.next_chunk + 1 < state.chunk_count || state.metrics == nullptr) return;
  state.metrics->snapshot_encoded(std::exchange(state.snapshot_encode_time, {}));
}

std::shared_ptr<const wire::FilterFrame> encode_next_chunk(PoolStreamState& state) {
  const auto format = cbi1::FilterFormat{state.spec.seed, state.spec.bucket_count};
  const auto started = std::chrono::steady_clock::now();
  auto payload = cbi1::encode_snapshot_chunk(format, state.spec.dc_id, state.snapshot->sequence, state.next_chunk,
                                             state.snapshot->words);
  if (!payload) return nullptr;
  chunk_encoded(state, started);
  auto frame = frame_of(state, v1::FILTER_UPDATE_KIND_SNAPSHOT_CHUNK, state.snapshot->sequence,
                        state.snapshot->sequence, std::make_shared<const std::string>(std::move(*payload)));
  if (++state.next_chunk == state.chunk_count) state.snapshot.reset();
  return frame;
}

bool snapshot_complete(const PoolStreamState& state) {
  return state.chunk_count > 0 && state.next_chunk == state.chunk_count;
}

void arm_heartbeat(Self self, caf::actor_clock::time_point at) {
  auto& state = self->state;
  if (state.pacing.heartbeat.count() == 0 || state.heartbeat_armed) return;
  state.heartbeat_armed = true;
  self->scheduled_send(self, at, atoms::heartbeat_atom_v);
}

// Every data frame restarts the heartbeat interval.
void data_frame_sent(Self self) {
  auto& state = self->state;
  state.last_frame_at = self->clock().now();
  arm_heartbeat(self, state.last_frame_at + state.pacing.heartbeat);
}

// A frame that would break the contract is never forwarded: the stream reports it, and the
// publisher fences the whole generation (this stream ends with INVALID_PUBLICATION, the
// others with PUBLICATION_UNAVAILABLE).
void report_broken_sequence(Self self, std::string reason) {
  self->send(self->state.publisher, atoms::broken_sequence_atom_v, caf::actor_cast<PoolFrameSinkActor>(self),
             self->state.spec.producer.layout_generation(), std::move(reason));
}

void release_permit(Self self) {
  auto& state = self->state;
  if (!state.permit_held) return;
  state.permit_held = false;
  self->send(state.pacing.encoders, atoms::release_atom_v, caf::actor_cast<PermitHolderActor>(self));
}

// The encoder permit and the progress timeout guard the snapshot only while the stream still
// owes chunks: once the last one is handed to the transport the encoding is done. A slow
// reader is the outbox's business throughout: deltas queue in it from the moment the stream
// attaches, behind the chunks (docs/protocol/limits.md#outbox).
void write_chunk(Self self) {
  auto& state = self->state;
  const std::uint32_t index = state.next_chunk;
  auto chunk = encode_next_chunk(state);
  if (!chunk) return report_broken_sequence(self, "a snapshot chunk could not be encoded");
  state.writer.write(std::move(chunk));
  data_frame_sent(self);
  if (snapshot_complete(state)) return release_permit(self);
  state.chunk_in_flight = index;
  self->delayed_send(self, state.pacing.progress_timeout, atoms::progress_atom_v, index);
}

// Chunks first, then deltas: the stream never interleaves them.
void write_next(Self self) {
  auto& state = self->state;
  if (!state.writer.ready()) return;
  state.chunk_in_flight = -1;  // the writer is free: any chunk write has completed
  if (state.snapshot) return write_chunk(self);
  if (snapshot_complete(state) && !state.deltas.empty()) {
    auto frame = state.deltas.pop();
    state.writer.write(std::move(frame), !state.deltas.empty());
    data_frame_sent(self);
  }
}

void on_progress_due(Self self, std::uint32_t chunk) {
  auto& state = self->state;
  if (state.chunk_in_flight != static_cast<std::int64_t>(chunk)) return;  // written in time
  release_permit(self);
  end_stream(self, state.writer,
             RpcStatus::relay_error(v1::RELAY_ERROR_REASON_SNAPSHOT_PROGRESS_TIMEOUT,
                                    "the subscriber did not take a snapshot frame within the progress timeout"));
}

// The stream joins its publisher's fan-out only once it may encode: until then it holds
// no snapshot image and receives no deltas, so a stream waiting for a permit cannot lag.
void join_publisher(Self self) {
  self->send(self->state.publisher, atoms::attach_atom_v, caf::actor_cast<PoolFrameSinkActor>(self),
             self->state.spec.producer.layout_generation());
}

void on_snapshot(Self self, const PoolSnapshotMsg& msg) {
  auto& state = self->state;
  state.snapshot = msg.image;
  state.chunk_count = static_cast<std::uint32_t>(cbi1::chunk_count_for(state.spec.bucket_count));
  state.next_chunk = 0;
  state.last_sequence = msg.image->sequence;
  write_next(self);
}

void on_delta(Self self, const PoolDeltaMsg& msg) {
  auto& state = self->state;
  if (state.chunk_count == 0) return report_broken_sequence(self, "a delta before the snapshot");
  if (msg.base_sequence != state.last_sequence || msg.sequence != msg.base_sequence + 1) {
    return report_broken_sequence(self, fmt::format("delta {} -> {} does not continue sequence {}", msg.base_sequence,
                                                    msg.sequence, state.last_sequence));
  }
  auto frame = frame_of(state, v1::FILTER_UPDATE_KIND_DELTA, msg.base_sequence, msg.sequence, msg.payload);
  if (!state.deltas.push(std::move(frame), msg.payload->size())) {
    return end_stream(self, state.writer, lagged_status());
  }
  state.last_sequence = msg.sequence;
  write_next(self);
}

// Heartbeats never interleave with snapshot chunks; a data frame since the timer was set
// pushes the next heartbeat back. A stream with a frame still on its way is not quiet: a
// heartbeat goes straight to an idle transport, never through the outbox, so it takes no room
// from the deltas and a client that stopped reading never lags on heartbeats alone
// (docs/protocol/rpcs.md#heartbeats).
void on_heartbeat_due(Self self) {
  auto& state = self->state;
  state.heartbeat_armed = false;
  const auto now = self->clock().now();
  const auto due = state.last_frame_at + state.pacing.heartbeat;
  const bool sending = !state.writer.ready() || !state.deltas.empty();
  if (!snapshot_complete(state) || sending) return arm_heartbeat(self, now + state.pacing.heartbeat);
  if (now < due) return arm_heartbeat(self, due);
  state.writer.write(frame_of(state, v1::FILTER_UPDATE_KIND_HEARTBEAT, state.last_sequence, state.last_sequence),
                     false);
  state.last_frame_at = now;
  arm_heartbeat(self, now + state.pacing.heartbeat);
}

}  // namespace

PoolStreamActor::behavior_type pool_stream(Self self, StreamSinkPtr<wire::FilterFrame> sink, PoolStreamSpec spec,
                                           OutboxLimits limits, PoolPublisherActor publisher, SnapshotPacing pacing,
                                           metrics::RelayMetrics* metrics) {
  report_crashes(self, "pool stream");
  auto& state = self->state;
  state.writer.attach(std::move(sink));
  state.metrics = metrics;
  state.mailbox.start(self, metrics::mailbox_gauge(metrics, metrics::ActorKind::kPoolStream));
  state.pacing = std::move(pacing);
  state.publisher = std::move(publisher);
  state.deltas = Outbox<wire::FilterFrame>(limits);
  state.spec = std::move(spec);
  state.identity = wire::encode_frame_identity(state.spec.relay, state.spec.producer);
  self->monitor(state.publisher);
  self->set_down_handler([self](const caf::down_msg&) {
    end_stream(self, self->state.writer,
               RpcStatus::relay_error(v1::RELAY_ERROR_REASON_PUBLICATION_UNAVAILABLE, "the pool generation is gone"));
  });
  if (state.pacing.encoders) {
    // The publisher ends the wait if the generation goes first (re-laid out, fenced, retired).
    self->send(state.publisher, atoms::waiting_atom_v, caf::actor_cast<PoolFrameSinkActor>(self),
               state.spec.producer.layout_generation());
    self->send(state.pacing.encoders, atoms::acquire_atom_v, caf::actor_cast<PermitHolderActor>(self));
  } else {
    join_publisher(self);
  }
  return {
      [=](const PoolSnapshotMsg& msg) { on_snapshot(self, msg); },
      [=](const PoolDeltaMsg& msg) { on_delta(self, msg); },
      [=](atoms::end_stream_atom, const RpcStatus& status) { end_stream(self, self->state.writer, status); },
      [=](atoms::write_done_atom, bool ok) {
        on_write_done(self, self->state.writer, ok, [self] { write_next(self); });
      },
      [=](atoms::cancelled_atom) { self->quit(); },
      [=](atoms::granted_atom) {
        self->state.permit_held = true;
        join_publisher(self);
      },
      [=](atoms::heartbeat_atom) { on_heartbeat_due(self); },
      [=](atoms::progress_atom, std::uint32_t chunk) { on_progress_due(self, chunk); },
      [=](atoms::sample_atom) { self->state.mailbox.sample(self); },
  };
}

}  // namespace kvrelay
