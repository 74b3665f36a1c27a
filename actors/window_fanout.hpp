#pragma once
// What the two window actors (pool load, serving load) share: a complete window every period
// on a fixed schedule, numbered from 0 with no gap, the current one handed to every stream that
// subscribes and each new one to all of them (docs/protocol/load.md#cadence).
#include <caf/all.hpp>

#include <chrono>
#include <cstdint>
#include <memory>

#include "actors/messages.hpp"
#include "actors/schedule.hpp"
#include "actors/subscribers.hpp"

namespace kvrelay {

template <class Message>
class WindowFanout {
 public:
  using Window = std::shared_ptr<const Message>;

  // `build(sequence)` makes the window with that sequence; window 0 is built now.
  template <class Self, class Build>
  void start(Self self, std::chrono::milliseconds period, Build build) {
    current_ = build(sequence_);
    schedule_.start(self, period, atoms::tick_atom_v);
    self->set_down_handler([this](const caf::down_msg& down) { streams_.remove(down.source); });
  }

  template <class Self>
  void subscribe(Self self, const UpdateStreamActor<Message>& stream) {
    if (streams_.add(self, stream)) self->send(stream, atoms::update_atom_v, current_);
  }

  // Call from the tick handler.
  template <class Self, class Build>
  void tick(Self self, Build build) {
    current_ = build(++sequence_);
    streams_.broadcast(self, current_);
    schedule_.rearm(self, atoms::tick_atom_v);
  }

  template <class Self>
  void end_all(Self self, const RpcStatus& status) {
    streams_.end_all(self, status);
  }

 private:
  std::uint64_t sequence_ = 0;
  Window current_;
  FixedSchedule schedule_;
  Subscribers<Message> streams_;
};

}  // namespace kvrelay
