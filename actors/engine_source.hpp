#pragma once
// One engine KV-event source (docs/protocol/engine-sources.md): a dp rank's ZeroMQ publisher.
// The I/O thread hands it the messages; it orders them by the engine's seq (replaying or
// cold-resetting on gaps), decodes each batch into ingest events and sends them on as the
// source's own contiguous batches, exactly as a push feeder would: through its lane, straight
// to its pool's publisher (actors/source_lanes.hpp).
#include <caf/all.hpp>

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "actors/messages.hpp"
#include "actors/source_lanes.hpp"
#include "core/engine_events.hpp"
#include "core/engine_sequencer.hpp"
#include "ingest/zmq_io.hpp"
#include "metrics/relay_metrics.hpp"

namespace kvrelay {

struct EngineSourceConfig {
  SourceId source;
  ingest_v1::ZmqSource zmq;
  engine::DecoderConfig decoder;
  // Unique per source actor the relay starts: the high half of the epochs it sends, so a
  // replacement's batches never continue a predecessor's sequence.
  std::uint64_t incarnation = 0;
  std::chrono::milliseconds replay_timeout{5000};
  engine::HoldLimits held_during_replay;                  // live batches held while a replay runs
  std::size_t max_message_bytes = std::size_t{64} << 20;  // of one ZeroMQ frame
  std::size_t batches_in_flight = 16;                     // sent on and not yet answered
  engine_io::ZmqIo* io = nullptr;                         // outlives every source actor
  BatchRouter router;                                     // where its batches go: straight to the pool's publisher
  SourceLinksActor links;                                 // told of its connection (membership)
  std::shared_ptr<metrics::SourceStats> stats;            // never null
};

using EngineSourceActor =
    caf::typed_actor<caf::reacts_to<atoms::link_atom, bool>,                                      // from the I/O thread
                     caf::reacts_to<atoms::frames_atom, engine_io::MultipartPtr>,                 // from the I/O thread
                     caf::reacts_to<atoms::replay_atom, engine_io::MultipartPtr, std::uint64_t>,  // I/O thread
                     caf::reacts_to<atoms::replay_deadline_atom, std::uint64_t>,                  // its own timer
                     // a batch's outcome; false: the batch only carried a reset, the engine sent none
                     caf::reacts_to<atoms::outcome_atom, BatchOutcome, bool>,
                     caf::replies_to<atoms::get_state_atom>::with<ingest_v1::SourceState>,
                     caf::reacts_to<atoms::stop_atom>>;

// A batch numbered for the source's lane. Not from the engine: an empty one that only carries
// a reset to the pool, which the source's batch counts leave out.
struct SentBatch {
  std::shared_ptr<ingest_v1::KvEventBatch> batch;
  bool from_engine = true;
  std::int64_t receipt_ns = 0;  // when its message reached the relay (steady clock)
};

// A batch the engine published, held until the sequencer hands it out.
struct HeldBatch {
  engine_io::MultipartPtr frames;  // owns the payload's bytes
  engine::Frame payload;
  // When the message reached the relay: a batch held behind a replay or a link report still
  // counts its wait in kv_relay_event_to_wire_seconds.
  std::int64_t receipt_ns = 0;
};

struct EngineSourceState {
  EngineSourceConfig config;
  engine_io::ZmqIo::Id subscription = 0;
  std::optional<engine::Sequencer<HeldBatch>> sequencer;
  std::optional<engine::EventDecoder> decoder;
  bool connected = false;
  std::uint64_t resets = 0;          // since this actor started
  std::uint64_t next_sequence = 0;   // of the next batch sent on, in the current epoch
  std::uint64_t replay_attempt = 0;  // replays requested; the one a deadline or a reply belongs to
  std::size_t in_flight = 0;         // batches sent on and not yet answered
  std::size_t withheld_credit = 0;   // live messages whose credit waits for in_flight to fall
  // Connection reports membership has not answered yet: until it has, the source's lane may
  // not route to the pool this connection materializes, so batches wait here, in order.
  std::size_t links_unanswered = 0;
  std::vector<SentBatch> held_for_link;
  static inline const char* name = "engine-source";
};

EngineSourceActor::behavior_type engine_source(EngineSourceActor::stateful_pointer<EngineSourceState> self,
                                               EngineSourceConfig config);

}  // namespace kvrelay
