#pragma once
// The demo deployment (deploy/demo/topology.yaml) adapted for a test: written as a JSON
// topology file after every worker has been changed by the test.
#include <catch2/catch.hpp>

#include <google/protobuf/util/json_util.h>

#include <algorithm>
#include <fstream>
#include <functional>
#include <string>

#include "ingest/topology_file.hpp"
#include "tests/app/free_port.hpp"

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

// "scheme://host:PORT[/path]" with another port.
inline std::string with_port(const std::string& address, int port) {
  const auto authority = address.find("://") + 3;
  const auto end = std::min(address.find('/', authority), address.size());
  const auto colon = address.rfind(':', end);
  return address.substr(0, colon + 1) + std::to_string(port) + address.substr(end);
}

// The demo's workers on ports nothing else uses, so that a test's demo never meets another's.
inline void on_free_ports(ingest_v1::WorkerSpec& worker) {
  const auto move = [](const std::string& address) { return with_port(address, free_port()); };
  for (auto& source : *worker.mutable_kv_sources()) {
    auto* zmq = source.mutable_zmq();
    zmq->set_endpoint(move(zmq->endpoint()));
    zmq->set_replay_endpoint(move(zmq->replay_endpoint()));
  }
  worker.mutable_engine_metrics()->set_url(move(worker.engine_metrics().url()));
}

}  // namespace kvrelay::test
