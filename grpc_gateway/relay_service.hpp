#pragma once
// dynamo.kvrelay.v1.KvEventRelay on the gRPC callback API. Thin: it validates requests with
// core's pure checks, admits the call, spawns the stream actor and wires it to its source.
// No gRPC thread ever waits on an actor.
#include <caf/all.hpp>

#include "actors/catalog.hpp"
#include "actors/messages.hpp"
#include "dynamo/kvrelay/v1/relay.grpc.pb.h"

namespace kvrelay::gateway {

struct RelayServiceConfig {
  v1::RelayIdentity relay;
  OutboxLimits pool_outbox;        // per pool stream: frames and bytes
  std::size_t load_outbox_windows = 16;
};

struct RelayServicePeers {
  std::shared_ptr<CatalogRegistry> catalog_view;
  caf::actor catalog;
  caf::actor topology;
  caf::actor load;
};

class RelayService final : public v1::KvEventRelay::CallbackService {
 public:
  RelayService(caf::actor_system& system, RelayServiceConfig config, RelayServicePeers peers);

  grpc::ServerUnaryReactor* GetRelayInfo(grpc::CallbackServerContext* context, const v1::RelayInfoRequest* request,
                                         v1::RelayInfo* response) override;
  grpc::ServerWriteReactor<v1::KvPoolCatalogUpdate>* WatchKvPoolCatalog(
      grpc::CallbackServerContext* context, const v1::WatchKvPoolCatalogRequest* request) override;
  grpc::ServerWriteReactor<v1::FilterUpdate>* SubscribeKvPool(grpc::CallbackServerContext* context,
                                                              const v1::SubscribeKvPoolRequest* request) override;
  grpc::ServerWriteReactor<v1::ServingReadinessUpdate>* SubscribeServingReadiness(
      grpc::CallbackServerContext* context, const v1::SubscribeServingReadinessRequest* request) override;
  grpc::ServerWriteReactor<v1::KvPoolLoadUpdate>* SubscribeKvPoolLoad(
      grpc::CallbackServerContext* context, const v1::SubscribeKvPoolLoadRequest* request) override;
  grpc::ServerWriteReactor<v1::ServingLoadUpdate>* SubscribeServingLoad(
      grpc::CallbackServerContext* context, const v1::SubscribeServingLoadRequest* request) override;

 private:
  caf::actor_system& system_;
  RelayServiceConfig config_;
  RelayServicePeers peers_;
};

}  // namespace kvrelay::gateway
