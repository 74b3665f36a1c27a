#pragma once
// One actor per open server stream, bridging a publisher to a StreamSink. Catalog and
// readiness streams carry "latest value" watches: they coalesce and never lag. Load
// streams have a bounded outbox; overflow ends that stream alone as lagged. (Pool streams,
// which also carry a snapshot, are in pool_stream.hpp.)
#include <caf/all.hpp>

#include "actors/mailbox_sampler.hpp"
#include "actors/messages.hpp"
#include "actors/outbox.hpp"
#include "actors/schedule.hpp"

namespace kvrelay {

// The transport side of a stream actor: one write in flight at a time, finish once.
template <class Message>
class StreamWriter {
 public:
  void attach(StreamSinkPtr<Message> sink) { sink_ = std::move(sink); }

  bool ready() const { return !writing_ && !finished_; }
  void write(std::shared_ptr<const Message> message, bool more_queued = false) {
    writing_ = true;
    sink_->write(std::move(message), more_queued);
  }
  void write_done() { writing_ = false; }
  void finish(RpcStatus status) {
    if (finished_) return;
    finished_ = true;
    sink_->finish(std::move(status));
  }

 private:
  StreamSinkPtr<Message> sink_;
  bool writing_ = false;
  bool finished_ = false;
};

// Ends the stream with `status` and stops the actor.
template <class Self, class Message>
void end_stream(Self* self, StreamWriter<Message>& writer, RpcStatus status) {
  writer.finish(std::move(status));
  self->quit();
}

// The transport's side of every stream actor: write completions, cancellation, and an
// owner ending the stream. `write_next` hands the sink the next queued frame, if any.
template <class Self, class Message, class WriteNext>
caf::message_handler transport_handlers(Self* self, StreamWriter<Message>& writer, WriteNext write_next) {
  return {
      [self, &writer, write_next](atoms::write_done_atom, bool ok) {
        if (!ok) return end_stream(self, writer, RpcStatus{StatusCode::kCancelled, "write failed", {}});
        writer.write_done();
        write_next();
      },
      [self](atoms::cancelled_atom) { self->quit(); },
      [self, &writer](atoms::end_stream_atom, RpcStatus status) { end_stream(self, writer, std::move(status)); },
  };
}

inline RpcStatus lagged_status() {
  return RpcStatus::relay_error(v1::RELAY_ERROR_REASON_SUBSCRIBER_LAGGED,
                                "subscriber fell behind its bounded stream queue");
}

// ---- latest-value streams (catalog, readiness) ----

template <class Message>
struct LatestValueStreamState {
  StreamWriter<Message> writer;
  std::shared_ptr<const Message> unsent;  // the newest update not yet handed to the sink
  std::shared_ptr<const Message> latest;  // the newest update received: what a heartbeat re-sends
  FixedSchedule heartbeat;
  MailboxSampler mailbox;
  static inline const char* name = "latest-value-stream";
};

// With a non-zero `heartbeat`, the latest update is re-sent (same revision) on a fixed
// schedule from the stream's start, not reset by change-driven sends. `mailbox_depth` (may
// be null) receives the sampled mailbox depth.
template <class Message>
caf::behavior latest_value_stream(caf::stateful_actor<LatestValueStreamState<Message>>* self,
                                  StreamSinkPtr<Message> sink, std::chrono::milliseconds heartbeat,
                                  prometheus::Gauge* mailbox_depth) {
  self->state.writer.attach(std::move(sink));
  self->state.mailbox.start(self, mailbox_depth);
  if (heartbeat.count() > 0) self->state.heartbeat.start(self, heartbeat, atoms::heartbeat_atom_v);
  auto write_unsent = [self] {
    auto& state = self->state;
    if (state.unsent && state.writer.ready()) state.writer.write(std::move(state.unsent));
  };
  caf::message_handler updates{
      [=](atoms::update_atom, std::shared_ptr<const Message> update) {
        self->state.latest = update;
        self->state.unsent = std::move(update);
        write_unsent();
      },
      [=](atoms::heartbeat_atom) {
        auto& state = self->state;
        if (!state.unsent) state.unsent = state.latest;
        write_unsent();
        state.heartbeat.rearm(self, atoms::heartbeat_atom_v);
      },
      [=](atoms::sample_atom) { self->state.mailbox.sample(self); },
  };
  return updates.or_else(transport_handlers(self, self->state.writer, write_unsent));
}

// ---- bounded streams (load windows) ----

template <class Message>
struct BoundedStreamState {
  StreamWriter<Message> writer;
  Outbox<Message> outbox;
  MailboxSampler mailbox;
  static inline const char* name = "bounded-stream";
};

template <class Message>
caf::behavior bounded_stream(caf::stateful_actor<BoundedStreamState<Message>>* self,
                             StreamSinkPtr<Message> sink, OutboxLimits limits, prometheus::Gauge* mailbox_depth) {
  self->state.writer.attach(std::move(sink));
  self->state.mailbox.start(self, mailbox_depth);
  self->state.outbox = Outbox<Message>(limits);
  auto write_next = [self] {
    auto& state = self->state;
    if (state.outbox.empty() || !state.writer.ready()) return;
    auto next = state.outbox.pop();
    state.writer.write(std::move(next), !state.outbox.empty());
  };
  caf::message_handler updates{
      [=](atoms::update_atom, std::shared_ptr<const Message> update) {
        const std::size_t bytes = update->ByteSizeLong();
        if (!self->state.outbox.push(std::move(update), bytes)) {
          return end_stream(self, self->state.writer, lagged_status());
        }
        write_next();
      },
      [=](atoms::sample_atom) { self->state.mailbox.sample(self); },
  };
  return updates.or_else(transport_handlers(self, self->state.writer, write_next));
}

}  // namespace kvrelay
