#pragma once
// kvrelay-bench --baseline's clients: plain gRPC readers of kvrelay-raw-server's
// SubscribeKvPool, each on its own channel and thread, timing every frame from its send_ts_us
// (both ends on this machine's clock) to its arrival.
#include <atomic>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "bench/load/consumer_fleet.hpp"

namespace kvrelay::bench {

class RawFleet {
 public:
  RawFleet(const std::string& address, std::size_t clients);
  ~RawFleet();

  // Blocks until every client has received a frame; false after `timeout`.
  bool await_flowing(std::chrono::milliseconds timeout);
  void start_measuring() { measuring_.store(true, std::memory_order_release); }
  std::uint64_t frames_so_far() const { return frames_.load(std::memory_order_relaxed); }
  FleetTotals finish();

 private:
  struct Client;
  std::vector<std::unique_ptr<Client>> clients_;
  std::atomic<bool> measuring_{false};
  std::atomic<std::uint64_t> frames_{0};
  std::mutex mutex_;
  std::condition_variable flowing_changed_;
  std::size_t flowing_ = 0;  // clients that have received a frame
};

}  // namespace kvrelay::bench
