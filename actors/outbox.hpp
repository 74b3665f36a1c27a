#pragma once
// The bounded queue between a publisher and one stream's transport. It holds at most
// `max_frames` frames and `max_bytes` bytes (each frame counted as its payload plus a fixed
// overhead); a push that would exceed either bound is refused and the stream ends as lagged.
#include <cstddef>
#include <deque>
#include <memory>

#include "actors/messages.hpp"

namespace kvrelay {

template <class Message>
class Outbox {
 public:
  Outbox() = default;
  explicit Outbox(OutboxLimits limits) : limits_(limits) {}

  // false: the bound would be exceeded (nothing is queued).
  bool push(std::shared_ptr<const Message> message, std::size_t payload_bytes) {
    const std::size_t bytes = payload_bytes + OutboxLimits::kFrameOverheadBytes;
    if (frames_.size() + 1 > limits_.max_frames || bytes_ + bytes > limits_.max_bytes) return false;
    frames_.push_back({std::move(message), bytes});
    bytes_ += bytes;
    return true;
  }

  std::shared_ptr<const Message> pop() {
    Entry entry = std::move(frames_.front());
    frames_.pop_front();
    bytes_ -= entry.bytes;
    return std::move(entry.message);
  }

  bool empty() const { return frames_.empty(); }
  std::size_t size() const { return frames_.size(); }

 private:
  struct Entry {
    std::shared_ptr<const Message> message;
    std::size_t bytes;
  };
  OutboxLimits limits_;
  std::deque<Entry> frames_;
  std::size_t bytes_ = 0;
};

}  // namespace kvrelay
