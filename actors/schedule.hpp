#pragma once
// A periodic timer on the actor clock with "delay on miss": ticks at start + T, start + 2T,
// ...; a late tick pushes the schedule back instead of firing a burst to catch up.
#include <caf/all.hpp>

#include <chrono>

namespace kvrelay {

class FixedSchedule {
 public:
  using time_point = caf::actor_clock::time_point;

  template <class Self, class Atom>
  void start(Self* self, std::chrono::milliseconds period, Atom tick) {
    period_ = period;
    next_ = self->clock().now() + period_;
    self->scheduled_send(self, next_, tick);
  }

  // Call from the tick handler.
  template <class Self, class Atom>
  void rearm(Self* self, Atom tick) {
    const time_point now = self->clock().now();
    next_ += period_;
    if (next_ <= now) next_ = now + period_;
    self->scheduled_send(self, next_, tick);
  }

 private:
  std::chrono::milliseconds period_{0};
  time_point next_{};
};

}  // namespace kvrelay
