#pragma once
// One actor per open server stream, bridging a publisher to a StreamSink. Catalog and
// readiness streams carry "latest value" watches: they coalesce and never lag. Load
// streams have a bounded outbox; overflow ends that stream alone as lagged. (Pool streams,
// which also carry a snapshot, are in pool_stream.hpp.)
#include <fmt/format.h>
#include <caf/all.hpp>

#include <string>

#include "actors/crash_report.hpp"
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
void end_stream(Self self, StreamWriter<Message>& writer, RpcStatus status) {
  writer.finish(std::move(status));
  self->quit();
}

// The transport's side of every stream actor: a write completed (ok) or failed (the client
// is gone); `write_next` hands the sink the next queued frame, if any.
template <class Self, class Message, class WriteNext>
void on_write_done(Self self, StreamWriter<Message>& writer, bool ok, WriteNext write_next) {
  if (!ok) return end_stream(self, writer, RpcStatus{StatusCode::kCancelled, "write failed", {}});
  writer.write_done();
  write_next();
}

// A watch stream subscribes itself to its source and ends if the source goes away first: a
// stream never waits for updates that cannot come. `plane` names the publication in the
// status ("serving load publication stopped").
template <class Self, class Message>
void follow_source(Self self, StreamWriter<Message>& writer, const UpdateSourceActor<Message>& source,
                   const std::string& plane) {
  self->monitor(source);
  self->set_down_handler([self, &writer, stopped = plane + " publication stopped"](const caf::down_msg&) {
    end_stream(self, writer, RpcStatus::relay_error(v1::RELAY_ERROR_REASON_PUBLICATION_UNAVAILABLE, stopped));
  });
  self->send(source, atoms::subscribe_atom_v, caf::actor_cast<UpdateStreamActor<Message>>(self));
}

// ---- latest-value streams (catalog, readiness) ----

template <class Message>
using LatestValueStreamActor = UpdateStreamActor<Message>::template extend_with<StreamTransportActor>::template extend<
    caf::reacts_to<atoms::heartbeat_atom>,  // its heartbeat timer
    caf::reacts_to<atoms::sample_atom>>;    // its mailbox sampling timer

template <class Message>
struct LatestValueStreamState {
  StreamWriter<Message> writer;
  std::shared_ptr<const Message> unsent;  // the newest update not yet handed to the sink
  std::shared_ptr<const Message> latest;  // the newest update received: what a heartbeat re-sends
  FixedSchedule heartbeat;
  MailboxSampler mailbox;
  static inline const char* name = "latest-value-stream";
};

template <class Message>
void write_unsent(
    typename LatestValueStreamActor<Message>::template stateful_pointer<LatestValueStreamState<Message>> self) {
  auto& state = self->state;
  if (state.unsent && state.writer.ready()) state.writer.write(std::move(state.unsent));
}

// With a non-zero `heartbeat`, the latest update is re-sent (same revision) on a fixed
// schedule from the stream's start, not reset by change-driven sends. `mailbox_depth` (may be
// null) receives the sampled mailbox depth.
template <class Message>
typename LatestValueStreamActor<Message>::behavior_type latest_value_stream(
    typename LatestValueStreamActor<Message>::template stateful_pointer<LatestValueStreamState<Message>> self,
    StreamSinkPtr<Message> sink, UpdateSourceActor<Message> source, std::string plane,
    std::chrono::milliseconds heartbeat, prometheus::Gauge* mailbox_depth) {
  report_crashes(self, plane + " stream");
  self->state.writer.attach(std::move(sink));
  self->state.mailbox.start(self, mailbox_depth);
  if (heartbeat.count() > 0) self->state.heartbeat.start(self, heartbeat, atoms::heartbeat_atom_v);
  follow_source(self, self->state.writer, source, plane);
  return {
      [=](atoms::update_atom, std::shared_ptr<const Message> update) {
        self->state.latest = update;
        self->state.unsent = std::move(update);
        write_unsent<Message>(self);
      },
      [=](atoms::end_stream_atom, const RpcStatus& status) { end_stream(self, self->state.writer, status); },
      [=](atoms::write_done_atom, bool ok) {
        on_write_done(self, self->state.writer, ok, [self] { write_unsent<Message>(self); });
      },
      [=](atoms::cancelled_atom) { self->quit(); },
      [=](atoms::heartbeat_atom) {
        auto& state = self->state;
        if (!state.unsent) state.unsent = state.latest;
        write_unsent<Message>(self);
        state.heartbeat.rearm(self, atoms::heartbeat_atom_v);
      },
      [=](atoms::sample_atom) { self->state.mailbox.sample(self); },
  };
}

// ---- bounded streams (load windows) ----

template <class Message>
using BoundedStreamActor = UpdateStreamActor<Message>::template extend_with<StreamTransportActor>::template extend<
    caf::reacts_to<atoms::sample_atom>>;  // its mailbox sampling timer

template <class Message>
struct BoundedStreamState {
  StreamWriter<Message> writer;
  Outbox<Message> outbox;
  MailboxSampler mailbox;
  static inline const char* name = "bounded-stream";
};

template <class Message>
void write_queued(typename BoundedStreamActor<Message>::template stateful_pointer<BoundedStreamState<Message>> self) {
  auto& state = self->state;
  if (state.outbox.empty() || !state.writer.ready()) return;
  auto next = state.outbox.pop();
  state.writer.write(std::move(next), !state.outbox.empty());
}

// A client more windows behind than `limits` allows ends SUBSCRIBER_LAGGED, counting the
// windows it has not received: those queued and the one that did not fit.
template <class Message>
typename BoundedStreamActor<Message>::behavior_type bounded_stream(
    typename BoundedStreamActor<Message>::template stateful_pointer<BoundedStreamState<Message>> self,
    StreamSinkPtr<Message> sink, UpdateSourceActor<Message> source, std::string plane, OutboxLimits limits,
    prometheus::Gauge* mailbox_depth) {
  report_crashes(self, plane + " stream");
  self->state.writer.attach(std::move(sink));
  self->state.mailbox.start(self, mailbox_depth);
  self->state.outbox = Outbox<Message>(limits);
  follow_source(self, self->state.writer, source, plane);
  return {
      [=](atoms::update_atom, std::shared_ptr<const Message> update) {
        const std::size_t bytes = update->bytes().size();
        if (!self->state.outbox.push(std::move(update), bytes)) {
          return end_stream(
              self, self->state.writer,
              RpcStatus::relay_error(v1::RELAY_ERROR_REASON_SUBSCRIBER_LAGGED,
                                     fmt::format("{} subscriber lagged by {} complete windows; resubscribe", plane,
                                                 self->state.outbox.size() + 1)));
        }
        write_queued<Message>(self);
      },
      [=](atoms::end_stream_atom, const RpcStatus& status) { end_stream(self, self->state.writer, status); },
      [=](atoms::write_done_atom, bool ok) {
        on_write_done(self, self->state.writer, ok, [self] { write_queued<Message>(self); });
      },
      [=](atoms::cancelled_atom) { self->quit(); },
      [=](atoms::sample_atom) { self->state.mailbox.sample(self); },
  };
}

}  // namespace kvrelay
