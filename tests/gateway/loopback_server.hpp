#pragma once
// One gRPC service on an ephemeral 127.0.0.1 port, and a channel to it.
#include <grpcpp/grpcpp.h>
#include <catch2/catch.hpp>

#include <memory>
#include <string>

namespace kvrelay::gateway {

struct LoopbackServer {
  std::unique_ptr<grpc::Server> server;
  std::shared_ptr<grpc::Channel> channel;
};

inline LoopbackServer serve_on_loopback(grpc::Service& service) {
  int port = 0;
  grpc::ServerBuilder builder;
  builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
  builder.RegisterService(&service);
  LoopbackServer loopback{builder.BuildAndStart(), nullptr};
  REQUIRE(loopback.server);
  loopback.channel = grpc::CreateChannel("127.0.0.1:" + std::to_string(port), grpc::InsecureChannelCredentials());
  return loopback;
}

}  // namespace kvrelay::gateway
