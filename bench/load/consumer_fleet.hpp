#pragma once
// kvrelay-bench's consumers: M instances of the consumer library, each its own router with its
// own gRPC channel and streams, all replicating every pool of one relay. Each times the
// producers' probe blocks: from just before the batch was written to the moment that
// consumer's replica has applied the first delta whose bucket image holds the block's
// fingerprint (the library's delta tap).
#include <atomic>
#include <chrono>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "bench/load/sources.hpp"
#include "core/ckf.hpp"
#include "kvrelay/client/consumer.hpp"

namespace kvrelay::bench {

struct FleetTotals {
  std::vector<double> latencies_ms;  // every timed probe of every consumer, sorted
  std::uint64_t probes_unseen = 0;   // per consumer: the probes it never saw, summed
  std::uint64_t deltas = 0;          // deltas applied in the measured seconds, all consumers
  std::uint64_t delta_bytes = 0;     // their CBI1 payloads' bytes
  std::uint64_t lagged_streams = 0;  // pool streams that had to start over (re-subscribed)
};

class ConsumerFleet {
 public:
  ConsumerFleet(const std::string& wan_address, std::size_t consumers);
  ~ConsumerFleet();

  // Blocks until every consumer holds the complete snapshot of all `pools` pools (the ones
  // the push sources feed); false after `timeout`.
  bool await_installed(std::size_t pools, std::chrono::milliseconds timeout);
  // Why a consumer does not hold them yet: the first such consumer's stream errors.
  std::string install_problem(std::size_t pools) const;

  // From now on probes are timed and deltas counted.
  void start_measuring();
  // The measured seconds are over: deltas are no longer counted (the rates divide by those
  // seconds), while probes sent in them are still timed until finish().
  void end_window() { counting_.store(false, std::memory_order_release); }
  void expect(const Probe& probe);
  std::uint64_t deltas_so_far() const { return deltas_.load(std::memory_order_relaxed); }
  // Waits up to `grace` for probes still in flight, stops every consumer, and sums up.
  FleetTotals finish(std::chrono::milliseconds grace);

 private:
  struct Member;
  struct PoolAddress {
    std::string pool_key;  // the producer's pool id, serialized
    ckf::Addressing addressing;
    std::uint64_t bucket_count;
  };

  std::vector<std::unique_ptr<Member>> members_;
  std::vector<PoolAddress> pools_;                     // by pool index, once installed
  std::vector<std::uint64_t> subscriptions_at_start_;  // per member and pool
  std::atomic<bool> measuring_{false};                 // probes are timed
  std::atomic<bool> counting_{false};                  // deltas are counted: the measured seconds
  std::atomic<std::uint64_t> deltas_{0};
  std::atomic<std::uint64_t> delta_bytes_{0};
};

}  // namespace kvrelay::bench
