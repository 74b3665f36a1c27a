#pragma once
// The built-in demo: a workload generator that drives a relay's ingest API the way a small
// inference fleet would. Conversations share a few system prompts and grow turn by turn;
// every push source caches the prompts it serves and evicts its least recently used blocks
// at capacity; each rank reports its KV occupancy.
#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>

#include "kvrelay/ingest/v1/ingest.pb.h"

namespace kvrelay {

struct DemoOptions {
  std::string ingest_address;
  ::kvrelay::ingest::v1::TopologyFile topology;
  std::uint32_t events_per_second = 2000;
  std::uint64_t seed = 1;
};

class DemoWorkload {
 public:
  explicit DemoWorkload(DemoOptions options);
  ~DemoWorkload();
  DemoWorkload(const DemoWorkload&) = delete;
  DemoWorkload& operator=(const DemoWorkload&) = delete;

  void start();
  void stop();

 private:
  void run();

  DemoOptions options_;
  std::atomic<bool> stopping_{false};
  std::thread thread_;
};

}  // namespace kvrelay
