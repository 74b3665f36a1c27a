#include "client/lib/reaction.hpp"

#include <string>

#include "core/rpc_status.hpp"

namespace kvrelay::client {

namespace v1 = ::dynamo::kvrelay::v1;

std::string reason_trailer(const grpc::ClientContext& context) {
  const auto& trailers = context.GetServerTrailingMetadata();
  const auto it = trailers.find(grpc::string_ref(kErrorReasonTrailer.data(), kErrorReasonTrailer.size()));
  return it == trailers.end() ? std::string() : std::string(it->second.data(), it->second.size());
}

std::optional<v1::RelayErrorReason> parse_reason(std::string_view trailer) {
  v1::RelayErrorReason reason{};
  if (!v1::RelayErrorReason_Parse(std::string(trailer), &reason)) return std::nullopt;
  if (reason == v1::RELAY_ERROR_REASON_UNSPECIFIED) return std::nullopt;
  return reason;
}

namespace {

// Pool streams wait for the catalog where the contract says "refresh catalog" before a retry
// could succeed; the other planes have no catalog to wait for and reopen with backoff.
Reaction pool_or(Plane plane, Retry pool_retry, Retry other_retry) {
  return {plane == Plane::kPool ? pool_retry : other_retry};
}

Reaction by_status_code(Plane plane, grpc::StatusCode code) {
  switch (code) {
    case grpc::StatusCode::INVALID_ARGUMENT:
      return {Retry::kNever};
    case grpc::StatusCode::NOT_FOUND:
      return pool_or(plane, Retry::kAwaitNewCatalog, Retry::kVerifyRelay);
    case grpc::StatusCode::FAILED_PRECONDITION:
      return pool_or(plane, Retry::kAwaitNewProducer, Retry::kVerifyRelay);
    case grpc::StatusCode::UNIMPLEMENTED:
      // A relay that predates this additive RPC (docs/protocol/rpcs.md#subscribe-serving-load)
      // will not serve it on a retry: like UNSUPPORTED_FEATURE, the plane stops.
      return {plane == Plane::kServingLoad ? Retry::kNever : Retry::kBackoff};
    default:
      return {Retry::kBackoff};
  }
}

}  // namespace

Reaction react(Plane plane, const grpc::Status& status, std::optional<v1::RelayErrorReason> reason) {
  if (!reason) return by_status_code(plane, status.error_code());
  switch (*reason) {
    case v1::RELAY_ERROR_REASON_CONTRACT_MISMATCH:
      return {Retry::kNever, false, true};
    case v1::RELAY_ERROR_REASON_INVALID_REQUEST:
      return {Retry::kNever};
    case v1::RELAY_ERROR_REASON_UNSUPPORTED_FEATURE:
      return {plane == Plane::kPool ? Retry::kAwaitNewProducer : Retry::kNever, plane == Plane::kPool};
    case v1::RELAY_ERROR_REASON_POOL_NOT_FOUND:
      return pool_or(plane, Retry::kAwaitNewCatalog, Retry::kVerifyRelay);
    case v1::RELAY_ERROR_REASON_PRODUCER_CHANGED:
    case v1::RELAY_ERROR_REASON_INVALID_PUBLICATION:
      return pool_or(plane, Retry::kAwaitNewProducer, Retry::kVerifyRelay);
    case v1::RELAY_ERROR_REASON_RESOURCE_LIMIT:
    case v1::RELAY_ERROR_REASON_SUBSCRIBER_LAGGED:
    case v1::RELAY_ERROR_REASON_SNAPSHOT_PROGRESS_TIMEOUT:
    case v1::RELAY_ERROR_REASON_PUBLICATION_UNAVAILABLE:
    case v1::RELAY_ERROR_REASON_INTERNAL:
      return {Retry::kBackoff};
    default:
      return by_status_code(plane, status.error_code());
  }
}

Reaction react_to_fault(const Fault& fault) {
  const bool other_contract = fault.kind == wire::to_string(wire::ErrorCode::kContractMarker) ||
                              fault.kind == wire::to_string(wire::ErrorCode::kProtocolVersion);
  return {.retry = other_contract ? Retry::kNever : Retry::kBackoff, .stop_relay = other_contract};
}

}  // namespace kvrelay::client
