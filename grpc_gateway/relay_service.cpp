#include "grpc_gateway/relay_service.hpp"

#include <spdlog/spdlog.h>

#include "actors/pool_stream.hpp"
#include "actors/stream_actors.hpp"
#include "core/wire_validation.hpp"
#include "grpc_gateway/stream_reactor.hpp"

namespace kvrelay::gateway {

namespace {

RpcStatus rejection(const wire::Error& error) {
  return RpcStatus::relay_error(wire::request_error_reason(error),
                                error.field.empty() ? error.message : error.field + ": " + error.message);
}

template <class Message>
grpc::ServerWriteReactor<Message>* refuse(grpc::CallbackServerContext* context, const RpcStatus& status) {
  return new RefusedStream<Message>(context, status);
}

void log_admitted(std::string_view rpc, const std::string& subscriber, grpc::CallbackServerContext* context) {
  spdlog::info("subscriber admitted: rpc={} subscriber_id={} peer={}", rpc, subscriber, context->peer());
}

std::string ending_of(const RpcStatus& status) {
  if (status.reason) return std::string(reason_name(*status.reason));
  if (status.code == StatusCode::kCancelled) return "client cancel";
  return status.ok() ? "clean end" : status.message;
}

StreamRelease log_ended(std::string rpc, std::string subscriber) {
  return [rpc = std::move(rpc), subscriber = std::move(subscriber)](const RpcStatus& status) {
    spdlog::info("subscriber ended: rpc={} subscriber_id={} reason={}", rpc, subscriber, ending_of(status));
  };
}

// A stream fed by a long-lived source actor (catalog, readiness, load).
template <class Message, class Behavior, class... Args>
grpc::ServerWriteReactor<Message>* open_watch(caf::actor_system& system, grpc::CallbackServerContext* context,
                                              std::string_view rpc, const std::string& subscriber,
                                              const caf::actor& source, Behavior behavior, Args&&... args) {
  log_admitted(rpc, subscriber, context);
  auto* reactor = new StreamReactor<Message>(context, log_ended(std::string(rpc), subscriber));
  StreamSinkPtr<Message> sink = reactor->link();
  caf::actor stream = system.spawn(behavior, std::move(sink), std::forward<Args>(args)...);
  reactor->link()->bind(stream);
  caf::anon_send(source, atoms::subscribe_atom_v, stream);
  return reactor;
}

}  // namespace

RelayService::RelayService(caf::actor_system& system, RelayServiceConfig config, RelayServicePeers peers)
    : system_(system), config_(std::move(config)), peers_(std::move(peers)) {}

grpc::ServerUnaryReactor* RelayService::GetRelayInfo(grpc::CallbackServerContext* context,
                                                     const v1::RelayInfoRequest* request,
                                                     v1::RelayInfo* response) {
  auto* reactor = context->DefaultReactor();
  if (auto error = wire::check_request(*request)) {
    reactor->Finish(to_grpc(context, rejection(*error)));
    return reactor;
  }
  response->set_protocol_version(wire::kProtocolVersion);
  *response->mutable_relay() = config_.relay;
  response->set_contract_marker(wire::kContractMarker);
  reactor->Finish(grpc::Status::OK);
  return reactor;
}

grpc::ServerWriteReactor<v1::KvPoolCatalogUpdate>* RelayService::WatchKvPoolCatalog(
    grpc::CallbackServerContext* context, const v1::WatchKvPoolCatalogRequest* request) {
  if (auto error = wire::check_request(*request)) return refuse<v1::KvPoolCatalogUpdate>(context, rejection(*error));
  return open_watch<v1::KvPoolCatalogUpdate>(system_, context, "WatchKvPoolCatalog", request->subscriber_id(),
                                             peers_.catalog, latest_value_stream<v1::KvPoolCatalogUpdate>);
}

grpc::ServerWriteReactor<v1::ServingReadinessUpdate>* RelayService::SubscribeServingReadiness(
    grpc::CallbackServerContext* context, const v1::SubscribeServingReadinessRequest* request) {
  if (auto error = wire::check_request(*request)) return refuse<v1::ServingReadinessUpdate>(context, rejection(*error));
  return open_watch<v1::ServingReadinessUpdate>(system_, context, "SubscribeServingReadiness",
                                                request->subscriber_id(), peers_.topology,
                                                latest_value_stream<v1::ServingReadinessUpdate>);
}

grpc::ServerWriteReactor<v1::KvPoolLoadUpdate>* RelayService::SubscribeKvPoolLoad(
    grpc::CallbackServerContext* context, const v1::SubscribeKvPoolLoadRequest* request) {
  if (auto error = wire::check_request(*request)) return refuse<v1::KvPoolLoadUpdate>(context, rejection(*error));
  // A window stream lags when more than load_outbox_windows windows wait for the client.
  const OutboxLimits limits{config_.load_outbox_windows, std::numeric_limits<std::size_t>::max() / 2};
  return open_watch<v1::KvPoolLoadUpdate>(system_, context, "SubscribeKvPoolLoad", request->subscriber_id(),
                                          peers_.load, bounded_stream<v1::KvPoolLoadUpdate>, limits);
}

grpc::ServerWriteReactor<v1::FilterUpdate>* RelayService::SubscribeKvPool(grpc::CallbackServerContext* context,
                                                                          const v1::SubscribeKvPoolRequest* request) {
  if (auto error = wire::check_request(*request)) return refuse<v1::FilterUpdate>(context, rejection(*error));
  const v1::ProducerIdentity& expected = request->expected_producer();
  const auto view = peers_.catalog_view->current();
  const auto pool = view->pools.find(wire::pool_key(expected.pool_id()));
  if (pool == view->pools.end()) {
    return refuse<v1::FilterUpdate>(
        context, RpcStatus::relay_error(v1::RELAY_ERROR_REASON_POOL_NOT_FOUND, "no active pool with that PoolId"));
  }
  const v1::ProducerIdentity& current = pool->second.descriptor.producer();
  if (wire::producer_key(current) != wire::producer_key(expected)) {
    return refuse<v1::FilterUpdate>(
        context, RpcStatus::relay_error(v1::RELAY_ERROR_REASON_PRODUCER_CHANGED,
                                        "the pool is served by another producer generation; re-read the catalog"));
  }
  log_admitted("SubscribeKvPool", request->subscriber_id(), context);
  auto* reactor = new StreamReactor<v1::FilterUpdate>(context, log_ended("SubscribeKvPool", request->subscriber_id()));
  PoolStreamSpec spec{config_.relay, current, current.pool_id().dc_id(), current.ckf_format().seed(),
                      current.ckf_format().bucket_count()};
  StreamSinkPtr<v1::FilterUpdate> sink = reactor->link();
  caf::actor stream = system_.spawn(pool_stream, std::move(sink), std::move(spec), config_.pool_outbox,
                                    pool->second.publisher);
  reactor->link()->bind(stream);
  caf::anon_send(pool->second.publisher, atoms::attach_atom_v, stream);
  return reactor;
}

grpc::ServerWriteReactor<v1::ServingLoadUpdate>* RelayService::SubscribeServingLoad(
    grpc::CallbackServerContext* context, const v1::SubscribeServingLoadRequest*) {
  // decisions.md row 2: in the schema, not served yet; never a fake window.
  return refuse<v1::ServingLoadUpdate>(
      context, RpcStatus{StatusCode::kUnimplemented, "SubscribeServingLoad is not implemented by this relay", {}});
}

}  // namespace kvrelay::gateway
