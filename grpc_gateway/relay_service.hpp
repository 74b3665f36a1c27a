#pragma once
// dynamo.kvrelay.v1.KvEventRelay on the gRPC callback API. Thin: it validates requests with
// core's pure checks, admits the call, spawns the stream actor and wires it to its source.
// No gRPC thread ever waits on an actor.
#include <caf/all.hpp>

#include <atomic>
#include <chrono>

#include "actors/catalog.hpp"
#include "actors/load_window.hpp"
#include "actors/messages.hpp"
#include "actors/permits.hpp"
#include "actors/serving_load_window.hpp"
#include "actors/snapshot_encoders.hpp"
#include "actors/topology_projector.hpp"
#include "dynamo/kvrelay/v1/relay.grpc.pb.h"
#include "grpc_gateway/stream_reactor.hpp"
#include "metrics/relay_metrics.hpp"

namespace kvrelay::gateway {

struct RelayServiceConfig {
  v1::RelayIdentity relay;
  OutboxLimits pool_outbox;  // per pool stream: frames and bytes
  std::size_t load_outbox_windows = 16;
  std::size_t max_catalog_subscribers = 64;
  std::size_t max_readiness_subscribers = 64;
  std::size_t max_load_subscribers = 64;
  std::size_t max_serving_load_subscribers = 64;
  std::size_t max_pool_streams_total = 64;
  std::chrono::milliseconds catalog_heartbeat{10000};  // 0 disables
  std::chrono::milliseconds readiness_heartbeat{10000};
  std::chrono::milliseconds pool_heartbeat{10000};
  std::chrono::milliseconds snapshot_progress_timeout{60000};
  metrics::RelayMetrics* metrics = nullptr;  // none: nothing is recorded
};

struct RelayServicePeers {
  std::shared_ptr<CatalogRegistry> catalog_view;
  SnapshotEncodersActor snapshot_encoders;
  CatalogActor catalog;
  TopologyProjectorActor topology;
  LoadWindowActor load;
  ServingLoadWindowActor serving_load;
};

// Every RPC is a raw method: a stream's frames go out as bytes serialized once and shared by
// its streams (grpc_gateway/wire_write.hpp), and every request is parsed here, so that one that
// does not parse is judged and answered as the contract's errors are (decisions.md#d46).
using RawService = v1::KvEventRelay::WithRawCallbackMethod_GetRelayInfo<
    v1::KvEventRelay::WithRawCallbackMethod_WatchKvPoolCatalog<v1::KvEventRelay::WithRawCallbackMethod_SubscribeKvPool<
        v1::KvEventRelay::WithRawCallbackMethod_SubscribeServingReadiness<
            v1::KvEventRelay::WithRawCallbackMethod_SubscribeKvPoolLoad<
                v1::KvEventRelay::WithRawCallbackMethod_SubscribeServingLoad<v1::KvEventRelay::Service>>>>>>;

class RelayService final : public RawService {
 public:
  RelayService(caf::actor_system& system, RelayServiceConfig config, RelayServicePeers peers);

  // A RelayInfoRequest, a RelayInfo.
  grpc::ServerUnaryReactor* GetRelayInfo(grpc::CallbackServerContext* context, const grpc::ByteBuffer* request,
                                         grpc::ByteBuffer* response) override;
  RawStream* WatchKvPoolCatalog(grpc::CallbackServerContext* context, const grpc::ByteBuffer* request) override;
  RawStream* SubscribeKvPool(grpc::CallbackServerContext* context, const grpc::ByteBuffer* request) override;
  RawStream* SubscribeServingReadiness(grpc::CallbackServerContext* context, const grpc::ByteBuffer* request) override;
  RawStream* SubscribeKvPoolLoad(grpc::CallbackServerContext* context, const grpc::ByteBuffer* request) override;
  RawStream* SubscribeServingLoad(grpc::CallbackServerContext* context, const grpc::ByteBuffer* request) override;

  // From now on every new call is refused with UNAVAILABLE (graceful drain).
  void begin_drain() { draining_ = true; }
  // The permits of one stream kind: "catalog", "readiness", "load", "serving_load" or "pool"
  // (std::invalid_argument for any other).
  const StreamLimit& limit_of(std::string_view kind) const;
  // Until every stream of every kind has ended, or `deadline`: how many are still open.
  std::size_t await_streams_ended(std::chrono::system_clock::time_point deadline) const;

 private:
  // Each returns the refusal, or nullptr when the call may go on.
  template <class Request>
  RawStream* read_request(grpc::CallbackServerContext* context, metrics::Rpc rpc, const grpc::ByteBuffer& bytes,
                          Request& request);
  // `caller`: whom the relay's log lines name (caller_of in relay_service.cpp).
  RawStream* admit(grpc::CallbackServerContext* context, metrics::Rpc rpc, StreamLimit& limit,
                   std::shared_ptr<StreamLimit::Permit>& permit, const std::string& caller);
  RawStream* refuse(grpc::CallbackServerContext* context, metrics::Rpc rpc, const RpcStatus& status,
                    const std::string& caller, std::string result = {});
  // A catalog, readiness or load stream: its request read and admitted under `limit`, then a
  // stream actor (`behavior`, given `setting`: a heartbeat or outbox limits) fed by `source`.
  template <class Message, class Request, class Source, class Behavior, class Setting>
  RawStream* open_plane(grpc::CallbackServerContext* context, const grpc::ByteBuffer& bytes, metrics::Rpc rpc,
                        StreamLimit& limit, const Source& source, std::string_view plane,
                        metrics::ActorKind stream_kind, Behavior behavior, Setting setting);
  OutboxLimits window_outbox() const;
  RawStream* open_pool_stream(grpc::CallbackServerContext* context, const v1::SubscribeKvPoolRequest& request);
  StreamRelease admitted(metrics::Rpc rpc, const std::string& caller, grpc::CallbackServerContext* context,
                         std::vector<std::shared_ptr<StreamLimit::Permit>> permits);

  caf::actor_system& system_;
  RelayServiceConfig config_;
  RelayServicePeers peers_;
  std::atomic<bool> draining_{false};
  StreamLimit catalog_streams_;
  StreamLimit readiness_streams_;
  StreamLimit load_streams_;
  StreamLimit serving_load_streams_;
  StreamLimit pool_streams_;
};

}  // namespace kvrelay::gateway
