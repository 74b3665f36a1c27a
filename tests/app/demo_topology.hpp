#pragma once
// The demo deployment (deploy/demo/topology.yaml) adapted for a test: written as a JSON
// topology file after every worker has been changed by the test.
#include <catch2/catch.hpp>

#include <google/protobuf/util/json_util.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <fstream>
#include <functional>
#include <mutex>
#include <random>
#include <set>
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

// Whether a TCP listener could bind `port` on 127.0.0.1 now.
inline bool bindable(int port) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  REQUIRE(fd >= 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  address.sin_port = htons(static_cast<std::uint16_t>(port));
  const bool bound = bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof address) == 0;
  close(fd);
  return bound;
}

// The first port of the kernel's ephemeral range (what bind to port 0 and outgoing
// connections draw from).
inline int first_ephemeral_port() {
  int low = 32768;
  std::ifstream("/proc/sys/net/ipv4/ip_local_port_range") >> low;
  return low;
}

// A TCP port on 127.0.0.1 that nothing listens on now, never handed out before in this
// process, and below the ephemeral range: a port bound to 0 or an outgoing connection (the
// relay's own listeners and dials among them) cannot take it before the relay binds it, as
// they could take a port the kernel picked for a socket closed at once.
inline int free_port() {
  static std::mutex mutex;
  static std::set<int> handed_out;
  static std::mt19937 random{std::random_device{}()};
  std::uniform_int_distribution<int> pick(10000, first_ephemeral_port() - 1);
  std::lock_guard lock(mutex);
  for (int attempt = 0; attempt < 1000; ++attempt) {
    const int port = pick(random);
    if (handed_out.contains(port) || !bindable(port)) continue;
    handed_out.insert(port);
    return port;
  }
  FAIL("no free TCP port below the ephemeral range");
  return 0;
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
