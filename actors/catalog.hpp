#pragma once
// The pool catalog: complete, revisioned snapshots of every materialized pool, fanned out
// to catalog streams (latest value, coalescing). The gateway reads the current view
// without waiting on the actor, to admit SubscribeKvPool calls.
#include <caf/all.hpp>

#include <atomic>
#include <map>
#include <memory>

#include "actors/mailbox_sampler.hpp"
#include "actors/messages.hpp"
#include "actors/subscribers.hpp"
#include "core/wire_validation.hpp"

namespace kvrelay {

struct CatalogView {
  std::uint64_t revision = 0;
  std::map<wire::PoolKey, CatalogEntry> pools;  // ordered by PoolId, as published
};

// Read from gRPC threads, written by the catalog actor only.
class CatalogRegistry {
 public:
  CatalogRegistry() : view_(std::make_shared<const CatalogView>()) {}
  std::shared_ptr<const CatalogView> current() const { return view_.load(); }
  void publish(std::shared_ptr<const CatalogView> view) { view_.store(std::move(view)); }

 private:
  std::atomic<std::shared_ptr<const CatalogView>> view_;
};

struct CatalogState {
  std::shared_ptr<CatalogRegistry> registry;
  v1::RelayIdentity relay;
  CatalogUpdatePtr current;  // the last published update
  Subscribers streams;
  MailboxSampler mailbox;
  static inline const char* name = "catalog";
};

// Messages: (pools_atom, std::vector<CatalogEntry>) replaces the catalog (revision + 1 when
// anything changed); (subscribe_atom, stream); (shutdown_atom, RpcStatus) ends every stream.
// `mailbox_depth` (may be null) receives its sampled mailbox depth.
caf::behavior catalog(caf::stateful_actor<CatalogState>* self, std::shared_ptr<CatalogRegistry> registry,
                      v1::RelayIdentity relay, prometheus::Gauge* mailbox_depth);

}  // namespace kvrelay
