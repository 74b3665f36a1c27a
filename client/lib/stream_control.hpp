#pragma once
// Cancellation of one stream-running thread: a stop flag, the ClientContext of the stream it
// is reading, and a backoff wait that a stop interrupts.
#include <grpcpp/client_context.h>

#include <chrono>
#include <condition_variable>
#include <mutex>

namespace kvrelay::client {

class StreamControl {
 public:
  void stop() {
    std::lock_guard lock(mutex_);
    stopped_ = true;
    if (context_ != nullptr) context_->TryCancel();
    wake_.notify_all();
  }
  bool stopped() const {
    std::lock_guard lock(mutex_);
    return stopped_;
  }
  // false when stopped before the time was up.
  bool wait(std::chrono::milliseconds delay) {
    std::unique_lock lock(mutex_);
    return !wake_.wait_for(lock, delay, [this] { return stopped_; });
  }
  // The stream now being read; cancelled at once when the thread was already stopped.
  void attach(grpc::ClientContext* context) {
    std::lock_guard lock(mutex_);
    context_ = context;
    if (stopped_) context_->TryCancel();
  }
  void detach() {
    std::lock_guard lock(mutex_);
    context_ = nullptr;
  }

 private:
  mutable std::mutex mutex_;
  std::condition_variable wake_;
  bool stopped_ = false;
  grpc::ClientContext* context_ = nullptr;
};

}  // namespace kvrelay::client
