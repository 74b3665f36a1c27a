#pragma once
// Admission limits of the WAN streams (relay-behaviour.md §3): a fixed number of permits
// per stream kind, taken without waiting when a call is admitted and returned the moment
// its stream ends, however it ends.
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <memory>
#include <mutex>
#include <string>

namespace kvrelay::gateway {

class StreamLimit {
  struct Count {
    std::mutex mutex;
    std::condition_variable released;
    std::size_t in_use = 0;
  };

 public:
  // Held while a stream is open; destroying it returns the permit.
  class Permit {
   public:
    explicit Permit(std::shared_ptr<Count> count) : count_(std::move(count)) {}
    ~Permit() {
      {
        std::lock_guard lock(count_->mutex);
        --count_->in_use;
      }
      count_->released.notify_all();
    }
    Permit(const Permit&) = delete;
    Permit& operator=(const Permit&) = delete;

   private:
    std::shared_ptr<Count> count_;
  };

  StreamLimit(std::string resource, std::size_t max) : resource_(std::move(resource)), max_(max) {}

  // nullptr when every permit is taken.
  std::shared_ptr<Permit> try_acquire() {
    std::lock_guard lock(count_->mutex);
    if (count_->in_use >= max_) return nullptr;
    ++count_->in_use;
    return std::make_shared<Permit>(count_);
  }

  std::size_t in_use() const {
    std::lock_guard lock(count_->mutex);
    return count_->in_use;
  }

  // Blocks until at most `count` permits are in use, or `timeout` passes; true if reached.
  bool await_at_most(std::size_t count, std::chrono::milliseconds timeout) const {
    std::unique_lock lock(count_->mutex);
    return count_->released.wait_for(lock, timeout, [&] { return count_->in_use <= count; });
  }

  std::size_t max() const { return max_; }
  // The refusal text, e.g. "Relay catalog stream limit 64 reached".
  std::string refusal() const { return "Relay " + resource_ + " limit " + std::to_string(max_) + " reached"; }

 private:
  std::string resource_;
  std::size_t max_;
  std::shared_ptr<Count> count_ = std::make_shared<Count>();
};

}  // namespace kvrelay::gateway
