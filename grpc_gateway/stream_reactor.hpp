#pragma once
// A server stream as seen from its stream actor: StreamLink implements StreamSink over a
// ServerWriteReactor. The link outlives the reactor (gRPC deletes the reactor in OnDone) and
// decides every call into it under its mutex, so a late write or finish from the actor is
// harmless; the calls themselves are made with no lock held (see StreamLink).
#include <absl/base/thread_annotations.h>
#include <absl/synchronization/mutex.h>
#include <grpcpp/grpcpp.h>
#include <caf/all.hpp>

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>

#include "actors/messages.hpp"
#include "core/rate_limited_log.hpp"
#include "grpc_gateway/status.hpp"
#include "grpc_gateway/wire_write.hpp"
#include "metrics/relay_metrics.hpp"

namespace kvrelay::gateway {

// What a stream lets go of as it ends. `ended` runs once, with how it ended (open-stream gauges,
// the lifecycle log line), just before Finish. `held` (its admission permits) is let go only
// when gRPC is done with the call: a client that stopped reading receives its final status once
// it reads again, and until then the call keeps its last frame in the transport's buffers, so
// returning the permit at Finish would let such calls pile up without bound
// (docs/protocol/limits.md#admission-limits).
using StreamEnded = std::function<void(const RpcStatus&)>;
struct StreamRelease {
  StreamEnded ended;
  std::shared_ptr<const void> held;
};

// Every stream writes bytes serialized once and shared (grpc_gateway/wire_write.hpp).
using RawStream = grpc::ServerWriteReactor<grpc::ByteBuffer>;

// Threads. write() and finish() come from the stream actor, one call at a time, with at most
// one write outstanding (StreamSink's contract). bind() comes from the RPC method handler,
// once, before it returns the reactor. actor_stopped() comes once, as the actor terminates: from
// its last thread, or from bind() if it had already stopped. on_write_done(), on_cancel() and
// on_done() come from gRPC threads (OnWriteDone, OnCancel, OnDone): the first two may run
// concurrently with each other and with the actor; OnDone runs after every other reaction has
// returned.
//
// Locking. mutex_ is a plain absl::Mutex and guards every mutable member (annotated below;
// metrics_ is set once). It is never held while calling out: each entry point decides under it
// what to do, then does it -- StartWrite, Finish, caf::anon_send, the release callback, the
// frame metric -- after unlocking. So a reaction gRPC runs inline from StartWrite or Finish,
// or a release callback that comes back here, may take it again. No other lock is taken while
// it is held, so there is no lock order to keep.
//
// Calls into the reactor. One thread at a time calls the reactor: issue() claims `issuing_`,
// then runs the steps the state wants (StartWrite of the frame write() handed over, or
// Finish), re-deciding under the lock after each call. A thread that finds `issuing_` taken
// only records what it wants; the issuing thread sees it when its call returns. Finish is the
// last step: `issuing_` then stays set, and the link never touches the reactor or the context
// again. Why this is safe against OnDone deleting the reactor concurrently (gRPC 1.51 callback
// API, grpcpp/impl/codegen/server_callback_handlers.h and server_callback.h):
//  * OnDone runs only when the method handler has returned, Finish was called and completed,
//    the call is over (ended or cancelled), and every StartWrite has seen its OnWriteDone: the
//    library holds a reference for each. So until the link issues Finish, the reactor and the
//    context are alive; a StartWrite issued before Finish is safe, and so is to_grpc(context)
//    just before Finish (gRPC releases the context only after OnDone).
//  * Once Finish is issued, OnDone may run at any moment on another thread (never inline from
//    Finish: its completion schedules OnDone on the executor), hence nothing after Finish.
//  * Serialising the calls is required, not a convenience: gRPC forbids StartWrite after
//    Finish, and Write and Finish on one call are not safe concurrently (both fill in the
//    call's initial metadata). A Finish wanted while a StartWrite is on its way (OnCancel
//    racing the actor) is issued by the writing thread as soon as its StartWrite returns.
//
// The `ended` callback runs exactly once, outside the lock: taken together with the Finish step
// and run by the issuing thread just before Finish (so the end is counted before the client can
// see the status), or by on_done if Finish never came (gRPC requires Finish before OnDone, so
// only as a safety net). What the release holds is dropped in on_done, outside the lock.
//
// Messages to the actor (write_done, cancelled) are sent after unlocking by the thread whose
// reaction (or bind) produced them, each exactly once. A write completion or cancellation
// reported by bind() may therefore reach the actor after a later one; the stream actor handles
// write_done and cancelled in either order (cancelled ends it).
template <class Message>
class StreamLink final : public StreamSink<Message>, public std::enable_shared_from_this<StreamLink<Message>> {
 public:
  // `metrics` (may be null) counts every frame handed to the transport.
  StreamLink(grpc::CallbackServerContext* context, RawStream* reactor, StreamRelease release,
             metrics::RelayMetrics* metrics)
      : metrics_(metrics),
        context_(context),
        reactor_(reactor),
        ended_(std::move(release.ended)),
        held_(std::move(release.held)) {}

  // Set once the stream actor exists. The actor may already have written (a pool stream
  // attaches to its publisher as soon as it starts): a write completion or a cancellation
  // that came first is delivered now. From here the link also watches the actor: one that
  // stops without ending its call (a handler threw) ends it through actor_stopped().
  void bind(StreamTransportActor actor) ABSL_LOCKS_EXCLUDED(mutex_) {
    std::optional<bool> write_done;
    bool cancelled = false;
    {
      absl::MutexLock lock(&mutex_);
      actor_ = actor;
      write_done = std::exchange(unreported_write_done_, std::nullopt);
      cancelled = cancelled_;
    }
    if (write_done) caf::anon_send(actor, atoms::write_done_atom_v, *write_done);
    if (cancelled) caf::anon_send(actor, atoms::cancelled_atom_v);
    actor->attach_functor([link = this->shared_from_this()](const caf::error& reason) { link->actor_stopped(reason); });
  }

  // The stream actor stopped. Every stream actor ends or sees the end of its call before it
  // stops cleanly, so a call still open here was abandoned by a failure: the client would wait
  // on it, and its permits stay held, until it gave up. It ends PUBLICATION_UNAVAILABLE (the
  // client subscribes again), and the failure is logged.
  void actor_stopped(const caf::error& reason) ABSL_LOCKS_EXCLUDED(mutex_) {
    const std::string why = reason ? caf::to_string(reason) : "no error";
    {
      absl::MutexLock lock(&mutex_);
      if (finished_) return;
      want_finish_locked(RpcStatus::relay_error(v1::RELAY_ERROR_REASON_PUBLICATION_UNAVAILABLE,
                                                "the relay's stream for this call stopped: " + why));
    }
    static RateLimitedLog abandoned;
    abandoned.error("a stream actor stopped with its call open (ended PUBLICATION_UNAVAILABLE): " + why);
    issue();
  }

  void write(std::shared_ptr<const Message> message, bool more_queued) ABSL_LOCKS_EXCLUDED(mutex_) override {
    auto write = std::make_shared<const WireWrite>(wire_write(message));
    {
      absl::MutexLock lock(&mutex_);
      if (finished_) return;  // the stream is ending: nothing more goes out
      next_write_ = std::move(write);
      next_write_buffered_ = more_queued;
    }
    issue();
  }

  void finish(RpcStatus status) ABSL_LOCKS_EXCLUDED(mutex_) override {
    {
      absl::MutexLock lock(&mutex_);
      want_finish_locked(std::move(status));
    }
    issue();
  }

  // ---- reactions, on gRPC threads ----
  void on_write_done(bool ok) ABSL_LOCKS_EXCLUDED(mutex_) {
    std::shared_ptr<const WireWrite> written;  // released after unlocking
    StreamTransportActor actor;
    {
      absl::MutexLock lock(&mutex_);
      written = std::move(in_flight_);
      if (actor_) {
        actor = actor_;
      } else {
        unreported_write_done_ = ok;
      }
    }
    if (actor) caf::anon_send(actor, atoms::write_done_atom_v, ok);
  }
  void on_cancel() ABSL_LOCKS_EXCLUDED(mutex_) {
    StreamTransportActor actor;
    {
      absl::MutexLock lock(&mutex_);
      cancelled_ = true;
      actor = actor_;
      want_finish_locked(RpcStatus{StatusCode::kCancelled, "cancelled by the client", {}});
    }
    issue();
    if (actor) caf::anon_send(actor, atoms::cancelled_atom_v);
  }
  void on_done() ABSL_LOCKS_EXCLUDED(mutex_) {
    StreamEnded ended;
    std::shared_ptr<const void> held;
    {
      absl::MutexLock lock(&mutex_);
      finished_ = true;
      reactor_ = nullptr;
      context_ = nullptr;
      ended = std::exchange(ended_, nullptr);
      held = std::exchange(held_, nullptr);
    }
    if (ended) ended(RpcStatus{StatusCode::kCancelled, "the call ended", {}});
    held.reset();  // the permits come back now that the call is over
  }

 private:
  // One call into the reactor, decided under the lock and made after it.
  struct Step {
    enum Kind { kNone, kWrite, kFinish } kind = kNone;
    RawStream* reactor = nullptr;
    grpc::CallbackServerContext* context = nullptr;
    std::shared_ptr<const WireWrite> write;  // kWrite (alive across the call even if OnWriteDone came first)
    bool buffered = false;                   // kWrite: more frames follow, flush with a later one
    RpcStatus status;                        // kFinish
    StreamEnded ended;                       // kFinish: runs just before Finish (empty if already run)
  };

  // Makes the calls into the reactor that the state wants, unless another thread is making
  // them already (that thread re-decides after each call, so it sees what the caller recorded).
  void issue() ABSL_LOCKS_EXCLUDED(mutex_) {
    bool claimed = false;
    for (;;) {
      Step step;
      {
        absl::MutexLock lock(&mutex_);
        if (!claimed) {
          if (issuing_) return;
          issuing_ = claimed = true;
        }
        step = next_step_locked();
        if (step.kind == Step::kNone) {
          issuing_ = false;
          return;
        }
      }
      if (step.kind == Step::kWrite) {
        if (metrics_ != nullptr) metrics_->frame_sent(step.write->kind(), step.write->bytes());
        grpc::WriteOptions options;
        if (step.buffered) options.set_buffer_hint();  // flushed with the next write that has no hint
        step.reactor->StartWrite(step.write->wire(), options);
        continue;
      }
      // The last call: `issuing_` stays set, and the reactor may be deleted from here on.
      if (step.ended) step.ended(step.status);
      step.reactor->Finish(to_grpc(step.context, step.status));
      return;
    }
  }

  Step next_step_locked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_) {
    Step step;
    if (reactor_ == nullptr) return step;  // OnDone ran (unreachable: Finish came first)
    step.reactor = reactor_;
    step.context = context_;
    if (finish_status_) {
      step.kind = Step::kFinish;
      step.status = std::move(*finish_status_);
      finish_status_.reset();
      step.ended = std::exchange(ended_, nullptr);
    } else if (next_write_) {
      step.kind = Step::kWrite;
      in_flight_ = std::exchange(next_write_, nullptr);
      step.write = in_flight_;
      step.buffered = next_write_buffered_;
    }
    return step;
  }

  // Once per stream: no frame goes out after this, and Finish is the next call into the reactor.
  void want_finish_locked(RpcStatus status) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_) {
    if (finished_) return;
    finished_ = true;
    finish_status_ = std::move(status);
    next_write_.reset();  // a frame not yet handed to gRPC stays unsent
  }

  metrics::RelayMetrics* const metrics_;  // set once; the recorder is thread-safe

  absl::Mutex mutex_;
  grpc::CallbackServerContext* context_ ABSL_GUARDED_BY(mutex_);         // null once OnDone ran
  RawStream* reactor_ ABSL_GUARDED_BY(mutex_);                           // null once OnDone ran
  StreamEnded ended_ ABSL_GUARDED_BY(mutex_);                            // empty once taken to run
  std::shared_ptr<const void> held_ ABSL_GUARDED_BY(mutex_);             // until OnDone
  StreamTransportActor actor_ ABSL_GUARDED_BY(mutex_);                   // the stream actor, from bind()
  std::shared_ptr<const WireWrite> next_write_ ABSL_GUARDED_BY(mutex_);  // from write(), not yet issued
  bool next_write_buffered_ ABSL_GUARDED_BY(mutex_) = false;
  std::shared_ptr<const WireWrite> in_flight_ ABSL_GUARDED_BY(mutex_);  // kept alive until OnWriteDone
  std::optional<bool> unreported_write_done_ ABSL_GUARDED_BY(mutex_);   // a completion that came before bind()
  std::optional<RpcStatus> finish_status_ ABSL_GUARDED_BY(mutex_);      // Finish wanted, not yet issued
  bool finished_ ABSL_GUARDED_BY(mutex_) = false;                       // Finish wanted (or OnDone ran): no more frames
  bool cancelled_ ABSL_GUARDED_BY(mutex_) = false;  // the client cancelled (reported on bind if unbound)
  bool issuing_ ABSL_GUARDED_BY(mutex_) = false;    // a thread is calling the reactor; set for good after Finish
};

// The reactor gRPC drives; each reaction goes to the link, which holds all the state (and its
// lock). OnDone tells the link first, so the link calls nothing on a deleted reactor.
template <class Message>
class StreamReactor final : public RawStream {
 public:
  StreamReactor(grpc::CallbackServerContext* context, StreamRelease release, metrics::RelayMetrics* metrics)
      : link_(std::make_shared<StreamLink<Message>>(context, this, std::move(release), metrics)) {}

  const std::shared_ptr<StreamLink<Message>>& link() const { return link_; }

  void OnWriteDone(bool ok) override { link_->on_write_done(ok); }
  void OnCancel() override { link_->on_cancel(); }
  void OnDone() override {
    link_->on_done();
    delete this;
  }

 private:
  std::shared_ptr<StreamLink<Message>> link_;
};

}  // namespace kvrelay::gateway
