#pragma once
// The consumer's readiness plane: the supported topology entries of the latest complete
// ServingReadinessUpdate, keyed by (namespace, canonical_model_id). An entry that fails
// validation is quarantined as a whole; its old state is never kept as a fallback.
#include <map>
#include <set>
#include <string>
#include <utility>

#include "client/lib/fault.hpp"

namespace kvrelay::client {

using ReadinessKey = std::pair<std::string, std::string>;  // (namespace, canonical_model_id)

class ReadinessState {
 public:
  // Replaces the view with `update`, quarantining bad entries. An unusable message (envelope,
  // duplicate entries, a revision going back, other content under the installed revision)
  // invalidates the plane and returns its error.
  Applied apply(const v1::ServingReadinessUpdate& update);
  void invalidate();

  bool valid() const { return valid_; }
  std::uint64_t revision() const { return revision_; }
  const std::map<ReadinessKey, v1::TopologyEntry>& entries() const { return entries_; }
  const std::map<ReadinessKey, Fault>& quarantined() const { return quarantined_; }
  const v1::TopologyEntry* find(const ReadinessKey& key) const;

 private:
  bool valid_ = false;
  std::uint64_t revision_ = 0;
  v1::ServingReadinessUpdate installed_;  // as received, to tell a heartbeat from a changed snapshot
  std::map<ReadinessKey, v1::TopologyEntry> entries_;
  std::map<ReadinessKey, Fault> quarantined_;
};

}  // namespace kvrelay::client
