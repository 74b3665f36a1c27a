#include "client/lib/load_state.hpp"

#include <fmt/format.h>

namespace kvrelay::client {

Applied LoadState::apply(const v1::KvPoolLoadUpdate& update) {
  std::optional<Fault> fault;
  if (auto error = wire::check_response(update)) {
    fault = fault_of(*error);
  } else if (valid_ && update.window_sequence() != window_sequence_ + 1) {
    fault = Fault{"WindowGap", fmt::format("window {} after window {}", update.window_sequence(), window_sequence_)};
  }
  if (fault) {
    invalidate();
    return fault;
  }
  entries_.clear();
  quarantined_ = 0;
  for (const auto& entry : update.pools()) {
    if (wire::check_load_entry(entry)) {
      ++quarantined_;
    } else {
      entries_.emplace(wire::producer_key(entry.producer()), entry);
    }
  }
  valid_ = true;
  window_sequence_ = update.window_sequence();
  return std::nullopt;
}

void LoadState::invalidate() {
  valid_ = false;
  entries_.clear();
  quarantined_ = 0;
}

const v1::KvPoolLoadEntry* LoadState::find(const wire::ProducerKey& producer) const {
  const auto it = entries_.find(producer);
  return it == entries_.end() ? nullptr : &it->second;
}

}  // namespace kvrelay::client
