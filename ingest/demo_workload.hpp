#pragma once
// The built-in demo: a small fake vLLM fleet on loopback that the relay reads exactly as it
// reads real engines. For every ZeroMQ KV source of the topology whose endpoint is a loopback
// address, the demo binds a fake engine core there (and its replay socket); for every worker
// whose engine metrics URL is on loopback, a fake Prometheus page. Conversations share a few
// system prompts and grow turn by turn; every engine caches the prompts it serves, evicts its
// least recently used blocks at capacity, and reports its occupancy on its page. Once told the
// relay's ingest address, the demo's frontends and routers report their serving load there.
#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "kvrelay/ingest/v1/ingest.grpc.pb.h"

namespace kvrelay {

struct DemoOptions {
  ::kvrelay::ingest::v1::TopologyFile topology;
  std::uint32_t events_per_second = 2000;
  std::uint64_t seed = 1;
};

namespace demo {
class EngineCache;
class FakeMetricsServer;
class ServingLoadFeed;
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
  // From now on the demo's frontends and routers report to this ingest API, with the token of
  // `token_file` (the relay's --ingest-token-file) when it needs credentials.
  void report_serving_load_to(std::string ingest_address, std::optional<std::string> token_file = std::nullopt);
  // Stops the requests; the engines and pages stay up, as a fleet's stay while its relay drains.
  void stop_traffic();
  // Stops the requests, then closes every engine and page.
  void stop();

 private:
  void run();
  std::unique_ptr<::kvrelay::ingest::v1::RelayIngest::Stub> ingest_stub();  // none until told the address

  DemoOptions options_;
  std::vector<std::unique_ptr<demo::FakeMetricsServer>> pages_;
  std::vector<std::unique_ptr<demo::EngineCache>> engines_;
  std::unique_ptr<demo::ServingLoadFeed> serving_load_;
  std::mutex ingest_mutex_;
  std::optional<std::string> ingest_address_;  // guarded by ingest_mutex_
  std::optional<std::string> token_file_;      // guarded by ingest_mutex_
  std::atomic<bool> stopping_{false};
  std::thread thread_;
};

}  // namespace kvrelay
