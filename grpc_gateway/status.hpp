#pragma once
// What a call begins and ends with: a raw method's request read and its response written;
// RpcStatus -> grpc::Status, with the reason in the `kv-relay-error-reason` trailer; a call
// refused before it started.
#include <grpcpp/grpcpp.h>
#include <grpcpp/impl/codegen/proto_utils.h>

#include "core/rpc_status.hpp"

namespace kvrelay::gateway {

// Adds the trailer (when the status carries a reason) and returns the gRPC status.
inline grpc::Status to_grpc(grpc::ServerContextBase* context, const RpcStatus& status) {
  if (status.reason) {
    context->AddTrailingMetadata(std::string(kErrorReasonTrailer), std::string(reason_name(*status.reason)));
  }
  return grpc::Status(static_cast<grpc::StatusCode>(status.code), status.message);
}

// A raw method's request parsed into `message`: false when its bytes do not parse. `bytes` is
// left as it was (the copy Deserialize consumes shares its slices).
template <class Message>
bool read_message(const grpc::ByteBuffer& bytes, Message& message) {
  grpc::ByteBuffer copy(bytes);
  return grpc::SerializationTraits<Message>::Deserialize(&copy, &message).ok();
}

// `response` serialized into a raw method's response buffer, before the call finishes OK.
template <class Response>
void write_response(const Response& response, grpc::ByteBuffer* buffer) {
  bool own_buffer = false;
  (void)grpc::SerializationTraits<Response>::Serialize(response, buffer, &own_buffer);
}

// A call refused before it started: trailers-only, with `status`. No shared state: Finish is
// called in the constructor (gRPC holds it until the reactor is bound), OnDone deletes it.
template <class Reactor>
class Refused final : public Reactor {
 public:
  explicit Refused(grpc::Status status) { this->Finish(std::move(status)); }
  void OnDone() override { delete this; }
};

}  // namespace kvrelay::gateway
