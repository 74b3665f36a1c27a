#pragma once
// Serving readiness: re-projects the topology entries whenever membership, availability
// or pool links change, and publishes a new revision only when the entries differ.
#include <caf/all.hpp>

#include "actors/mailbox_sampler.hpp"
#include "actors/messages.hpp"
#include "actors/subscribers.hpp"
#include "metrics/relay_metrics.hpp"

namespace kvrelay {

struct TopologyProjectorState {
  v1::RelayIdentity relay;
  std::string published_entries;  // serialized entries of the current revision
  ReadinessUpdatePtr current;
  Subscribers streams;
  metrics::RelayMetrics* metrics = nullptr;
  MailboxSampler mailbox;
  static inline const char* name = "topology-projector";
};

// Messages: (facts_atom, std::vector<readiness::EndpointFacts>); (subscribe_atom, stream);
// (shutdown_atom, RpcStatus). `metrics` may be null (nothing is recorded).
caf::behavior topology_projector(caf::stateful_actor<TopologyProjectorState>* self,
                                 v1::RelayIdentity relay, metrics::RelayMetrics* metrics);

}  // namespace kvrelay
