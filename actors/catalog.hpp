#pragma once
// The pool catalog: complete, revisioned snapshots of every materialized pool, fanned out
// to catalog streams (latest value, coalescing). The gateway reads the current view
// without waiting on the actor, to admit SubscribeKvPool calls.
#include <caf/all.hpp>

#include <map>
#include <memory>

#include "actors/mailbox_sampler.hpp"
#include "actors/messages.hpp"
#include "actors/pool_publisher.hpp"
#include "actors/published_view.hpp"
#include "actors/subscribers.hpp"
#include "core/wire_validation.hpp"

namespace kvrelay {

// A pool as the catalog publishes it, with what SubscribeKvPool needs to admit a stream.
struct CatalogEntry {
  v1::KvPoolDescriptor descriptor;
  PoolPublisherActor publisher;
  std::shared_ptr<StreamLimit> subscribers;  // this generation's per-pool stream permits
};

struct CatalogView {
  std::uint64_t revision = 0;
  std::map<wire::PoolKey, CatalogEntry> pools;  // ordered by PoolId, as published
};

// Read from gRPC threads, written by the catalog actor only.
using CatalogRegistry = PublishedView<CatalogView>;

// The catalog, as membership and catalog streams see it.
using CatalogActor =
    caf::typed_actor<caf::reacts_to<atoms::catalog_atom, std::vector<CatalogEntry>>,  // the complete set (revision + 1
                                                                                      // if changed)
                     caf::reacts_to<atoms::subscribe_atom, UpdateStreamActor<CatalogBroadcast>>,
                     caf::reacts_to<atoms::shutdown_atom, RpcStatus>,  // end every stream with this status
                     caf::reacts_to<atoms::sample_atom>>;              // its mailbox sampling timer

struct CatalogState {
  std::shared_ptr<CatalogRegistry> registry;
  v1::RelayIdentity relay;
  CatalogUpdatePtr current;  // the last published update
  Subscribers<CatalogBroadcast> streams;
  MailboxSampler mailbox;
  static inline const char* name = "catalog";
};

// `mailbox_depth` (may be null) receives its sampled mailbox depth.
CatalogActor::behavior_type catalog(CatalogActor::stateful_pointer<CatalogState> self,
                                    std::shared_ptr<CatalogRegistry> registry, v1::RelayIdentity relay,
                                    prometheus::Gauge* mailbox_depth);

}  // namespace kvrelay

CAF_ALLOW_UNSAFE_MESSAGE_TYPE(std::vector<kvrelay::CatalogEntry>)
