#pragma once
// The demo deployment (deploy/demo/topology.yaml) adapted for a test: written as a JSON
// topology file after every worker has been changed by the test.
#include <catch2/catch.hpp>

#include <google/protobuf/util/json_util.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <fstream>
#include <functional>
#include <regex>
#include <string>

#include "ingest/topology_file.hpp"

namespace kvrelay::test {

namespace ingest_v1 = ::kvrelay::ingest::v1;

inline std::string write_demo_topology(const std::string& name,
                                       const std::function<void(ingest_v1::WorkerSpec&)>& adapt) {
  auto topology = load_topology_file(std::string(KVRELAY_SOURCE_DIR) + "/deploy/demo/topology.yaml");
  REQUIRE(topology.has_value());
  for (auto& endpoint : *topology->mutable_endpoints()) {
    for (auto& worker : *endpoint.mutable_workers()) adapt(worker);
  }
  std::string json;
  REQUIRE(google::protobuf::util::MessageToJsonString(*topology, &json).ok());
  const std::string path = std::string(KVRELAY_TEST_TMP_DIR) + "/" + name + ".json";
  std::ofstream(path) << json;
  return path;
}

// The demo's workers fed through the ingest API instead of their engines.
inline void fed_by_push(ingest_v1::WorkerSpec& worker) {
  for (auto& source : *worker.mutable_kv_sources()) source.mutable_push();
  worker.clear_engine_metrics();
}

// A TCP port on 127.0.0.1 that nothing listens on now.
inline int free_port() {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  REQUIRE(fd >= 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  REQUIRE(bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof address) == 0);
  socklen_t length = sizeof address;
  REQUIRE(getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length) == 0);
  close(fd);
  return ntohs(address.sin_port);
}

// The demo's workers on ports nothing else uses, so that a test's demo never meets another's.
inline void on_free_ports(ingest_v1::WorkerSpec& worker) {
  const std::regex port(":[0-9]+");
  const auto move = [&](const std::string& address) {
    return std::regex_replace(address, port, ":" + std::to_string(free_port()),
                              std::regex_constants::format_first_only);
  };
  for (auto& source : *worker.mutable_kv_sources()) {
    auto* zmq = source.mutable_zmq();
    zmq->set_endpoint(move(zmq->endpoint()));
    zmq->set_replay_endpoint(move(zmq->replay_endpoint()));
  }
  worker.mutable_engine_metrics()->set_url(move(worker.engine_metrics().url()));
}

}  // namespace kvrelay::test
