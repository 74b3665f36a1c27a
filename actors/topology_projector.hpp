#pragma once
// Serving readiness: re-projects the topology entries whenever membership, availability
// or pool links change, and publishes a new revision only when the entries differ.
#include <caf/all.hpp>

#include "actors/mailbox_sampler.hpp"
#include "actors/messages.hpp"
#include "actors/subscribers.hpp"
#include "metrics/relay_metrics.hpp"

namespace kvrelay {

// The readiness projection, as membership and readiness streams see it.
using TopologyProjectorActor =
    caf::typed_actor<caf::reacts_to<atoms::facts_atom, std::vector<readiness::EndpointFacts>>,  // every endpoint's
                                                                                                // facts
                     caf::reacts_to<atoms::subscribe_atom, UpdateStreamActor<ReadinessBroadcast>>,
                     caf::reacts_to<atoms::shutdown_atom, RpcStatus>,  // end every stream with this status
                     caf::reacts_to<atoms::sample_atom>>;              // its mailbox sampling timer

struct TopologyProjectorState {
  v1::RelayIdentity relay;
  std::string published_entries;  // serialized entries of the current revision
  ReadinessUpdatePtr current;
  Subscribers<ReadinessBroadcast> streams;
  metrics::RelayMetrics* metrics = nullptr;
  MailboxSampler mailbox;
  static inline const char* name = "topology-projector";
};

// `metrics` may be null (nothing is recorded).
TopologyProjectorActor::behavior_type topology_projector(
    TopologyProjectorActor::stateful_pointer<TopologyProjectorState> self, v1::RelayIdentity relay,
    metrics::RelayMetrics* metrics);

}  // namespace kvrelay
