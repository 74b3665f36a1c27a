#pragma once
// gRPC server reflection v1 (grpc.reflection.v1.ServerReflection) beside the v1alpha service
// that gRPC 1.51 provides: clients that ask only for v1 (newer grpcurl, Postman, grpcui) find
// the relay's services too (docs/protocol/rpcs.md#transport). Answers come from the descriptors
// compiled into the relay (protobuf's generated pool), as v1alpha's do.
#include <string>
#include <vector>

#include "grpc/reflection/v1/reflection.grpc.pb.h"

namespace kvrelay::gateway {

class ReflectionService final : public grpc::reflection::v1::ServerReflection::Service {
 public:
  // `services`: the fully qualified names of the services on this listener, as listed.
  explicit ReflectionService(std::vector<std::string> services) : services_(std::move(services)) {}

  grpc::Status ServerReflectionInfo(
      grpc::ServerContext* context,
      grpc::ServerReaderWriter<grpc::reflection::v1::ServerReflectionResponse,
                               grpc::reflection::v1::ServerReflectionRequest>* stream) override;

  // The answer to one request (pure: no stream, no context).
  grpc::reflection::v1::ServerReflectionResponse answer(
      const grpc::reflection::v1::ServerReflectionRequest& request) const;

 private:
  std::vector<std::string> services_;
};

}  // namespace kvrelay::gateway
