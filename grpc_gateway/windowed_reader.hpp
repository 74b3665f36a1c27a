#pragma once
// A client-streaming reactor that forwards each request to an actor and reads at most
// `window` requests ahead of their acknowledgements, so a fast producer cannot flood an
// actor's mailbox. Acknowledgements arrive on actor threads through a Gate that outlives
// the reactor (gRPC deletes the reactor in OnDone, possibly before late acks).
#include <grpcpp/grpcpp.h>

#include <memory>
#include <mutex>

namespace kvrelay::gateway {

template <class Request, class Outcome>
class WindowedReader : public grpc::ServerReadReactor<Request> {
 public:
  class Gate {
   public:
    explicit Gate(WindowedReader* reader) : reader_(reader) {}
    void acknowledge(const Outcome& outcome) {
      std::lock_guard lock(mutex_);
      if (reader_ != nullptr) reader_->acknowledged(outcome);
    }
    void detach() {
      std::lock_guard lock(mutex_);
      reader_ = nullptr;
    }

   private:
    std::mutex mutex_;
    WindowedReader* reader_;
  };

  explicit WindowedReader(std::size_t window) : window_(window), gate_(std::make_shared<Gate>(this)) {}

  // Begins reading; call once the derived object is fully constructed.
  void start() {
    std::lock_guard lock(mutex_);
    read_next_locked();
  }

  void OnReadDone(bool ok) override {
    std::unique_lock lock(mutex_);
    if (!ok) {
      reading_ = false;
      input_closed_ = true;
      return finish_when_idle_locked();
    }
    ++in_flight_;
    Request request = std::move(incoming_);
    incoming_ = Request{};
    lock.unlock();
    forward(std::move(request));  // may acknowledge synchronously
    lock.lock();
    // Only now may the next read start: requests are forwarded in the order they were read,
    // even when an acknowledgement on another thread wants to resume reading meanwhile.
    reading_ = false;
    read_next_locked();
  }

  void OnCancel() override {
    std::lock_guard lock(mutex_);
    finish_locked(grpc::Status(grpc::StatusCode::CANCELLED, "cancelled by the client"));
  }

  void OnDone() override {
    gate_->detach();
    delete this;
  }

 protected:
  // Hands `request` on; exactly one acknowledgement (through gate()) must follow.
  virtual void forward(Request request) = 0;
  // Every request read and acknowledged: record the outcome in the response.
  virtual void tally(const Outcome& outcome) = 0;
  virtual grpc::Status final_status() { return grpc::Status::OK; }

  const std::shared_ptr<Gate>& gate() const { return gate_; }

 private:
  void acknowledged(const Outcome& outcome) {
    std::lock_guard lock(mutex_);
    tally(outcome);
    --in_flight_;
    read_next_locked();
    finish_when_idle_locked();
  }

  void read_next_locked() {
    if (reading_ || input_closed_ || finished_ || in_flight_ >= window_) return;
    reading_ = true;
    this->StartRead(&incoming_);
  }

  void finish_when_idle_locked() {
    if (input_closed_ && in_flight_ == 0) finish_locked(final_status());
  }

  void finish_locked(grpc::Status status) {
    if (finished_) return;
    finished_ = true;
    this->Finish(std::move(status));
  }

  std::recursive_mutex mutex_;
  const std::size_t window_;
  std::shared_ptr<Gate> gate_;
  Request incoming_;
  std::size_t in_flight_ = 0;
  bool reading_ = false;
  bool input_closed_ = false;
  bool finished_ = false;
};

}  // namespace kvrelay::gateway
