#pragma once
// The built-in demo: a small fake vLLM fleet on loopback that the relay reads exactly as it
// reads real engines. For every ZeroMQ KV source of the topology whose endpoint is a loopback
// address, the demo binds a fake engine core there (and its replay socket); for every worker
// whose engine metrics URL is on loopback, a fake Prometheus page. Conversations share a few
// system prompts and grow turn by turn; every engine caches the prompts it serves, evicts its
// least recently used blocks at capacity, and reports its occupancy on its page.
#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "kvrelay/ingest/v1/ingest.pb.h"

namespace kvrelay {

struct DemoOptions {
  ::kvrelay::ingest::v1::TopologyFile topology;
  std::uint32_t events_per_second = 2000;
  std::uint64_t seed = 1;
};

namespace demo {
class EngineCache;
class FakeMetricsServer;
}  // namespace demo

class DemoWorkload {
 public:
  explicit DemoWorkload(DemoOptions options);
  ~DemoWorkload();
  DemoWorkload(const DemoWorkload&) = delete;
  DemoWorkload& operator=(const DemoWorkload&) = delete;

  // Binds every fake engine and page the topology allows (logging the ones it cannot) and
  // starts publishing; returns the number of engines started.
  std::size_t start();
  void stop();

 private:
  void run();

  DemoOptions options_;
  std::vector<std::unique_ptr<demo::FakeMetricsServer>> pages_;
  std::vector<std::unique_ptr<demo::EngineCache>> engines_;
  std::atomic<bool> stopping_{false};
  std::thread thread_;
};

}  // namespace kvrelay
