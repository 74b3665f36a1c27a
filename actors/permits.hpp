#pragma once
// Admission limits (docs/protocol/limits.md#admission-limits): a fixed number of permits, taken
// without waiting and returned the moment their holder lets go (a stream's call is over, however
// it ends; a pool's last subscriber leaves). Shared by gRPC threads and actors, hence thread-safe.
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <memory>
#include <mutex>
#include <string>

namespace kvrelay {

class StreamLimit {
  struct Count {
    std::mutex mutex;
    std::condition_variable changed;
    std::size_t in_use = 0;
    std::size_t ending = 0;  // of in_use: held by streams the relay has ended, whose calls are not over
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
        if (ending_) --count_->ending;
      }
      count_->changed.notify_all();
    }
    Permit(const Permit&) = delete;
    Permit& operator=(const Permit&) = delete;

    // The relay ended the stream; the permit stays held until its call is over (a client that
    // stopped reading has not received the end yet). Once; later calls change nothing.
    void mark_ending() {
      {
        std::lock_guard lock(count_->mutex);
        if (ending_) return;
        ending_ = true;
        ++count_->ending;
      }
      count_->changed.notify_all();
    }

   private:
    std::shared_ptr<Count> count_;
    bool ending_ = false;  // guarded by count_->mutex
  };

  StreamLimit(std::string resource, std::size_t max) : resource_(std::move(resource)), max_(max) {}

  // nullptr when every permit is taken.
  std::shared_ptr<Permit> try_acquire() {
    {
      std::lock_guard lock(count_->mutex);
      if (count_->in_use >= max_) return nullptr;
      ++count_->in_use;
    }
    count_->changed.notify_all();
    return std::make_shared<Permit>(count_);
  }

  std::size_t in_use() const {
    std::lock_guard lock(count_->mutex);
    return count_->in_use;
  }
  // Permits held by streams the relay has not ended.
  std::size_t serving() const {
    std::lock_guard lock(count_->mutex);
    return count_->in_use - count_->ending;
  }

  // Block until at most / at least `count` permits are in use (or, for await_serving_at_most,
  // held by streams the relay has not ended), or `timeout` passes; true if reached. For tests,
  // which await a stream's end or admission.
  bool await_at_most(std::size_t count, std::chrono::milliseconds timeout) const {
    return await([&] { return count_->in_use <= count; }, timeout);
  }
  bool await_serving_at_most(std::size_t count, std::chrono::milliseconds timeout) const {
    return await([&] { return count_->in_use - count_->ending <= count; }, timeout);
  }
  bool await_at_least(std::size_t count, std::chrono::milliseconds timeout) const {
    return await([&] { return count_->in_use >= count; }, timeout);
  }
  // For a drain: until no permit is in use, or `deadline`; how many still are (0: drained).
  std::size_t await_drained(std::chrono::system_clock::time_point deadline) const {
    std::unique_lock lock(count_->mutex);
    count_->changed.wait_until(lock, deadline, [&] { return count_->in_use == 0; });
    return count_->in_use;
  }

  std::size_t max() const { return max_; }
  // The refusal text, e.g. "Relay catalog stream limit 64 reached".
  std::string refusal() const { return "Relay " + resource_ + " limit " + std::to_string(max_) + " reached"; }

 private:
  template <class Reached>
  bool await(Reached reached, std::chrono::milliseconds timeout) const {
    std::unique_lock lock(count_->mutex);
    return count_->changed.wait_for(lock, timeout, reached);
  }

  std::string resource_;
  std::size_t max_;
  std::shared_ptr<Count> count_ = std::make_shared<Count>();
};

}  // namespace kvrelay
