#pragma once
// RpcStatus -> grpc::Status, with the reason in the `kv-relay-error-reason` trailer.
#include <grpcpp/grpcpp.h>

#include "core/rpc_status.hpp"

namespace kvrelay::gateway {

// Adds the trailer (when the status carries a reason) and returns the gRPC status.
inline grpc::Status to_grpc(grpc::ServerContextBase* context, const RpcStatus& status) {
  if (status.reason) {
    context->AddTrailingMetadata(std::string(kErrorReasonTrailer), std::string(reason_name(*status.reason)));
  }
  return grpc::Status(static_cast<grpc::StatusCode>(status.code), status.message);
}

}  // namespace kvrelay::gateway
