#include "grpc_gateway/relay_service.hpp"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <array>
#include <stdexcept>

#include "actors/pool_stream.hpp"
#include "actors/stream_actors.hpp"
#include "core/pool_label.hpp"
#include "core/rate_limited_log.hpp"
#include "core/wire_validation.hpp"
#include "grpc_gateway/stream_reactor.hpp"

namespace kvrelay::gateway {

namespace {

RpcStatus rejection(const wire::Error& error) {
  return RpcStatus::relay_error(wire::request_error_reason(error),
                                error.field.empty() ? error.message : error.field + ": " + error.message);
}

// A request's bytes in one piece, to be read again when they did not parse.
std::string flatten(const grpc::ByteBuffer& bytes) {
  std::vector<grpc::Slice> slices;
  std::string whole;
  if (!bytes.Dump(&slices).ok()) return whole;
  for (const grpc::Slice& slice : slices) whole.append(reinterpret_cast<const char*>(slice.begin()), slice.size());
  return whole;
}

RpcStatus draining_status() {
  return RpcStatus::relay_error(v1::RELAY_ERROR_REASON_PUBLICATION_UNAVAILABLE, "the relay is shutting down");
}

// Why a stream ended, as its log line says it: the reason and what the relay told the client.
std::string ending_of(const RpcStatus& status) {
  if (status.code == StatusCode::kCancelled) return "client cancel";
  if (status.ok()) return "clean end";
  if (!status.reason) return status.message;
  return fmt::format("{} ({})", reason_name(*status.reason), status.message);
}

// Who asked, as the relay's log lines name a caller: the request's subscriber_id once it is
// known to be one (a refused request's may be too long, or not text at all).
std::string caller_of(std::string_view subscriber_id) {
  if (wire::check_subscriber_id(subscriber_id)) return "";
  return fmt::format(" subscriber_id={}", subscriber_id);
}

// A stream fed by a long-lived source actor (catalog, readiness, load): the stream actor
// subscribes itself, and ends if its source goes away.
template <class Message, class Behavior, class... Args>
RawStream* open_watch(caf::actor_system& system, StreamRelease release, metrics::RelayMetrics* metrics,
                      grpc::CallbackServerContext* context, UpdateSourceActor<Message> source, Behavior behavior,
                      Args&&... args) {
  auto* reactor = new StreamReactor<Message>(context, std::move(release), metrics);
  StreamSinkPtr<Message> sink = reactor->link();
  auto stream = system.spawn(behavior, std::move(sink), std::move(source), std::forward<Args>(args)...);
  reactor->link()->bind(stream);
  return reactor;
}

// The request as the typed API would have parsed it, then validated: what is wrong with it.
template <class Request>
wire::Status parse_request(const grpc::ByteBuffer& bytes, Request& request) {
  if (!read_message(bytes, request)) return wire::unparsable_request(flatten(bytes), *Request::descriptor());
  return wire::check_request(request);
}

}  // namespace

RelayService::RelayService(caf::actor_system& system, RelayServiceConfig config, RelayServicePeers peers)
    : system_(system),
      config_(std::move(config)),
      peers_(std::move(peers)),
      catalog_streams_("catalog stream", config_.max_catalog_subscribers),
      readiness_streams_("readiness stream", config_.max_readiness_subscribers),
      load_streams_("load stream", config_.max_load_subscribers),
      serving_load_streams_("serving-load stream", config_.max_serving_load_subscribers),
      pool_streams_("total pool stream", config_.max_pool_streams_total) {}

const StreamLimit& RelayService::limit_of(std::string_view kind) const {
  if (kind == "catalog") return catalog_streams_;
  if (kind == "readiness") return readiness_streams_;
  if (kind == "load") return load_streams_;
  if (kind == "serving_load") return serving_load_streams_;
  if (kind == "pool") return pool_streams_;
  throw std::invalid_argument(fmt::format("no stream limit named '{}'", kind));
}

std::size_t RelayService::await_streams_ended(std::chrono::system_clock::time_point deadline) const {
  std::size_t open = 0;
  for (const StreamLimit* limit :
       {&catalog_streams_, &readiness_streams_, &load_streams_, &serving_load_streams_, &pool_streams_}) {
    open += limit->await_drained(deadline);
  }
  return open;
}

template <class Request>
RawStream* RelayService::read_request(grpc::CallbackServerContext* context, metrics::Rpc rpc,
                                      const grpc::ByteBuffer& bytes, Request& request) {
  if (auto error = parse_request(bytes, request)) {
    return refuse(context, rpc, rejection(*error), caller_of(request.subscriber_id()));
  }
  return nullptr;
}

// A call refused before its stream started, counted by `result` (default: from the status)
// and logged with whom it refused (`caller`: caller_of's words, and the pool it asked for),
// rate-limited per RPC: a client retrying in a loop must not flood the log, nor hide the
// refusals of other RPCs' callers.
RawStream* RelayService::refuse(grpc::CallbackServerContext* context, metrics::Rpc rpc, const RpcStatus& status,
                                const std::string& caller, std::string result) {
  if (config_.metrics != nullptr) {
    config_.metrics->stream_refused(rpc, result.empty() ? metrics::refusal_result(status) : result);
  }
  static std::array<RateLimitedLog, metrics::kLabelCount<metrics::Rpc>> refused_logs;
  refused_logs[static_cast<std::size_t>(rpc)].warn([&] {
    return fmt::format("refused {} from {}{}: {}", metrics::label(rpc), context->peer(), caller, status.message);
  });
  return new Refused<RawStream>(to_grpc(context, status));
}

// The common admission steps after request validation: refuse while draining, then take a
// permit without waiting. Returns the refusal, or nullptr with `permit` set.
RawStream* RelayService::admit(grpc::CallbackServerContext* context, metrics::Rpc rpc, StreamLimit& limit,
                               std::shared_ptr<StreamLimit::Permit>& permit, const std::string& caller) {
  if (draining_) return refuse(context, rpc, draining_status(), caller, "draining");
  permit = limit.try_acquire();
  if (!permit) {
    return refuse(context, rpc, RpcStatus::relay_error(v1::RELAY_ERROR_REASON_RESOURCE_LIMIT, limit.refusal()), caller);
  }
  return nullptr;
}

namespace {

// A stream's admission permits, held until its call is over and then returned newest first:
// whoever awaits the total pool-stream permit then finds the per-pool one already back, and is
// not refused by a limit that is about to free up.
struct HeldPermits {
  std::vector<std::shared_ptr<StreamLimit::Permit>> permits;
  ~HeldPermits() {
    while (!permits.empty()) permits.pop_back();
  }
};

}  // namespace

// Logs and counts the admission now, and the end when the relay ends the stream; the permits
// come back when the call is over (stream_reactor.hpp).
StreamRelease RelayService::admitted(metrics::Rpc rpc, const std::string& caller, grpc::CallbackServerContext* context,
                                     std::vector<std::shared_ptr<StreamLimit::Permit>> permits) {
  spdlog::info("subscriber admitted: rpc={}{} peer={}", metrics::rpc_name(rpc), caller, context->peer());
  if (config_.metrics != nullptr) config_.metrics->stream_admitted(rpc);
  auto held = std::make_shared<HeldPermits>(HeldPermits{std::move(permits)});
  auto ended = [rpc, caller, peer = context->peer(), held = std::weak_ptr<HeldPermits>(held),
                recorder = config_.metrics, draining = &draining_](const RpcStatus& status) {
    if (recorder != nullptr) recorder->stream_ended(rpc, metrics::termination_reason(status, *draining));
    if (const auto permits = held.lock()) {
      for (const auto& permit : permits->permits) permit->mark_ending();
    }
    spdlog::info("subscriber ended: rpc={}{} peer={} reason={}", metrics::rpc_name(rpc), caller, peer,
                 ending_of(status));
  };
  return {std::move(ended), std::move(held)};
}

grpc::ServerUnaryReactor* RelayService::GetRelayInfo(grpc::CallbackServerContext* context,
                                                     const grpc::ByteBuffer* bytes, grpc::ByteBuffer* response) {
  auto* reactor = context->DefaultReactor();
  v1::RelayInfoRequest request;
  if (draining_) {
    reactor->Finish(to_grpc(context, draining_status()));
  } else if (auto error = parse_request(*bytes, request)) {
    reactor->Finish(to_grpc(context, rejection(*error)));
  } else {
    v1::RelayInfo info;
    info.set_protocol_version(wire::kProtocolVersion);
    *info.mutable_relay() = config_.relay;
    info.set_contract_marker(wire::kContractMarker);
    write_response(info, response);
    reactor->Finish(grpc::Status::OK);
  }
  return reactor;
}

template <class Message, class Request, class Source, class Behavior, class Setting>
RawStream* RelayService::open_plane(grpc::CallbackServerContext* context, const grpc::ByteBuffer& bytes,
                                    metrics::Rpc rpc, StreamLimit& limit, const Source& source, std::string_view plane,
                                    metrics::ActorKind stream_kind, Behavior behavior, Setting setting) {
  Request request;
  if (auto* refused = read_request(context, rpc, bytes, request)) return refused;
  const std::string caller = caller_of(request.subscriber_id());
  std::shared_ptr<StreamLimit::Permit> permit;
  if (auto* refused = admit(context, rpc, limit, permit, caller)) return refused;
  return open_watch<Message>(system_, admitted(rpc, caller, context, {permit}), config_.metrics, context, source,
                             behavior, std::string(plane), setting,
                             metrics::mailbox_gauge(config_.metrics, stream_kind));
}

RawStream* RelayService::WatchKvPoolCatalog(grpc::CallbackServerContext* context, const grpc::ByteBuffer* bytes) {
  return open_plane<CatalogBroadcast, v1::WatchKvPoolCatalogRequest>(
      context, *bytes, metrics::Rpc::kWatchKvPoolCatalog, catalog_streams_, peers_.catalog, "catalog",
      metrics::ActorKind::kCatalogStream, latest_value_stream<CatalogBroadcast>, config_.catalog_heartbeat);
}

RawStream* RelayService::SubscribeServingReadiness(grpc::CallbackServerContext* context,
                                                   const grpc::ByteBuffer* bytes) {
  return open_plane<ReadinessBroadcast, v1::SubscribeServingReadinessRequest>(
      context, *bytes, metrics::Rpc::kSubscribeServingReadiness, readiness_streams_, peers_.topology, "readiness",
      metrics::ActorKind::kReadinessStream, latest_value_stream<ReadinessBroadcast>, config_.readiness_heartbeat);
}

// A window stream lags when more than load_outbox_windows windows wait for the client.
OutboxLimits RelayService::window_outbox() const {
  return {config_.load_outbox_windows, std::numeric_limits<std::size_t>::max() / 2};
}

RawStream* RelayService::SubscribeKvPoolLoad(grpc::CallbackServerContext* context, const grpc::ByteBuffer* bytes) {
  return open_plane<LoadBroadcast, v1::SubscribeKvPoolLoadRequest>(
      context, *bytes, metrics::Rpc::kSubscribeKvPoolLoad, load_streams_, peers_.load, "load",
      metrics::ActorKind::kLoadStream, bounded_stream<LoadBroadcast>, window_outbox());
}

RawStream* RelayService::SubscribeServingLoad(grpc::CallbackServerContext* context, const grpc::ByteBuffer* bytes) {
  return open_plane<ServingLoadBroadcast, v1::SubscribeServingLoadRequest>(
      context, *bytes, metrics::Rpc::kSubscribeServingLoad, serving_load_streams_, peers_.serving_load, "serving load",
      metrics::ActorKind::kServingLoadStream, bounded_stream<ServingLoadBroadcast>, window_outbox());
}

RawStream* RelayService::SubscribeKvPool(grpc::CallbackServerContext* context, const grpc::ByteBuffer* bytes) {
  v1::SubscribeKvPoolRequest request;
  if (auto* refused = read_request(context, metrics::Rpc::kSubscribeKvPool, *bytes, request)) {
    return refused;
  }
  return open_pool_stream(context, request);
}

RawStream* RelayService::open_pool_stream(grpc::CallbackServerContext* context,
                                          const v1::SubscribeKvPoolRequest& request) {
  using Message = wire::FilterFrame;
  constexpr auto rpc = metrics::Rpc::kSubscribeKvPool;
  // The catalog is read before the total permit is taken, though its outcome is reported after
  // (the contract's order): once a stream counts as open it was admitted against this view,
  // never against a catalog that changed in between.
  const v1::ProducerIdentity& expected = request.expected_producer();
  const auto view = peers_.catalog_view->current();
  const auto pool = view->pools.find(wire::pool_key(expected.pool_id()));
  const std::string caller = fmt::format("{} pool={} layout_generation={}", caller_of(request.subscriber_id()),
                                         pool_label(expected.pool_id()), expected.layout_generation());
  std::shared_ptr<StreamLimit::Permit> permit;
  if (auto* refused = admit(context, rpc, pool_streams_, permit, caller)) return refused;
  if (pool == view->pools.end()) {
    return refuse(context, rpc,
                  RpcStatus::relay_error(v1::RELAY_ERROR_REASON_POOL_NOT_FOUND, "no active pool with that PoolId"),
                  caller);
  }
  const v1::ProducerIdentity& current = pool->second.descriptor.producer();
  if (wire::producer_key(current) != wire::producer_key(expected)) {
    return refuse(context, rpc,
                  RpcStatus::relay_error(v1::RELAY_ERROR_REASON_PRODUCER_CHANGED,
                                         "the pool is served by another producer generation; re-read the catalog"),
                  caller);
  }
  auto pool_permit = pool->second.subscribers->try_acquire();
  if (!pool_permit) {
    return refuse(context, rpc,
                  RpcStatus::relay_error(v1::RELAY_ERROR_REASON_RESOURCE_LIMIT, pool->second.subscribers->refusal()),
                  caller);
  }
  auto* reactor =
      new StreamReactor<Message>(context, admitted(rpc, caller, context, {permit, pool_permit}), config_.metrics);
  PoolStreamSpec spec{config_.relay, current, current.pool_id().dc_id(), current.ckf_format().seed(),
                      current.ckf_format().bucket_count()};
  StreamSinkPtr<Message> sink = reactor->link();
  SnapshotPacing pacing{peers_.snapshot_encoders, config_.snapshot_progress_timeout, config_.pool_heartbeat};
  auto stream = system_.spawn(pool_stream, std::move(sink), std::move(spec), config_.pool_outbox,
                              pool->second.publisher, std::move(pacing), config_.metrics);
  reactor->link()->bind(stream);  // the stream attaches itself once it holds an encoder permit
  return reactor;
}

}  // namespace kvrelay::gateway
