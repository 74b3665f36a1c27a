#include "core/rpc_status.hpp"

namespace kvrelay {

namespace v1 = dynamo::kvrelay::v1;

StatusCode status_code_for(RelayErrorReason reason) {
  switch (reason) {
    case v1::RELAY_ERROR_REASON_CONTRACT_MISMATCH:
    case v1::RELAY_ERROR_REASON_UNSUPPORTED_FEATURE:
    case v1::RELAY_ERROR_REASON_PRODUCER_CHANGED:
    case v1::RELAY_ERROR_REASON_INVALID_PUBLICATION:
      return StatusCode::kFailedPrecondition;
    case v1::RELAY_ERROR_REASON_INVALID_REQUEST:
      return StatusCode::kInvalidArgument;
    case v1::RELAY_ERROR_REASON_POOL_NOT_FOUND:
      return StatusCode::kNotFound;
    case v1::RELAY_ERROR_REASON_RESOURCE_LIMIT:
    case v1::RELAY_ERROR_REASON_SUBSCRIBER_LAGGED:
    case v1::RELAY_ERROR_REASON_SNAPSHOT_PROGRESS_TIMEOUT:
      return StatusCode::kResourceExhausted;
    case v1::RELAY_ERROR_REASON_PUBLICATION_UNAVAILABLE:
      return StatusCode::kUnavailable;
    default:
      return StatusCode::kInternal;
  }
}

std::string_view reason_name(RelayErrorReason reason) { return v1::RelayErrorReason_Name(reason); }

RpcStatus RpcStatus::relay_error(RelayErrorReason reason, std::string message) {
  return {status_code_for(reason), std::move(message), reason};
}

}  // namespace kvrelay
