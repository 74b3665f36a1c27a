#pragma once
// A client-streaming reactor that forwards each request to an actor and reads at most
// `window` requests ahead of their acknowledgements, so a fast producer cannot flood an
// actor's mailbox. Acknowledgements arrive on actor threads through a Gate that outlives
// the reactor (gRPC deletes the reactor in OnDone, possibly before late acks). What the stream
// holds (its admission permit) the Gate lets go once the stream has finished and every request
// it forwarded was answered: a stream that ends early (cancelled, or a request that ends it)
// does not leave up to `window` requests in an actor's mailbox while the client that sent
// them is admitted again.
#include <absl/base/thread_annotations.h>
#include <absl/synchronization/mutex.h>
#include <google/protobuf/arena.h>
#include <grpcpp/grpcpp.h>

#include <cstddef>
#include <memory>
#include <optional>
#include <utility>

#include "grpc_gateway/status.hpp"

namespace kvrelay::gateway {

// A message in an arena of its own, handed on shared: releasing a batch of a few hundred
// submessages (on whichever actor thread drops it last) is a few block frees, not one per
// submessage.
template <class Message>
std::shared_ptr<Message> make_arena_message() {
  google::protobuf::ArenaOptions options;
  options.start_block_size = 4096;
  auto arena = std::make_shared<google::protobuf::Arena>(options);
  Message* message = google::protobuf::Arena::CreateMessage<Message>(arena.get());
  return std::shared_ptr<Message>(std::move(arena), message);
}

// Where a WindowedReader's read lands: the request's bytes, parsed here rather than by gRPC.
// gRPC reports a request that does not parse (a string field that is not UTF-8, bytes of
// another schema) exactly as the client's end of the stream, so a stream would end OK with the
// rest of its requests unread; parsed here, that request is one the reader can refuse.
template <class Request>
class ParsedRequests {
 public:
  using Handed = std::shared_ptr<const Request>;  // null: the bytes did not parse
  grpc::ByteBuffer* target() { return &bytes_; }
  Handed take() {
    auto request = make_arena_message<Request>();
    const bool parsed = read_message(bytes_, *request);
    bytes_.Clear();
    if (!parsed) return nullptr;
    return request;
  }
  // A read the reader will not apply: dropped unparsed.
  void discard() { bytes_.Clear(); }

 private:
  grpc::ByteBuffer bytes_;
};

// Threads. start() comes from the RPC method handler, once, before it returns the reactor.
// OnReadDone, OnCancel and OnDone come from gRPC threads: OnReadDone and OnCancel may run
// concurrently with each other and with acknowledgements; OnDone runs after every other
// reaction has returned. forward() runs on the thread of the OnReadDone that read the request
// (one at a time: the next read starts only after it returns) and may acknowledge on that
// same thread. Gate::acknowledge -- and so acknowledged() and tally() -- runs on any thread.
//
// Locking. Two plain absl::Mutexes, never held across a call out. Gate::mutex_ is taken under
// mutex_ only to count a request being forwarded, and mutex_ never under Gate::mutex_:
//  * Gate::mutex_ guards the gate's reader pointer, how many acknowledgements are inside
//    the reader, and what the stream holds with the count of requests not yet answered.
//    acknowledge() counts its answer, counts itself in and calls the reader with the lock
//    released; detach() (OnDone, just before `delete this`) clears the pointer and waits until
//    none is inside. So no acknowledgement reaches a deleted reader, and a late one is
//    dropped, though still counted. What the stream holds is let go outside the lock.
//  * mutex_ guards the window state (annotated below). tally(), early_status() and respond()
//    run under it: they only bookkeep in the response (respond() serializes it into the
//    call's buffer), and an override must keep it that way (no blocking, no call back into the
//    reader, no call into a gRPC call object). forward() runs without it.
//  `requests_` is not under mutex_: it belongs to the outstanding read (see below).
//
// Calls into gRPC (StartRead, Finish) are decided under mutex_ and made after unlocking, by
// one thread at a time: issue() claims `issuing_` and re-decides under the lock after each
// call; a thread that finds it taken only records its change, which the issuing thread then
// sees. Finish is the last call: `issuing_` stays set after it and the reader calls nothing
// more. This is safe against OnDone (gRPC 1.51 callback API): OnDone runs only when the method
// handler has returned, Finish was called and completed, the call is over, and every StartRead
// has seen its OnReadDone; so until the reader issues Finish, StartRead is valid. StartRead
// and Finish are never concurrent: gRPC forbids StartRead after Finish, and a Finish racing a
// StartRead on its way could let OnDone delete the reader under it. A thread that made a call
// may touch the reader when the call returns: it is the method handler or a reaction (OnDone
// comes only after they return), or an acknowledgement (OnDone waits for it in Gate::detach;
// gRPC never runs OnDone inline from StartRead or Finish, so that wait is never on the
// acknowledging thread itself). The wait is short: OnDone comes after Finish, when an
// acknowledgement inside the reader has only its tally or the return from Finish left to do.
//
// Order: `reading_` stays set until forward() returns, so the next read starts only after the
// previous request was forwarded, and requests reach the actor in the order they were read.
template <class Request, class Outcome>
class WindowedReader : public grpc::ServerReadReactor<grpc::ByteBuffer> {
 public:
  class Gate {
   public:
    Gate(WindowedReader* reader, std::shared_ptr<const void> held) : reader_(reader), held_(std::move(held)) {}

    // Any thread: hands `outcome` to the reader, or drops it if the reader is gone.
    void acknowledge(const Outcome& outcome) ABSL_LOCKS_EXCLUDED(mutex_) {
      std::shared_ptr<const void> released;  // let go after the lock
      WindowedReader* reader = nullptr;
      {
        absl::MutexLock lock(&mutex_);
        // Counted before the reader sees it: when the reader finishes, every answer it has
        // tallied is counted here.
        --unanswered_;
        released = release_if_over();
        if (reader_ == nullptr) return;
        reader = reader_;
        ++inside_;
      }
      reader->acknowledged(outcome);
      absl::MutexLock lock(&mutex_);
      --inside_;
    }

    // The reader's OnDone, before it deletes the reader: afterwards no acknowledgement is
    // inside the reader, and none can reach it.
    void detach() ABSL_LOCKS_EXCLUDED(mutex_) {
      absl::MutexLock lock(&mutex_);
      reader_ = nullptr;
      mutex_.Await(absl::Condition(this, &Gate::idle));
    }

   private:
    friend class WindowedReader;

    // Before a request is forwarded (its answer may come before forward() returns).
    void forwarding() ABSL_LOCKS_EXCLUDED(mutex_) {
      absl::MutexLock lock(&mutex_);
      ++unanswered_;
    }

    // The reader decided to finish: what it holds goes now, or with the last answer.
    void finished() ABSL_LOCKS_EXCLUDED(mutex_) {
      std::shared_ptr<const void> released;
      absl::MutexLock lock(&mutex_);
      finished_ = true;
      released = release_if_over();
    }

    std::shared_ptr<const void> release_if_over() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_) {
      return finished_ && unanswered_ == 0 ? std::move(held_) : nullptr;
    }
    bool idle() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_) { return inside_ == 0; }

    absl::Mutex mutex_;
    WindowedReader* reader_ ABSL_GUARDED_BY(mutex_);  // null once detached
    std::size_t inside_ ABSL_GUARDED_BY(mutex_) = 0;  // acknowledgements inside the reader
    std::shared_ptr<const void> held_ ABSL_GUARDED_BY(mutex_);
    std::size_t unanswered_ ABSL_GUARDED_BY(mutex_) = 0;  // forwarded, not yet acknowledged
    bool finished_ ABSL_GUARDED_BY(mutex_) = false;       // the reader decided to finish
  };

  // `held` (an admission permit, or nothing) is let go once the stream has finished and every
  // request it forwarded was answered.
  WindowedReader(std::size_t window, std::shared_ptr<const void> held)
      : window_(window), gate_(std::make_shared<Gate>(this, std::move(held))) {}

  // Begins reading; call once the derived object is fully constructed.
  void start() ABSL_LOCKS_EXCLUDED(mutex_) { issue(); }

  void OnReadDone(bool ok) ABSL_LOCKS_EXCLUDED(mutex_) override {
    if (!ok) {
      {
        absl::MutexLock lock(&mutex_);
        reading_ = false;
        input_closed_ = true;
      }
      return issue();
    }
    {
      absl::MutexLock lock(&mutex_);
      if (finished_) {
        // Read before the stream finished, completed after: the stream applies nothing more.
        requests_.discard();
        return;
      }
      ++in_flight_;         // before forward(), which may acknowledge synchronously
      gate_->forwarding();  // under the lock: counted before the stream can decide to finish
    }
    forward(requests_.take());
    {
      // Only now may the next read start: requests are forwarded in the order they were read,
      // even when an acknowledgement on another thread wants to resume reading meanwhile.
      absl::MutexLock lock(&mutex_);
      reading_ = false;
    }
    issue();
  }

  void OnCancel() ABSL_LOCKS_EXCLUDED(mutex_) override {
    {
      absl::MutexLock lock(&mutex_);
      cancelled_ = true;
    }
    issue();
  }

  void OnDone() override {
    gate_->detach();
    delete this;
  }

 protected:
  using Requests = ParsedRequests<Request>;
  // Hands `request` on (null: it did not parse); exactly one acknowledgement (through gate())
  // must follow. Runs without the reader's lock and may acknowledge before it returns.
  virtual void forward(typename Requests::Handed request) = 0;
  // Every request read and acknowledged: record the outcome in the response. Runs under the
  // reader's lock: bookkeeping only.
  virtual void tally(const Outcome& outcome) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_) = 0;
  // The stream ends OK: write the response of every tally() into `response` (the call's,
  // serialized here as its requests are parsed here). Runs under the reader's lock, after
  // the last tally().
  virtual void respond() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_) = 0;
  // A status that ends the stream now, without waiting for the client to close its side
  // (an outcome showed that nothing more can be applied). Runs under the reader's lock after
  // every tally(): bookkeeping only. A read still outstanding then is dropped when it completes.
  virtual std::optional<grpc::Status> early_status() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_) { return std::nullopt; }

  const std::shared_ptr<Gate>& gate() const { return gate_; }

 private:
  enum class Step { kNone, kRead, kFinish };

  void acknowledged(const Outcome& outcome) ABSL_LOCKS_EXCLUDED(mutex_) {
    {
      absl::MutexLock lock(&mutex_);
      tally(outcome);
      --in_flight_;
    }
    issue();
  }

  // Makes the calls into gRPC that the state wants, unless another thread is making them
  // already (that thread re-decides after each call, so it sees what the caller recorded).
  void issue() ABSL_LOCKS_EXCLUDED(mutex_) {
    bool claimed = false;
    for (;;) {
      grpc::Status status;
      Step step = Step::kNone;
      {
        absl::MutexLock lock(&mutex_);
        if (!claimed) {
          if (issuing_) return;
          issuing_ = claimed = true;
        }
        step = next_step_locked(status);
        if (step == Step::kNone) {
          issuing_ = false;
          return;
        }
      }
      if (step == Step::kRead) {
        this->StartRead(requests_.target());
        continue;
      }
      // The last call: `issuing_` stays set, and the reader may be deleted from here on. What
      // the stream holds goes before the client learns of the end (at once when every request
      // was answered, as on a normal end), so a client that opens its next stream at once is
      // not refused by the one it just closed.
      gate_->finished();
      this->Finish(std::move(status));
      return;
    }
  }

  Step next_step_locked(grpc::Status& status) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_) {
    if (finished_) return Step::kNone;
    if (cancelled_) {
      finished_ = true;
      status = grpc::Status(grpc::StatusCode::CANCELLED, "cancelled by the client");
      return Step::kFinish;
    }
    if (auto early = early_status()) {
      finished_ = true;
      status = std::move(*early);
      return Step::kFinish;
    }
    if (input_closed_ && in_flight_ == 0) {
      finished_ = true;
      status = grpc::Status::OK;  // every request read and answered
      respond();
      return Step::kFinish;
    }
    if (reading_ || input_closed_ || in_flight_ >= window_) return Step::kNone;
    reading_ = true;
    return Step::kRead;
  }

  const std::size_t window_;
  const std::shared_ptr<Gate> gate_;
  // Belong to the outstanding read, not to mutex_: gRPC fills the target between StartRead
  // and OnReadDone, which takes it before clearing `reading_`, and only then may the next
  // StartRead hand a target to gRPC again.
  Requests requests_;

  absl::Mutex mutex_;
  std::size_t in_flight_ ABSL_GUARDED_BY(mutex_) = 0;  // forwarded (or being forwarded), not yet acknowledged
  bool reading_ ABSL_GUARDED_BY(mutex_) = false;       // a read outstanding, or its request being forwarded
  bool input_closed_ ABSL_GUARDED_BY(mutex_) = false;  // the client half-closed (or the read failed)
  bool cancelled_ ABSL_GUARDED_BY(mutex_) = false;     // OnCancel: finish CANCELLED
  bool finished_ ABSL_GUARDED_BY(mutex_) = false;      // Finish decided (issued by the issuing thread)
  bool issuing_ ABSL_GUARDED_BY(mutex_) = false;       // a thread is calling gRPC; set for good after Finish
};

}  // namespace kvrelay::gateway
