#include "actors/engine_source.hpp"

#include <spdlog/spdlog.h>

#include <utility>

#include "actors/crash_report.hpp"
#include "actors/pool_publisher.hpp"
#include "core/rate_limited_log.hpp"

namespace kvrelay {

namespace {

using Self = EngineSourceActor::stateful_pointer<EngineSourceState>;
using metrics::EngineBatchResult;
using metrics::EngineEventResult;

RateLimitedLog& engine_input_log() {
  static RateLimitedLog log;
  return log;
}

// Apart from the input log, so that a flood of bad batches cannot hide the resets.
RateLimitedLog& reset_log() {
  static RateLimitedLog log;
  return log;
}

std::string describe(const EngineSourceState& state) {
  return fmt::format("engine source {} worker={} rank={} ({})", state.config.source.endpoint.display(),
                     state.config.source.worker_id, state.config.source.dp_rank, state.config.zmq.endpoint());
}

void count(Self self, EngineBatchResult result) {
  self->state.config.stats->batches[result].fetch_add(1, std::memory_order_relaxed);
}

// A live message is done with: its credit goes back to the I/O thread unless its pool is
// behind, in which case it waits for the pool's answers (end-to-end flow control).
void release_credit(Self self) {
  auto& state = self->state;
  if (state.in_flight < state.config.batches_in_flight) {
    state.config.io->return_credit(state.subscription);
  } else {
    ++state.withheld_credit;
  }
}

ingest_v1::EndpointRef endpoint_ref(const EndpointKey& key) {
  ingest_v1::EndpointRef ref;
  ref.set_namespace_(key.ns);
  ref.set_component(key.component);
  ref.set_endpoint(key.endpoint);
  return ref;
}

// Hands a numbered batch to the source's lane; the outcome comes back as a message.
void hand_on(Self self, SentBatch sent) {
  auto reply = std::make_shared<Reply<BatchOutcome>>(
      [self = EngineSourceActor(self), from_engine = sent.from_engine](const BatchOutcome& outcome) {
        caf::anon_send(self, atoms::outcome_atom_v, outcome, from_engine);
      },
      BatchOutcome{.lost = true});
  self->state.config.router.route(
      {std::move(sent.batch), std::move(reply), sent.receipt_ns, SourceTransport::kZmq, self->address()});
}

// Numbers one batch as the source's next and hands it on, or holds it while a connection
// report is unanswered; an empty one only carries a reset. A held batch counts as in flight,
// so the I/O thread's credit bounds what is held too.
void send_on(Self self, SentBatch sent) {
  auto& state = self->state;
  auto& batch = sent.batch;
  *batch->mutable_endpoint() = endpoint_ref(state.config.source.endpoint);
  batch->set_worker_id(state.config.source.worker_id);
  batch->set_dp_rank(state.config.source.dp_rank);
  batch->set_source_epoch((state.config.incarnation << 32) | state.resets);
  batch->set_sequence(state.next_sequence++);
  ++state.in_flight;
  if (state.links_unanswered > 0) {
    state.held_for_link.push_back(std::move(sent));
  } else {
    hand_on(self, std::move(sent));
  }
}

void count_decode(Self self, const engine::DecodeResult& result) {
  auto& events = self->state.config.stats->events;
  for (std::size_t i = 0; i < result.rejected.size(); ++i) {
    events.elements[i].fetch_add(result.rejected[i], std::memory_order_relaxed);
  }
  events[EngineEventResult::kEmitted].fetch_add(result.emitted, std::memory_order_relaxed);
  events[EngineEventResult::kIgnoredTier].fetch_add(result.ignored, std::memory_order_relaxed);
  events[EngineEventResult::kTruncated].fetch_add(result.truncated, std::memory_order_relaxed);
  events[EngineEventResult::kIgnoredGroup].fetch_add(result.ignored_group, std::memory_order_relaxed);
}

void apply(Self self, const HeldBatch& held) {
  auto& state = self->state;
  auto batch = std::make_shared<ingest_v1::KvEventBatch>();
  const engine::DecodeResult result = state.decoder->decode(held.payload, *batch);
  count_decode(self, result);
  if (!result.detail.empty()) engine_input_log().warn(fmt::format("{}: {}", describe(state), result.detail));
  switch (result.batch) {
    case engine::DecodeResult::Batch::kMalformed:
      return count(self, EngineBatchResult::kMalformedPayload);
    case engine::DecodeResult::Batch::kOtherRank:
      return count(self, EngineBatchResult::kOtherRank);
    case engine::DecodeResult::Batch::kDecoded:
      break;
  }
  send_on(self, {std::move(batch), true, held.receipt_ns});
}

// The I/O thread numbers replays as they are requested, 1 for the first, as this does.
void request_replay(Self self, std::uint64_t from) {
  auto& state = self->state;
  const std::uint64_t attempt = ++state.replay_attempt;
  state.config.io->request_replay(state.subscription, state.config.zmq.replay_endpoint(), from);
  self->delayed_send(self, state.config.replay_timeout, atoms::replay_deadline_atom_v, attempt);
}

// Carries out what the sequencer decided, in its order.
void carry_out(Self self, engine::Sequencer<HeldBatch>::Step step) {
  auto& state = self->state;
  if (step.reset) {
    ++state.resets;
    state.next_sequence = 0;
    state.decoder->reset();
    state.config.stats->resets.elements[static_cast<std::size_t>(*step.reset)].fetch_add(1, std::memory_order_relaxed);
    reset_log().info(fmt::format("{}: cold reset ({})", describe(state), engine::to_string(*step.reset)));
  }
  if (step.cancel_replay) state.config.io->cancel_replay(state.subscription);
  if (step.gap) state.config.stats->gaps.fetch_add(1, std::memory_order_relaxed);
  if (step.request_replay) {
    state.config.stats->replays.fetch_add(1, std::memory_order_relaxed);
    request_replay(self, *step.request_replay);
  }
  state.config.stats->batches[EngineBatchResult::kSkipped].fetch_add(step.dropped, std::memory_order_relaxed);
  for (const HeldBatch& held : step.apply) apply(self, held);
  // A reset has to reach the pool now, not with the next batch: when none of the step's batches
  // was sent on (none, or none that decodes), an empty one carries it.
  if (step.reset && state.next_sequence == 0) {
    send_on(self, {std::make_shared<ingest_v1::KvEventBatch>(), false, steady_now_ns()});
  }
}

void on_frames(Self self, const engine_io::MultipartPtr& frames) {
  const auto views = frames->views();
  const auto message = engine::parse_live(views);
  if (!message) {
    count(self, EngineBatchResult::kMalformedFrames);
    engine_input_log().warn(fmt::format("{}: dropped a message: {}", describe(self->state), message.error()));
  } else {
    carry_out(self, self->state.sequencer->on_live(message->seq, HeldBatch{frames, message->payload, steady_now_ns()},
                                                   frames->bytes()));
  }
  release_credit(self);
}

// A reply of a replay given up late must not count against the one in flight: it is skipped.
void take_replay_reply(Self self, const engine_io::MultipartPtr& frames, bool of_replay_in_flight) {
  auto& sequencer = *self->state.sequencer;
  const auto views = frames->views();
  const auto message = engine::parse_replay(views);
  if (!message) {
    count(self, EngineBatchResult::kMalformedFrames);
    engine_input_log().warn(fmt::format("{}: dropped a replay reply: {}", describe(self->state), message.error()));
  } else if (message->seq == engine::kEndOfReplay) {
    if (of_replay_in_flight) carry_out(self, sequencer.on_replay_end());
  } else if (!of_replay_in_flight) {
    count(self, EngineBatchResult::kSkipped);
  } else {
    carry_out(self, sequencer.on_replay(message->seq, HeldBatch{frames, message->payload, steady_now_ns()}));
  }
}

void on_replay(Self self, const engine_io::MultipartPtr& frames, std::uint64_t attempt) {
  take_replay_reply(self, frames, attempt == self->state.replay_attempt);
  release_credit(self);
}

void on_outcome(Self self, const BatchOutcome& outcome, bool from_engine) {
  auto& state = self->state;
  --state.in_flight;
  if (from_engine) count(self, outcome.applied ? EngineBatchResult::kApplied : EngineBatchResult::kRefused);
  // The relay is this source's feeder: what a push feeder is asked to do after its pool's
  // rebuild, read the engine's cache again, this does (docs/protocol/engine-sources.md).
  if (outcome.reset == SourceReset::kNewGeneration) carry_out(self, state.sequencer->on_new_generation());
  while (state.withheld_credit > 0 && state.in_flight < state.config.batches_in_flight) {
    --state.withheld_credit;
    state.config.io->return_credit(state.subscription);
  }
}

// Tells membership whether the source is connected, and holds its batches until the answer:
// by then its lane names this actor and routes to the pool the connection may have
// materialized. Membership is linked to this actor, so an answer that cannot come (it
// failed) ends both, and the held batches with them.
void report_link(Self self) {
  auto& state = self->state;
  ++state.links_unanswered;
  self->request(state.config.links, caf::infinite, atoms::link_atom_v, state.config.source, state.connected)
      .then([self] {
        auto& state = self->state;
        if (--state.links_unanswered > 0) return;
        for (auto& sent : std::exchange(state.held_for_link, {})) hand_on(self, std::move(sent));
      });
}

void on_link(Self self, bool connected) {
  auto& state = self->state;
  if (state.connected == connected) return;
  state.connected = connected;
  state.config.stats->connected.store(connected ? 1 : 0, std::memory_order_relaxed);
  spdlog::info("{}: {}", describe(state), connected ? "connected" : "disconnected");
  report_link(self);
}

ingest_v1::SourceState source_state(const EngineSourceState& state) {
  ingest_v1::SourceState out;
  out.set_worker_id(state.config.source.worker_id);
  out.set_dp_rank(state.config.source.dp_rank);
  out.set_transport("zmq");
  out.set_connected(state.connected);
  out.set_endpoint(state.config.zmq.endpoint());
  if (const auto last = state.sequencer->last_seq()) {
    out.set_has_last_sequence(true);
    out.set_last_sequence(*last);
  }
  out.set_resets(state.resets);
  return out;
}

engine_io::SourceCallbacks callbacks(Self self) {
  EngineSourceActor handle(self);
  return {
      [handle](bool connected) { caf::anon_send(handle, atoms::link_atom_v, connected); },
      [handle](engine_io::MultipartPtr frames) { caf::anon_send(handle, atoms::frames_atom_v, std::move(frames)); },
      [handle](engine_io::MultipartPtr frames, std::uint64_t attempt) {
        caf::anon_send(handle, atoms::replay_atom_v, std::move(frames), attempt);
      },
  };
}

}  // namespace

EngineSourceActor::behavior_type engine_source(Self self, EngineSourceConfig config) {
  auto& state = self->state;
  state.config = std::move(config);
  state.sequencer.emplace(!state.config.zmq.replay_endpoint().empty(), state.config.held_during_replay);
  state.decoder.emplace(state.config.decoder);
  report_crashes(self, "engine-source");
  engine_io::SubscriptionConfig subscription{state.config.zmq.endpoint(), state.config.zmq.topic()};
  subscription.credit = state.config.batches_in_flight;
  subscription.max_message_bytes = static_cast<std::int64_t>(state.config.max_message_bytes);
  state.subscription = state.config.io->subscribe(std::move(subscription), callbacks(self));
  self->attach_functor([io = state.config.io, id = state.subscription] { io->unsubscribe(id); });
  // Membership spawned this actor while re-pointing lanes: once it answers this first report,
  // the source's lane names this actor, so even a batch read before the connection report
  // (frames may overtake it) is not refused as a predecessor's.
  report_link(self);
  return {
      [=](atoms::link_atom, bool connected) {
        // The reset goes ahead of the report: if this was the last source of its endpoint,
        // membership withdraws the pool, and the reset must reach it first.
        if (!connected && self->state.connected) carry_out(self, self->state.sequencer->on_disconnect());
        on_link(self, connected);
      },
      [=](atoms::frames_atom, const engine_io::MultipartPtr& frames) { on_frames(self, frames); },
      [=](atoms::replay_atom, const engine_io::MultipartPtr& frames, std::uint64_t attempt) {
        on_replay(self, frames, attempt);
      },
      [=](atoms::replay_deadline_atom, std::uint64_t attempt) {
        if (attempt == self->state.replay_attempt) carry_out(self, self->state.sequencer->on_replay_timeout());
      },
      [=](atoms::outcome_atom, const BatchOutcome& outcome, bool from_engine) {
        on_outcome(self, outcome, from_engine);
      },
      [=](atoms::get_state_atom) { return source_state(self->state); },
      [=](atoms::stop_atom) {
        // Its pool forgets the source through membership, which hears it is gone.
        if (self->state.connected) on_link(self, false);
        self->quit();
      },
  };
}

}  // namespace kvrelay
