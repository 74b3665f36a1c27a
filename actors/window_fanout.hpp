#pragma once
// What the two window actors (pool load, serving load) share: a complete window every period
// on a fixed schedule, numbered from 0 with no gap, the current one handed to every stream that
// subscribes and each new one to all of them (docs/protocol/load.md#cadence).
#include <caf/all.hpp>

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>

#include "actors/messages.hpp"
#include "actors/schedule.hpp"
#include "actors/subscribers.hpp"

namespace kvrelay {

template <class Message>
class WindowFanout {
 public:
  using Window = std::shared_ptr<const Message>;

  // `build(sequence)` makes the window with that sequence. Window 0 is built when a stream
  // first asks for it before the first tick, so that it holds what the relay was given before
  // it served anyone (its topology file), not the empty state it started from.
  template <class Self, class Build>
  void start(Self self, std::chrono::milliseconds period, Build build) {
    build_ = std::move(build);
    schedule_.start(self, period, atoms::tick_atom_v);
    self->set_down_handler([this](const caf::down_msg& down) { streams_.remove(down.source); });
  }

  template <class Self>
  void subscribe(Self self, const UpdateStreamActor<Message>& stream) {
    if (!current_) current_ = build_(sequence_);
    if (streams_.add(self, stream)) self->send(stream, atoms::update_atom_v, current_);
  }

  // Call from the tick handler. Tick k builds window k, whether or not window 0 was ever built.
  template <class Self>
  void tick(Self self) {
    current_ = build_(++sequence_);
    streams_.broadcast(self, current_);
    schedule_.rearm(self, atoms::tick_atom_v);
  }

  template <class Self>
  void end_all(Self self, const RpcStatus& status) {
    streams_.end_all(self, status);
  }

 private:
  std::function<Window(std::uint64_t)> build_;
  std::uint64_t sequence_ = 0;
  Window current_;  // null until window 0 is asked for
  FixedSchedule schedule_;
  Subscribers<Message> streams_;
};

}  // namespace kvrelay
