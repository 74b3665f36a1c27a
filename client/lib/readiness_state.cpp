#include "client/lib/readiness_state.hpp"

#include <fmt/format.h>

#include "client/lib/snapshot_check.hpp"

namespace kvrelay::client {

Applied ReadinessState::apply(const v1::ServingReadinessUpdate& update) {
  if (auto fault = check_revisioned(update, valid_ ? &installed_ : nullptr, "readiness")) {
    invalidate();
    return fault;
  }
  entries_.clear();
  quarantined_.clear();
  for (int i = 0; i < update.entries_size(); ++i) {
    const auto& entry = update.entries(i);
    ReadinessKey key{entry.namespace_(), entry.canonical_model_id()};
    if (auto error = wire::check_topology_entry(entry, fmt::format("entries[{}]", i))) {
      quarantined_.emplace(std::move(key), fault_of(*error));
    } else {
      entries_.emplace(std::move(key), entry);
    }
  }
  valid_ = true;
  revision_ = update.revision();
  installed_ = update;
  return std::nullopt;
}

void ReadinessState::invalidate() {
  valid_ = false;
  installed_.Clear();
  entries_.clear();
  quarantined_.clear();
}

const v1::TopologyEntry* ReadinessState::find(const ReadinessKey& key) const {
  const auto it = entries_.find(key);
  return it == entries_.end() ? nullptr : &it->second;
}

}  // namespace kvrelay::client
