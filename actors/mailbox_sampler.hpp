#pragma once
// Samples an actor's own mailbox depth into kv_relay_mailbox_depth{actor_kind}. Only the
// actor can read its mailbox, so it does so on a timer of its own (sample_atom) and adds
// the change since its last sample to the gauge its whole kind shares: the gauge is the
// sum over the live actors of that kind, and an actor that ends takes its share back out.
// A scrape only reads the gauge.
#include <prometheus/gauge.h>
#include <caf/all.hpp>

#include <chrono>

#include "actors/mailbox_depth.hpp"
#include "actors/messages.hpp"

namespace kvrelay {

inline constexpr std::chrono::seconds kMailboxSamplePeriod{1};

class MailboxSampler {
 public:
  MailboxSampler() = default;
  MailboxSampler(const MailboxSampler&) = delete;
  MailboxSampler& operator=(const MailboxSampler&) = delete;
  ~MailboxSampler() {
    if (gauge_ != nullptr) gauge_->Decrement(last_);
  }

  // Starts sampling into `gauge`; without one (no metrics) it does nothing.
  template <class Self>
  void start(Self* self, prometheus::Gauge* gauge) {
    gauge_ = gauge;
    if (gauge_ != nullptr) self->delayed_send(self, kMailboxSamplePeriod, atoms::sample_atom_v);
  }

  // Call from the actor's (sample_atom) handler.
  template <class Self>
  void sample(Self* self) {
    if (gauge_ == nullptr) return;
    const auto depth = static_cast<double>(mailbox_depth(*self));
    if (depth >= last_) {
      gauge_->Increment(depth - last_);
    } else {
      gauge_->Decrement(last_ - depth);
    }
    last_ = depth;
    self->delayed_send(self, kMailboxSamplePeriod, atoms::sample_atom_v);
  }

 private:
  prometheus::Gauge* gauge_ = nullptr;
  double last_ = 0;
};

}  // namespace kvrelay
