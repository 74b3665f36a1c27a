#pragma once
// How a call or stream ends, independent of gRPC: a status code (numbered as gRPC's), a
// diagnostic message and, for relay-generated errors, the machine-readable reason that
// travels in the `kv-relay-error-reason` trailer.
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "dynamo/kvrelay/v1/relay.pb.h"

namespace kvrelay {

using RelayErrorReason = dynamo::kvrelay::v1::RelayErrorReason;

enum class StatusCode : std::uint8_t {
  kOk = 0,
  kCancelled = 1,
  kInvalidArgument = 3,
  kNotFound = 5,
  kResourceExhausted = 8,
  kFailedPrecondition = 9,
  kInternal = 13,
  kUnavailable = 14,
  kUnimplemented = 12,
};

struct RpcStatus {
  StatusCode code = StatusCode::kOk;
  std::string message;
  std::optional<RelayErrorReason> reason;

  bool ok() const { return code == StatusCode::kOk; }
  static RpcStatus Ok() { return {}; }
  // A relay error: the status code is the one the contract assigns to the reason.
  static RpcStatus relay_error(RelayErrorReason reason, std::string message);
  static RpcStatus invalid_argument(std::string message) {
    return {StatusCode::kInvalidArgument, std::move(message), std::nullopt};
  }
};

// The contract's status code for each RelayErrorReason (docs/protocol/errors.md#reason-table).
StatusCode status_code_for(RelayErrorReason reason);

// The exact enum name sent in the trailer, e.g. "RELAY_ERROR_REASON_SUBSCRIBER_LAGGED".
std::string_view reason_name(RelayErrorReason reason);

inline constexpr std::string_view kErrorReasonTrailer = "kv-relay-error-reason";

}  // namespace kvrelay
